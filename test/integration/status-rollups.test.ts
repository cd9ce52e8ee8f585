import { sql } from 'kysely';
import pg from 'pg';
import { beforeAll, describe, expect, it } from 'vitest';
import { pruneLedgers } from '../../src/jobs/prune.ts';
import { createDb, type Db } from '../../src/platform/db/pool.ts';
import { readStatus } from '../../src/status/model.ts';
import { runWindowStart } from '../../src/status/run-hours.ts';
import { useTestDatabase } from '../support/db.ts';
import { testConfig } from '../support/github-client.ts';

/**
 * The status surfaces read hourly rollups of the runs (ingestion_run_hours,
 * ingestion_run_totals; migration 2026-12-02T0300, ADR 0150), kept by triggers in the
 * transaction of every write of a run. They must say exactly what counting the runs says,
 * whatever writes them: four sessions at once inserting, finishing, re-counting, deleting
 * and sweeping runs (sources chosen to share shards and hours), transactions rolled back,
 * a session killed in the middle of one, retention, a truncate. The oracle is the count of
 * ingestion_runs itself.
 */

const t = useTestDatabase();
const SOURCES = 40;
let sourceIds: string[] = [];

/** A small deterministic generator (mulberry32): a failure is reproducible from its seed. */
function rng(seed: number) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let x = Math.imul(a ^ (a >>> 15), 1 | a);
    x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x;
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
}

async function differences(db: Db) {
  const hours = await sql<{ diff: string }>`
    WITH oracle AS (
      SELECT source_id, date_trunc('hour', started_at, 'UTC') AS hour, count(*)::int AS runs,
             sum(events_created)::bigint AS events, sum(events_rejected)::bigint AS rejected,
             (count(*) FILTER (WHERE gap_detected))::int AS gaps
      FROM ingestion_runs WHERE status <> 'running' GROUP BY 1, 2
    ), kept AS (
      SELECT source_id, hour, runs, events, rejected, gaps FROM ingestion_run_hours
      WHERE runs <> 0 OR events <> 0 OR rejected <> 0 OR gaps <> 0
    )
    SELECT row_to_json(x)::text AS diff FROM (
      (SELECT 'missing' AS what, * FROM oracle EXCEPT SELECT 'missing', * FROM kept)
      UNION ALL
      (SELECT 'extra', * FROM kept EXCEPT SELECT 'extra', * FROM oracle)
    ) x`.execute(db);
  const totals = await sql<{ diff: string }>`
    WITH oracle AS (
      SELECT date_trunc('hour', started_at, 'UTC') AS hour, (source_id % 16)::smallint AS shard,
             status, count(*)::int AS runs, (count(*) FILTER (WHERE gap_detected))::int AS gaps
      FROM ingestion_runs WHERE status <> 'running' GROUP BY 1, 2, 3
    ), kept AS (
      SELECT hour, shard, status, runs, gaps FROM ingestion_run_totals WHERE runs <> 0 OR gaps <> 0
    )
    SELECT row_to_json(x)::text AS diff FROM (
      (SELECT 'missing' AS what, * FROM oracle EXCEPT SELECT 'missing', * FROM kept)
      UNION ALL
      (SELECT 'extra', * FROM kept EXCEPT SELECT 'extra', * FROM oracle)
    ) x`.execute(db);
  return [...hours.rows, ...totals.rows].map((r) => r.diff);
}

