import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/platform/config/config.ts';
import { ConfigError, NotFound } from '../../src/platform/errors.ts';
import { storePushes } from '../../src/store/pushes.ts';
import { addSource, listSources, seedSources, setSourceEnabled } from '../../src/store/sources.ts';
import { useTestDatabase } from '../support/db.ts';
import { pushRow } from '../support/push-rows.ts';

const t = useTestDatabase();

async function pushCount(): Promise<number> {
  const r = await t.db
    .selectFrom('push_events')
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .executeTakeFirstOrThrow();
  return Number(r.n);
}

describe('storePushes', () => {
  it('stores pushes with new pending actors and repositories, once', async () => {
    const a = pushRow();
    const b = pushRow({ actor: a.actor }); // same actor, other repository
    const first = await t.db
      .transaction()
      .execute((trx) => storePushes(trx, [a, b], { origin: 'poll' }));
    expect(first).toEqual({
      created: 2,
      newActors: 1,
      newRepositories: 2,
      commitsPending: 0,
      clashes: [],
    });
    const again = await t.db
      .transaction()
      .execute((trx) => storePushes(trx, [b, a], { origin: 'poll' }));
    expect(again).toEqual({
      created: 0,
      newActors: 0,
      newRepositories: 0,
      commitsPending: 0,
      clashes: [],
    });
    const actor = await t.db
      .selectFrom('actors')
      .selectAll()
      .where('id', '=', String(a.actor.id))
      .executeTakeFirstOrThrow();
    expect(actor).toMatchObject({ login: a.actor.login, enrichment_state: 'pending' });
  });

  it('updates a renamed actor and repository by id, keeping the newest name in a batch', async () => {
    const old = pushRow();
    await t.db.transaction().execute((trx) => storePushes(trx, [old], { origin: 'poll' }));
    const renamedOlder = pushRow({
      actor: { id: old.actor.id, login: 'middle-name' },
      createdAt: new Date(Date.UTC(2026, 10, 29, 9)),
    });
    const renamedNewest = pushRow({
      actor: { id: old.actor.id, login: 'new-name' },
      repository: { id: old.repository.id, fullName: 'new-owner/new-repo' },
      createdAt: new Date(Date.UTC(2026, 10, 29, 10)),
    });
    const r = await t.db
      .transaction()
      .execute((trx) => storePushes(trx, [renamedNewest, renamedOlder], { origin: 'poll' }));
    expect(r.newActors).toBe(0);
    const actor = await t.db
      .selectFrom('actors')
      .select('login')
      .where('id', '=', String(old.actor.id))
      .executeTakeFirstOrThrow();
    expect(actor.login).toBe('new-name');
    const repo = await t.db
      .selectFrom('repositories')
      .select('full_name')
      .where('id', '=', String(old.repository.id))
      .executeTakeFirstOrThrow();
    expect(repo.full_name).toBe('new-owner/new-repo');
  });

  it('keeps one row for a push delivered by webhook and then polled, and records its event id', async () => {
    const polled = pushRow();
    const webhook = { ...polled, id: null };
    const before = await pushCount();
    const w = await t.db
      .transaction()
      .execute((trx) => storePushes(trx, [webhook], { origin: 'webhook' }));
    expect(w.created).toBe(1);
    const p = await t.db
      .transaction()
      .execute((trx) => storePushes(trx, [polled], { origin: 'poll' }));
    expect(p.created).toBe(0);
    expect(await pushCount()).toBe(before + 1);
    const row = await t.db
      .selectFrom('push_events')
      .select(['id', 'origin'])
      .where('repository_id', '=', String(polled.repository.id))
      .executeTakeFirstOrThrow();
    expect(row).toEqual({ id: polled.id, origin: 'webhook' });
  });

  it('keeps one row for a push polled and then delivered by webhook', async () => {
    const polled = pushRow();
    await t.db.transaction().execute((trx) => storePushes(trx, [polled], { origin: 'poll' }));
    const w = await t.db
      .transaction()
      .execute((trx) => storePushes(trx, [{ ...polled, id: null }], { origin: 'webhook' }));
    expect(w.created).toBe(0);
    const rows = await t.db
      .selectFrom('push_events')
      .select('id')
      .where('repository_id', '=', String(polled.repository.id))
      .execute();
    expect(rows).toEqual([{ id: polled.id }]);
  });

  it('writes nothing when the transaction rolls back', async () => {
    const before = await pushCount();
    await expect(
      t.db.transaction().execute(async (trx) => {
        await storePushes(trx, [pushRow()], { origin: 'poll' });
        throw new Error('page failed');
      }),
    ).rejects.toThrow('page failed');
    expect(await pushCount()).toBe(before);
  });
});

describe('sources', () => {
  it('adds a source once, whatever the case of its target', async () => {
    const a = await addSource(t.db, { kind: 'user', target: 'Torvalds' }, 'live');
    const b = await addSource(t.db, { kind: 'user', target: 'torvalds' }, 'live');
    expect(a.created).toBe(true);
    expect(b).toEqual({ source: a.source, created: false });
    // Another mode is another source.
    expect((await addSource(t.db, { kind: 'user', target: 'torvalds' }, 'fixture')).created).toBe(
      true,
    );
  });

  it('seeds SOURCES idempotently in the process mode and returns only new ones', async () => {
    const config = loadConfig({
      SOURCES: 'public,repo:octocat/Hello-World,org:github',
      GITHUB_MODE: 'fixture',
    });
    const first = await seedSources(t.db, config);
    expect(first.map((s) => [s.kind, s.target, s.mode])).toEqual([
      ['public', null, 'fixture'],
      ['repo', 'octocat/Hello-World', 'fixture'],
      ['org', 'github', 'fixture'],
    ]);
    expect(await seedSources(t.db, config)).toEqual([]);
    // loadConfig already refuses a bad list; seedSources checks on its own too.
    await expect(seedSources(t.db, { ...config, sources: 'public,repo:nope' })).rejects.toThrow(
      ConfigError,
    );
  });

  it('disables and re-enables by id; enabling clears the backoff', async () => {
    const { source } = await addSource(t.db, { kind: 'org', target: 'nodejs' }, 'live');
    await t.db
      .updateTable('event_sources')
      .set({ consecutive_failures: 4, next_poll_at: new Date(Date.now() + 3_600_000) })
      .where('id', '=', source.id)
      .execute();
    expect((await setSourceEnabled(t.db, Number(source.id), false)).enabled).toBe(false);
    const enabled = await setSourceEnabled(t.db, Number(source.id), true);
    expect(enabled).toMatchObject({ enabled: true, consecutive_failures: 0 });
    expect(enabled.next_poll_at.getTime()).toBeLessThanOrEqual(Date.now());
    await expect(setSourceEnabled(t.db, 999_999, true)).rejects.toThrow(NotFound);
    expect((await listSources(t.db, { mode: 'live' })).map((s) => s.id)).toContain(source.id);
  });
});
