import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import type { PushOrigin } from '../../src/platform/db/columns.ts';
import type { PushRow } from '../../src/store/mapping.ts';
import {
  type BulkStoreResult,
  bulkStorePage,
  bulkStoreStaged,
  dropStage,
  insertStagedEntities,
  PushesAlreadyStored,
  prepareStage,
  storePushes,
} from '../../src/store/pushes.ts';
import { StageBatch } from '../../src/store/stage-batch.ts';
import { useTestDatabase } from '../support/db.ts';
import { pushRow } from '../support/push-rows.ts';

/**
 * The bulk store path (ADR 0040) keeps storePushes's rules — natural key, event id filled
 * into a webhook copy, lock order — whether its rows come through the staging table (an
 * archive chunk: insertStagedEntities on a connection of its own, then bulkStoreStaged, as
 * src/backfill/import.ts does) or as parameter arrays (bulkStorePage: a poll page). Every
 * case runs through both. Names differ by design: a page renames to the newest name of its
 * batch, an archive chunk never renames what we hold.
 */

const t = useTestDatabase();

/** A push whose payload holds what COPY must escape (tab, quotes, backslash). */
const push = (overrides: Parameters<typeof pushRow>[0] = {}) =>
  pushRow({ payload: { ref: 'refs/heads/main', note: 'tab\tand "quotes" \\' }, ...overrides });
let rounds = 0;

type Store = (
  pushes: PushRow[],
  opts?: { sourceId?: number | null; expectNew?: boolean },
) => Promise<BulkStoreResult>;

/** An archive chunk: its entities committed on a second session, then its pushes staged and merged. */
const viaStage: Store = async (pushes, opts = {}) => {
  const batch = new StageBatch();
  for (const p of pushes) batch.add(p);
  const entityClient = await t.pool.connect();
  const client = await t.pool.connect();
  try {
    const entities = await insertStagedEntities(entityClient, batch);
    await prepareStage(client);
    await client.query('BEGIN');
    try {
      const r = await bulkStoreStaged(client, batch, opts);
      await client.query('COMMIT');
      return { ...r, ...entities };
    } catch (err) {
      await client.query('ROLLBACK');
      throw err;
    }
  } finally {
    await dropStage(client);
    client.release();
    entityClient.release();
  }
};
const viaValues: Store = (pushes, opts = {}) =>
  bulkStorePage(t.db, pushes, { origin: 'poll', sourceId: opts.sourceId });

const row = (id: string | null, repositoryId: string) =>
  t.db
    .selectFrom('push_events')
    .selectAll()
    .where('repository_id', '=', String(repositoryId))
    .execute()
    .then((rows) => rows.filter((r) => id === null || r.id === id));

/** Name, store, the origin it stores, whether it renames what we hold. */
const PATHS: [string, Store, PushOrigin, boolean][] = [
  ['through the staging table (an archive chunk)', viaStage, 'archive', false],
  ['from parameter arrays (a page)', viaValues, 'poll', true],
];

