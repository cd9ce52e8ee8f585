import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { handleMaintenance, type JobContext } from '../../src/jobs/handlers.ts';
import type { PushRow } from '../../src/store/mapping.ts';
import {
  bulkStorePage,
  bulkStoreStaged,
  dropStage,
  insertStagedEntities,
  prepareStage,
  storePushes,
} from '../../src/store/pushes.ts';
import { StageBatch } from '../../src/store/stage-batch.ts';
import { captureLogger, testConfig } from '../recovery/helpers.ts';
import { useTestDatabase } from '../support/db.ts';
import { pushRow } from '../support/push-rows.ts';

/**
 * push_events by month (ADR 0199): every writer lands a push in its month's partition,
 * making the month when it is missing; a push is stored once whichever month its copies
 * arrive in; what lands in the default partition (a hand-written insert) moves to its month
 * when the maintenance job makes it.
 */

const t = useTestDatabase();

/** Where each push of repository `repo` is: its partition, id and created_at. */
async function placed(repo: string) {
  const r = await sql<{ part: string; id: string | null; created_at: Date }>`
    SELECT tableoid::regclass::text AS part, id::text AS id, created_at
    FROM push_events WHERE repository_id = ${repo}::bigint ORDER BY created_at`.execute(t.db);
  return r.rows;
}

async function keysOf(repo: string) {
  const r = await sql<{ created_at: Date; event_id: string | null; era: number | null }>`
    SELECT created_at, event_id::text AS event_id,
      CASE WHEN event_id IS NOT NULL THEN event_id_era(created_at) END AS era FROM push_keys
    WHERE repository_id = ${repo}::bigint`.execute(t.db);
  return r.rows;
}

async function viaStage(pushes: PushRow[]) {
  const batch = new StageBatch();
  for (const p of pushes) batch.add(p);
  const entities = await t.pool.connect();
  const client = await t.pool.connect();
  try {
    await insertStagedEntities(entities, batch);
    await prepareStage(client);
    await client.query('BEGIN');
    const r = await bulkStoreStaged(client, batch, {});
    await client.query('COMMIT');
    return r;
  } catch (err) {
    await client.query('ROLLBACK');
    throw err;
  } finally {
    await dropStage(client);
    client.release();
    entities.release();
  }
}

