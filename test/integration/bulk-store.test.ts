import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import {
  type BulkStoreOptions,
  type BulkStoreResult,
  bulkStorePage,
  bulkStorePushes,
  dropStage,
  prepareStage,
} from '../../src/ingestion/bulk-store.ts';
import type { PushRow } from '../../src/ingestion/mapping.ts';
import { storePushes } from '../../src/ingestion/store.ts';
import { useTestDatabase } from '../support/db.ts';
import { pushRow } from '../support/push-rows.ts';

/**
 * The bulk store path (ADR 0040) keeps storePushes's rules — natural key, event id filled
 * into a webhook copy, newest name of a batch for polled pushes, lock order — whether its
 * rows come through the staging table (bulkStorePushes: archive chunks) or as parameter
 * arrays (bulkStorePage: a page). Every case runs through both.
 */

const t = useTestDatabase();

/** A push whose payload holds what COPY must escape (tab, quotes, backslash). */
const push = (overrides: Parameters<typeof pushRow>[0] = {}) =>
  pushRow({ payload: { ref: 'refs/heads/main', note: 'tab\tand "quotes" \\' }, ...overrides });
let rounds = 0;

type Store = (pushes: PushRow[], opts: BulkStoreOptions) => Promise<BulkStoreResult>;

const viaStage: Store = async (pushes, opts) => {
  const client = await t.pool.connect();
  try {
    await prepareStage(client);
    await client.query('BEGIN');
    const r = await bulkStorePushes(client, pushes, opts);
    await client.query('COMMIT');
    await dropStage(client);
    return r;
  } finally {
    client.release();
  }
};
const viaValues: Store = (pushes, opts) => bulkStorePage(t.db, pushes, opts);

const row = (id: string | null, repositoryId: string) =>
  t.db
    .selectFrom('push_events')
    .selectAll()
    .where('repository_id', '=', String(repositoryId))
    .execute()
    .then((rows) => rows.filter((r) => id === null || r.id === id));

describe.each([
  ['through the staging table', viaStage],
  ['from parameter arrays (a page)', viaValues],
] as const)('bulk store %s', (_name, store) => {
  it('stores pushes with new pending actors and repositories, once, exactly as given', async () => {
    const a = push({ size: 3, distinctSize: 2 });
    const b = push({ actor: a.actor });
    expect(await store([a, b], { origin: 'poll', sourceId: null, runId: null })).toEqual({
      created: 2,
      newActors: 1,
      newRepositories: 2,
      idsFilledIn: 0,
    });
    expect(await store([b, a], { origin: 'poll' })).toMatchObject({
      created: 0,
      newActors: 0,
      newRepositories: 0,
    });
    const [stored] = await row(a.id, a.repository.id);
    expect(stored).toMatchObject({
      id: a.id,
      actor_id: String(a.actor.id),
      push_id: String(a.pushId),
      head: a.head,
      created_at: a.createdAt,
      payload: a.payload,
      size: 3,
      distinct_size: 2,
      origin: 'poll',
    });
    const actor = await t.db
      .selectFrom('actors')
      .select(['login', 'enrichment_state'])
      .where('id', '=', String(a.actor.id))
      .executeTakeFirstOrThrow();
    expect(actor).toEqual({ login: a.actor.login, enrichment_state: 'pending' });
  });

  it('renames by id to the newest name of the batch', async () => {
    const old = push();
    await store([old], { origin: 'poll' });
    const older = push({
      actor: { id: old.actor.id, login: 'bulk-middle' },
      createdAt: new Date(Date.UTC(2026, 10, 29, 9)),
    });
    const newest = push({
      actor: { id: old.actor.id, login: 'bulk-newest' },
      repository: { id: old.repository.id, fullName: 'bulk-new/name' },
      createdAt: new Date(Date.UTC(2026, 10, 29, 10)),
    });
    expect(await store([newest, older], { origin: 'poll' })).toMatchObject({ newActors: 0 });
    const actor = await t.db
      .selectFrom('actors')
      .select('login')
      .where('id', '=', String(old.actor.id))
      .executeTakeFirstOrThrow();
    expect(actor.login).toBe('bulk-newest');
    const repo = await t.db
      .selectFrom('repositories')
      .select('full_name')
      .where('id', '=', String(old.repository.id))
      .executeTakeFirstOrThrow();
    expect(repo.full_name).toBe('bulk-new/name');
  });

  it('fills the event id into a webhook copy, and leaves a polled copy alone', async () => {
    const polled = push();
    await storePushes(t.db, [{ ...polled, id: null }], { origin: 'webhook' });
    expect(await store([polled], { origin: 'poll' })).toMatchObject({
      created: 0,
      idsFilledIn: 1,
    });
    expect((await row(null, polled.repository.id)).map((r) => [r.id, r.origin])).toEqual([
      [polled.id, 'webhook'],
    ]);
  });

  it('keeps one row for a push repeated in a batch, and skips an id held under another key', async () => {
    const a = push();
    const twin = { ...a };
    const thief = push({ id: a.id }); // GitHub's bug: one event id, two pushes
    expect(await store([a, twin, thief], { origin: 'poll' })).toMatchObject({ created: 1 });
    expect(await row(null, a.repository.id)).toHaveLength(1);
    expect(await row(null, thief.repository.id)).toHaveLength(0);
  });

  it('never deadlocks two writers touching the same actors in opposite orders', async () => {
    const base = 500_000 + 100 * rounds++;
    const actors = Array.from({ length: 40 }, (_, i) => ({
      id: String(base + i),
      login: `shared-${i}`,
    }));
    const batch = (order: typeof actors) => order.map((actor) => push({ actor }));
    for (let round = 0; round < 5; round++) {
      await Promise.all([
        store(batch(actors), { origin: 'poll' }),
        store(batch([...actors].reverse()), { origin: 'poll' }),
      ]);
    }
    const n = await sql<{ n: string }>`
      SELECT count(*) AS n FROM push_events WHERE actor_id BETWEEN ${base} AND ${base + 39}`.execute(
      t.db,
    );
    expect(Number(n.rows[0]!.n)).toBe(400);
  });
});