describe.each(PATHS)('bulk store %s', (_name, store, origin, renames) => {
  it('stores pushes with new pending actors and repositories, once, exactly as given', async () => {
    const a = push({ size: 3, distinctSize: 2 });
    const b = push({ actor: a.actor });
    expect(await store([a, b], { sourceId: null })).toEqual({
      created: 2,
      newActors: 1,
      newRepositories: 2,
      commitsPending: 0,
      idsFilledIn: 0,
      clashes: [],
    });
    expect(await store([b, a])).toMatchObject({
      created: 0,
      newActors: 0,
      newRepositories: 0,
    });
    const [stored] = await row(a.id, a.repository.id);
    // The payload whole: what the columns hold put back into what is left of it (ADR 0199).
    const whole = await sql<{ payload: unknown }>`
      SELECT push_payload(p) AS payload FROM push_events p WHERE id = ${a.id}::bigint`.execute(
      t.db,
    );
    expect(whole.rows[0]!.payload).toEqual(a.payload);
    expect(stored).toMatchObject({
      id: a.id,
      actor_id: String(a.actor.id),
      push_id: String(a.pushId),
      head: a.head,
      created_at: a.createdAt,
      size: 3,
      distinct_size: 2,
      origin,
    });
    const actor = await t.db
      .selectFrom('actors')
      .select(['login', 'enrichment_state'])
      .where('id', '=', String(a.actor.id))
      .executeTakeFirstOrThrow();
    expect(actor).toEqual({ login: a.actor.login, enrichment_state: 'pending' });
  });

  it(
    renames
      ? 'renames by id to the newest name of the batch'
      : 'never renames one it holds (history); a new one gets the newest name of the batch',
    async () => {
      const old = push();
      await store([old]);
      const older = push({
        actor: { id: old.actor.id, login: 'bulk-middle' },
        createdAt: new Date(Date.UTC(2026, 10, 29, 9)),
      });
      const newest = push({
        actor: { id: old.actor.id, login: 'bulk-newest' },
        repository: { id: old.repository.id, fullName: 'bulk-new/name' },
        createdAt: new Date(Date.UTC(2026, 10, 29, 10)),
      });
      const fresh = push();
      const freshOlder = push({
        actor: { id: fresh.actor.id, login: 'fresh-older' },
        repository: fresh.repository,
        createdAt: new Date(Date.UTC(2026, 10, 29, 9)),
      });
      const freshNewest = push({
        actor: { id: fresh.actor.id, login: 'fresh-newest' },
        repository: fresh.repository,
        createdAt: new Date(Date.UTC(2026, 10, 29, 10)),
      });
      expect(await store([newest, freshNewest, older, freshOlder])).toMatchObject({
        newActors: 1,
      });
      const login = async (id: string) =>
        (
          await t.db
            .selectFrom('actors')
            .select('login')
            .where('id', '=', id)
            .executeTakeFirstOrThrow()
        ).login;
      expect(await login(old.actor.id!)).toBe(renames ? 'bulk-newest' : old.actor.login);
      expect(await login(fresh.actor.id!)).toBe('fresh-newest');
      const repo = await t.db
        .selectFrom('repositories')
        .select('full_name')
        .where('id', '=', String(old.repository.id))
        .executeTakeFirstOrThrow();
      expect(repo.full_name).toBe(renames ? 'bulk-new/name' : old.repository.fullName);
    },
  );

  it('fills the event id into a webhook copy, and leaves a polled copy alone', async () => {
    const polled = push();
    await storePushes(t.db, [{ ...polled, id: null }], { origin: 'webhook' });
    expect(await store([polled])).toMatchObject({
      created: 0,
      idsFilledIn: 1,
    });
    expect((await row(null, polled.repository.id)).map((r) => [r.id, r.origin])).toEqual([
      [polled.id, 'webhook'],
    ]);
  });

  it('keeps one row for a push repeated in a batch, and stores a push contending for an id another holds (ADR 0122)', async () => {
    const at = new Date(Date.UTC(2026, 10, 29, 8));
    const a = push({ createdAt: at });
    const twin = { ...a };
    // One event id, two pushes of one era: both stored; the id stays with the earlier one.
    const rival = push({ id: a.id, createdAt: new Date(at.getTime() + 1000) });
    const stored = await store([a, twin, rival]);
    expect(stored).toMatchObject({ created: 2 });
    expect(stored.clashes).toMatchObject([
      {
        eventId: a.id,
        kind: 'disputed',
        kept: { repositoryId: a.repository.id, head: a.head, origin },
        other: { repositoryId: rival.repository.id, head: rival.head, origin },
      },
    ]);
    expect((await row(null, a.repository.id)).map((r) => r.id)).toEqual([a.id]);
    expect((await row(null, rival.repository.id)).map((r) => r.id)).toEqual([null]);
  });

  it('never deadlocks two writers touching the same actors in opposite orders', async () => {
    const base = 500_000 + 100 * rounds++;
    const actors = Array.from({ length: 40 }, (_, i) => ({
      id: String(base + i),
      login: `shared-${i}`,
    }));
    const batch = (order: typeof actors) => order.map((actor) => push({ actor }));
    for (let round = 0; round < 5; round++) {
      await Promise.all([store(batch(actors)), store(batch([...actors].reverse()))]);
    }
    const n = await sql<{ n: string }>`
      SELECT count(*) AS n FROM push_events WHERE actor_id BETWEEN ${base} AND ${base + 39}`.execute(
      t.db,
    );
    expect(Number(n.rows[0]!.n)).toBe(400);
  });
});

describe('bulk store through the staging table, expecting new pushes (a fresh archive file)', () => {
  it('stores them without conflict handling, and refuses the batch when one is stored already', async () => {
    const a = push();
    expect(await viaStage([a], { expectNew: true })).toMatchObject({ created: 1 });
    const b = push();
    await expect(viaStage([b, a], { expectNew: true })).rejects.toBeInstanceOf(PushesAlreadyStored);
    expect(await row(null, b.repository.id)).toHaveLength(0);
    expect(await viaStage([b, a])).toMatchObject({ created: 1 });
  });
});