describe('monthly partitions of push_events', () => {
  it('a poll page, a delivery and an archive chunk each make the months they land in', async () => {
    const poll = pushRow({ createdAt: new Date('2013-04-10T10:00:00Z') });
    const hook = pushRow({ id: null, createdAt: new Date('2012-11-30T23:59:59Z') });
    const chunk = pushRow({ createdAt: new Date('2011-03-01T00:00:00Z') });
    await bulkStorePage(t.db, [poll], { origin: 'poll' });
    await t.db.transaction().execute((trx) => storePushes(trx, [hook], { origin: 'webhook' }));
    await viaStage([chunk]);
    expect((await placed(poll.repository.id))[0]!.part).toBe('push_events_2013_04');
    expect((await placed(hook.repository.id))[0]!.part).toBe('push_events_2012_11');
    expect((await placed(chunk.repository.id))[0]!.part).toBe('push_events_2011_03');
    const inDefault = await sql<{ n: string }>`
      SELECT count(*)::text AS n FROM push_events_default`.execute(t.db);
    expect(inDefault.rows[0]!.n).toBe('0');
  });

  it('stores a push once when its copies fall in two months, the event id filled in', async () => {
    // A webhook dates a push by the repository's pushed_at, the event by GitHub's clock: a
    // push at midnight of a month's end has copies on both sides of the boundary.
    const event = pushRow({ createdAt: new Date('2026-02-01T00:00:01Z') });
    const delivery: PushRow = { ...event, id: null, createdAt: new Date('2026-01-31T23:59:59Z') };
    await t.db.transaction().execute((trx) => storePushes(trx, [delivery], { origin: 'webhook' }));
    const polled = await bulkStorePage(t.db, [event], { origin: 'poll' });
    expect(polled).toMatchObject({ created: 0, idsFilledIn: 1 });
    const archived = await viaStage([event]);
    expect(archived.created).toBe(0);
    expect(await placed(event.repository.id)).toEqual([
      { part: 'push_events_2026_01', id: event.id, created_at: delivery.createdAt },
    ]);
    expect(await keysOf(event.repository.id)).toEqual([
      { created_at: delivery.createdAt, event_id: event.id, era: 2026 },
    ]);
  });

  it('twenty deliveries at once into a month that has no partition yet all store', async () => {
    const pushes = Array.from({ length: 20 }, () =>
      pushRow({ id: null, createdAt: new Date('2008-02-10T10:00:00Z') }),
    );
    const results = await Promise.allSettled(
      pushes.map((p) =>
        t.db.transaction().execute((trx) => storePushes(trx, [p], { origin: 'webhook' })),
      ),
    );
    expect(results.filter((r) => r.status === 'rejected').map((r) => String(r.reason))).toEqual([]);
    for (const p of pushes) {
      expect((await placed(p.repository.id))[0]!.part).toBe('push_events_2008_02');
    }
  });

  it('two writers storing one push in two months at once store it once', async () => {
    for (let round = 0; round < 5; round++) {
      const event = pushRow({ createdAt: new Date('2026-03-01T00:00:00Z') });
      const delivery: PushRow = { ...event, id: null, createdAt: new Date('2026-02-28T23:59:59Z') };
      const results = await Promise.allSettled([
        t.db.transaction().execute((trx) => storePushes(trx, [delivery], { origin: 'webhook' })),
        bulkStorePage(t.db, [event], { origin: 'poll' }),
      ]);
      expect(results.map((r) => r.status)).toEqual(['fulfilled', 'fulfilled']);
      const rows = await placed(event.repository.id);
      expect(rows).toHaveLength(1);
      expect(await keysOf(event.repository.id)).toHaveLength(1);
    }
  });

  it('a hand-written insert into a month without a partition waits in the default one, then moves', async () => {
    await sql`
      INSERT INTO push_events (id, actor_id, repository_id, ref, head, before, created_at)
      VALUES (77, 1, 990001, 'refs/heads/main', 'h1', 'b1', '2009-06-15T12:00:00Z')`.execute(t.db);
    expect(await placed('990001')).toMatchObject([{ part: 'push_events_default', id: '77' }]);
    expect(await keysOf('990001')).toHaveLength(1);

    const { logger } = captureLogger();
    const ctx = {
      deps: { config: testConfig(), db: t.db, pool: t.pool, logger, workerId: 'test:1' },
      boss: undefined,
    } as unknown as JobContext;
    const done = await handleMaintenance(ctx, { id: 'maintenance-months' });
    expect((done as { months_made: number }).months_made).toBeGreaterThanOrEqual(1);
    expect(await placed('990001')).toMatchObject([{ part: 'push_events_2009_06', id: '77' }]);
    expect(await keysOf('990001')).toEqual([
      { created_at: new Date('2009-06-15T12:00:00Z'), event_id: '77', era: 2009 },
    ]);
    // And this month and the next exist ahead of any write.
    const ahead = await sql<{ n: string }>`
      SELECT count(*)::text AS n FROM pg_partition_tree('push_events')
      WHERE relid::text IN (
        SELECT 'push_events_' || to_char(date_trunc('month', now() AT TIME ZONE 'UTC')
          + make_interval(months => k), 'YYYY_MM') FROM generate_series(0, 1) k)`.execute(t.db);
    expect(ahead.rows[0]!.n).toBe('2');
  });

  it('never moves a push to another month, and a delete or truncate takes its key along', async () => {
    const p = pushRow({ createdAt: new Date('2026-04-02T00:00:00Z') });
    await bulkStorePage(t.db, [p], { origin: 'poll' });
    await expect(
      sql`UPDATE push_events SET created_at = '2026-05-02' WHERE repository_id = ${p.repository.id}::bigint`.execute(
        t.db,
      ),
    ).rejects.toThrow(/never updated/);
    await sql`DELETE FROM push_events WHERE repository_id = ${p.repository.id}::bigint`.execute(
      t.db,
    );
    expect(await keysOf(p.repository.id)).toEqual([]);
    await bulkStorePage(t.db, [p], { origin: 'poll' });
    expect(await keysOf(p.repository.id)).toHaveLength(1);
    await sql`TRUNCATE push_events`.execute(t.db);
    const left = await sql<{ n: string }>`SELECT count(*)::text AS n FROM push_keys`.execute(t.db);
    expect(left.rows[0]!.n).toBe('0');
  });
});