/** One session's random writes: what a poll, a page, the reconciler and retention do. */
async function writer(db: Db, seed: number, ops: number): Promise<{ deadlocks: number }> {
  const r = rng(seed);
  const pick = <T>(xs: readonly T[]) => xs[Math.floor(r() * xs.length)]!;
  const now = Date.now();
  let deadlocks = 0;
  for (let i = 0; i < ops; i++) {
    const source = pick(sourceIds);
    const startedAt = new Date(now - Math.floor(r() * 30 * 3_600_000));
    const op = r();
    const attempt = async () => {
      if (op < 0.3) {
        await db
          .insertInto('ingestion_runs')
          .values({ source_id: source, started_at: startedAt })
          .execute();
      } else if (op < 0.55) {
        // A poll's finalize: the oldest running run of the source gets its outcome.
        await sql`
          UPDATE ingestion_runs SET status = ${pick(['completed', 'not_modified', 'failed'])},
            events_created = ${Math.floor(r() * 50)}, events_rejected = ${Math.floor(r() * 3)},
            gap_detected = ${r() < 0.2}, finished_at = now()
          WHERE id = (SELECT id FROM ingestion_runs WHERE source_id = ${source}
                      AND status = 'running' ORDER BY id LIMIT 1)`.execute(db);
      } else if (op < 0.65) {
        // A page stored: a running run's events move (no rollup yet).
        await sql`
          UPDATE ingestion_runs SET events_created = events_created + 3
          WHERE id = (SELECT id FROM ingestion_runs WHERE source_id = ${source}
                      AND status = 'running' ORDER BY id DESC LIMIT 1)`.execute(db);
      } else if (op < 0.72) {
        // A finished run corrected: its events, its hour, even its source.
        await sql`
          UPDATE ingestion_runs SET events_created = events_created + 1,
            started_at = started_at - interval '40 minutes', source_id = ${pick(sourceIds)}
          WHERE id = (SELECT id FROM ingestion_runs WHERE source_id = ${source}
                      AND status <> 'running' ORDER BY id DESC LIMIT 1)`.execute(db);
      } else if (op < 0.8) {
        await sql`
          DELETE FROM ingestion_runs WHERE id = (
            SELECT id FROM ingestion_runs WHERE source_id = ${source} ORDER BY random() LIMIT 1)`.execute(
          db,
        );
      } else if (op < 0.86) {
        // The reconciler's sweep: many runs at once become interrupted.
        await sql`
          UPDATE ingestion_runs SET status = 'interrupted', finished_at = now()
          WHERE status = 'running' AND source_id % 5 = ${Math.floor(r() * 5)}`.execute(db);
      } else {
        // Work that never commits: a run inserted and finished, then rolled back.
        await db
          .transaction()
          .execute(async (trx) => {
            await trx
              .insertInto('ingestion_runs')
              .values({
                source_id: source,
                started_at: startedAt,
                status: 'completed',
                events_created: 99,
                gap_detected: true,
              })
              .execute();
            throw new Error('rolled back');
          })
          .catch((err: Error) => {
            if (err.message !== 'rolled back') throw err;
          });
      }
    };
    for (;;) {
      try {
        await attempt();
        break;
      } catch (err) {
        // A deadlock aborts one transaction whole (the run and its rollup): try it again.
        if ((err as { code?: string }).code !== '40P01') throw err;
        deadlocks++;
      }
    }
  }
  return { deadlocks };
}

beforeAll(async () => {
  const rows = await t.db
    .insertInto('event_sources')
    .values(
      Array.from({ length: SOURCES }, (_, i) => ({
        kind: 'repo' as const,
        target: `o/r${i}`,
        mode: 'live' as const,
        commits_enabled: false,
        next_poll_at: new Date(),
      })),
    )
    .returning('id')
    .execute();
  sourceIds = rows.map((x) => x.id);
});

describe('the runs’ hourly rollups', () => {
  it('hold exactly what the runs say after four sessions of random writes at once', async () => {
    const pools = [0, 1, 2, 3].map(() => t.newPool(1));
    const results = await Promise.all(pools.map((p, i) => writer(createDb(p), 1000 + i, 250)));
    expect(await differences(t.db)).toEqual([]);
    const counted = await sql<{ n: string }>`
      SELECT count(*) AS n FROM ingestion_runs WHERE status <> 'running'`.execute(t.db);
    expect(Number(counted.rows[0]!.n)).toBeGreaterThan(50);
    console.info(`rollups: ${results.reduce((n, x) => n + x.deadlocks, 0)} deadlock(s) retried`);
  });

  it('a session killed in the middle of a transaction leaves them as they were', async () => {
    const before = await sql`SELECT * FROM ingestion_run_hours ORDER BY 1, 2`.execute(t.db);
    const victim = new pg.Client({ connectionString: t.url });
    await victim.connect();
    victim.on('error', () => {});
    await victim.query('BEGIN');
    await victim.query(
      `INSERT INTO ingestion_runs (source_id, status, events_created, gap_detected)
       VALUES ($1, 'completed', 500, true)`,
      [sourceIds[0]],
    );
    const pid = (await victim.query('SELECT pg_backend_pid() AS pid')).rows[0].pid as number;
    await sql`SELECT pg_terminate_backend(${pid})`.execute(t.db);
    await victim.end().catch(() => {});
    const after = await sql`SELECT * FROM ingestion_run_hours ORDER BY 1, 2`.execute(t.db);
    expect(after.rows).toEqual(before.rows);
    expect(await differences(t.db)).toEqual([]);
  });

  it('the status report counts from them what counting the runs gives', async () => {
    const now = new Date();
    const since = runWindowStart(now);
    const report = await readStatus(
      { db: t.db, config: testConfig(t, { apiUrl: 'http://127.0.0.1:9', mode: 'fixture' }) },
      { perPage: SOURCES, page: 1, state: null, kind: null },
    );
    const oracle = await sql<{
      source_id: string;
      runs: string;
      events: string;
      rejected: string;
      gaps: string;
    }>`
      SELECT s.id AS source_id, count(r.id) AS runs, coalesce(sum(r.events_created), 0) AS events,
             coalesce(sum(r.events_rejected), 0) AS rejected,
             count(r.id) FILTER (WHERE r.gap_detected) AS gaps
      FROM event_sources s
      LEFT JOIN ingestion_runs r ON r.source_id = s.id AND r.started_at >= ${since}
      GROUP BY s.id ORDER BY s.id`.execute(t.db);
    expect(
      report.sources.map((s) => [
        s.runsLast24h,
        s.eventsCreatedLast24h,
        s.rejectedLast24h,
        s.gapsLast24h,
      ]),
    ).toEqual(
      oracle.rows.map((o) => [
        Number(o.runs),
        Number(o.events),
        Number(o.rejected),
        Number(o.gaps),
      ]),
    );
    const byStatus = await sql<{ status: string; n: string; gaps: string }>`
      SELECT status, count(*) AS n, count(*) FILTER (WHERE gap_detected) AS gaps
      FROM ingestion_runs WHERE started_at >= ${since} GROUP BY status`.execute(t.db);
    expect(report.activity.runsLast24h).toEqual(
      Object.fromEntries(byStatus.rows.map((row) => [row.status, Number(row.n)])),
    );
    expect(report.activity.gapsLast24h).toBe(
      byStatus.rows.reduce((n, row) => n + Number(row.gaps), 0),
    );
    // Something in the window of each kind, or the comparison proves little.
    expect(report.activity.runsLast24h.running ?? 0).toBeGreaterThan(0);
    expect(report.sources.some((s) => s.gapsLast24h > 0)).toBe(true);
  });

  it('retention prunes rollups past two days and a deleted old run changes none left', async () => {
    const now = new Date();
    const old = new Date(now.getTime() - 3 * 86_400_000);
    await t.db
      .insertInto('ingestion_runs')
      .values({ source_id: sourceIds[1]!, started_at: old, status: 'completed', events_created: 4 })
      .execute();
    const report = await pruneLedgers(t.db, { retentionDays: 2.5, now });
    expect(report.deleted.ingestion_run_hours).toBeGreaterThan(0);
    const left = await sql<{ n: string }>`
      SELECT count(*) AS n FROM ingestion_run_hours
      WHERE hour < ${new Date(now.getTime() - 48 * 3_600_000)}`.execute(t.db);
    expect(Number(left.rows[0]!.n)).toBe(0);
    // Within the two days the rollups still match the runs.
    const diff = (await differences(t.db)).filter(
      (d) => new Date(JSON.parse(d).hour).getTime() >= now.getTime() - 48 * 3_600_000,
    );
    expect(diff).toEqual([]);
  });

  it('a truncate of the runs empties them; the rebuild function recomputes them', async () => {
    await sql`SELECT ingestion_run_rollups_rebuild()`.execute(t.db);
    expect(await differences(t.db)).toEqual([]);
    await sql`TRUNCATE ingestion_runs CASCADE`.execute(t.db);
    const n = await sql<{ n: string }>`
      SELECT (SELECT count(*) FROM ingestion_run_hours) + (SELECT count(*) FROM ingestion_run_totals) AS n`.execute(
      t.db,
    );
    expect(Number(n.rows[0]!.n)).toBe(0);
  });
});
