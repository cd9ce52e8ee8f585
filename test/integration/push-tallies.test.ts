import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { createDb, createPool } from '../../src/platform/db/pool.ts';
import { ingestActivity, pushesSinceStatements } from '../../src/status/activity.ts';
import { commitsStateCounts, commitsStatus } from '../../src/status/commits.ts';
import { dropMonth, parseMonth } from '../../src/store/history-months.ts';
import { foldPushTallies, readPushTallies } from '../../src/store/push-tallies.ts';
import { useTestDatabase } from '../support/db.ts';
import { explain } from '../support/plans.ts';

/**
 * The push tallies (ADR 0203): exact after inserts, updates, deletes and truncates from
 * several writers at once, with and without a fold between them, and after a month's drop;
 * the status figures equal counting push_events; the status statements never scan it whole.
 */

const t = useTestDatabase();

type Key = string;
const key = (...p: (string | number)[]) => p.join('|');

async function counted(): Promise<Map<Key, number>> {
  const r = await sql<{ month: string; origin: string; commits_state: string; n: string }>`
    SELECT to_char(date_trunc('month', created_at AT TIME ZONE 'UTC'), 'YYYY-MM') AS month,
      origin, commits_state, count(*) AS n
    FROM push_events GROUP BY 1, 2, 3`.execute(t.db);
  return new Map(r.rows.map((x) => [key(x.month, x.origin, x.commits_state), Number(x.n)]));
}

async function tallied(): Promise<Map<Key, number>> {
  const r = await sql<{ month: string; origin: string; commits_state: string; n: string }>`
    SELECT to_char(month, 'YYYY-MM') AS month, origin, commits_state, sum(pushes) AS n
    FROM (SELECT * FROM push_tallies UNION ALL SELECT * FROM push_tally_deltas) x
    GROUP BY 1, 2, 3 HAVING sum(pushes) <> 0`.execute(t.db);
  return new Map(r.rows.map((x) => [key(x.month, x.origin, x.commits_state), Number(x.n)]));
}

const ORIGINS = ['poll', 'webhook', 'archive'];
const MONTHS = ['2015-01-31T23:59:59Z', '2015-02-01T00:00:00Z', '2026-11-15T12:00:00Z'];

/** One writer's statements on push_events; some transactions roll back. */
async function writer(url: string, w: number, rounds: number): Promise<void> {
  const pool = createPool(url, { max: 1, applicationName: 'test-tally-writer' });
  const db = createDb(pool);
  try {
    for (let i = 0; i < rounds; i++) {
      const base = w * 100_000 + i * 100;
      await db
        .transaction()
        .execute(async (trx) => {
          await sql`
            INSERT INTO push_events (actor_id, repository_id, ref, before, head, created_at,
              payload, origin, commits_state, commits_next_attempt_at)
            SELECT 1, ${base}::bigint + g, 'refs/heads/main', 'b' || g, 'h' || g,
              (${MONTHS}::timestamptz[])[1 + (g % 3)], '{}',
              (${ORIGINS}::text[])[1 + ((g + ${w}) % 3)],
              CASE WHEN g % 2 = 0 THEN 'pending' ELSE 'skipped' END,
              CASE WHEN g % 2 = 0 THEN now() END
            FROM generate_series(1, 20) g`.execute(trx);
          await sql`
            UPDATE push_events SET commits_state = 'complete', commits_next_attempt_at = NULL
            WHERE repository_id BETWEEN ${base + 1} AND ${base + 6}
              AND commits_state = 'pending'`.execute(trx);
          // An update that moves nothing counted: no delta.
          await sql`
            UPDATE push_events SET commits_attempts = commits_attempts + 1
            WHERE repository_id BETWEEN ${base + 1} AND ${base + 20}`.execute(trx);
          await sql`
            DELETE FROM push_events WHERE repository_id BETWEEN ${base + 15} AND ${base + 17}`.execute(
            trx,
          );
          if (i % 4 === 3) throw new Error('rolled back on purpose');
        })
        .catch((err: Error) => {
          if (err.message !== 'rolled back on purpose') throw err;
        });
      if (i % 5 === 0) await foldPushTallies(db);
    }
  } finally {
    await db.destroy();
  }
}

describe('push tallies', () => {
  it('equal counting push_events after four writers and folds at once, and after a fold', async () => {
    await Promise.all([0, 1, 2, 3].map((w) => writer(t.url, w, 12)));
    const truth = await counted();
    expect(truth.size).toBeGreaterThan(6);
    expect(await tallied()).toEqual(truth);
    const before = await sql<{ n: string }>`SELECT count(*) AS n FROM push_tally_deltas`.execute(
      t.db,
    );
    const folded = await foldPushTallies(t.db);
    expect(folded).toBe(Number(before.rows[0]!.n));
    const left = await sql<{ n: string }>`SELECT count(*) AS n FROM push_tally_deltas`.execute(
      t.db,
    );
    expect(Number(left.rows[0]!.n)).toBe(0);
    expect(await tallied()).toEqual(truth);
    expect(await foldPushTallies(t.db)).toBe(0);
    expect(await tallied()).toEqual(truth);
  });

  it('an update that changes no origin or state appends no delta', async () => {
    await foldPushTallies(t.db);
    await sql`UPDATE push_events SET commits_attempts = commits_attempts + 1`.execute(t.db);
    const n = await sql<{ n: string }>`SELECT count(*) AS n FROM push_tally_deltas`.execute(t.db);
    expect(Number(n.rows[0]!.n)).toBe(0);
  });

  it('status figures equal count(*) over push_events', async () => {
    const now = new Date();
    await sql`
      INSERT INTO push_events (actor_id, repository_id, ref, before, head, created_at, payload,
        origin, commits_state, ingested_at)
      SELECT 1, 900000 + g, 'refs/heads/main', 'b', 'h' || g, now() - g * interval '1 hour',
        '{}', (ARRAY['poll','webhook','archive'])[1 + g % 3], 'none',
        now() - (g % 50) * interval '1 hour'
      FROM generate_series(1, 60) g`.execute(t.db);
    const a = await ingestActivity(t.db, now);
    const c = await commitsStatus(t.db, now);
    const since = new Date(now.getTime() - 86_400_000);
    const truth = await sql<{
      origin: string;
      n: string;
      recent: string;
      pushed: string;
      pending: string;
    }>`
      SELECT origin, count(*) AS n, count(*) FILTER (WHERE ingested_at > ${since}) AS recent,
        count(*) FILTER (WHERE created_at > ${since}) AS pushed,
        count(*) FILTER (WHERE commits_state = 'pending') AS pending
      FROM push_events GROUP BY origin`.execute(t.db);
    let total = 0;
    let recent = 0;
    let pushed = 0;
    for (const r of truth.rows) {
      expect(a.pushes[r.origin as 'poll']).toBe(Number(r.n));
      expect(c.pendingByOrigin[r.origin as 'poll']).toBe(Number(r.pending));
      total += Number(r.n);
      recent += Number(r.recent);
      pushed += Number(r.pushed);
    }
    expect(a.pushes.total).toBe(total);
    expect(a.pushes.last24h).toBe(recent);
    expect(a.pushes.pushedLast24h).toBe(pushed);
    const states = await sql<{ s: string; n: string }>`
      SELECT commits_state AS s, count(*) AS n FROM push_events GROUP BY 1`.execute(t.db);
    for (const r of states.rows) expect(c.byState[r.s as 'pending']).toBe(Number(r.n));
  });

  it("a month's drop takes its tallies and deltas along", async () => {
    const month = parseMonth('2015-01')!;
    await foldPushTallies(t.db);
    await sql`DELETE FROM push_events WHERE repository_id = 100001`.execute(t.db);
    // The month's partition, made now: its pushes move out of the default partition.
    await sql`SELECT push_events_ensure_month('2015-01-15T00:00:00Z')`.execute(t.db);
    expect(await tallied()).toEqual(await counted());
    const out = await dropMonth(t.db, {
      month,
      pushes: 0,
      exportedTo: '/nowhere',
      verifiedAt: new Date(),
      stillVerified: async () => null,
    });
    expect(out.dropped).toBe(true);
    const left = await sql<{ n: string }>`
      SELECT count(*) AS n FROM (SELECT month FROM push_tallies UNION ALL
        SELECT month FROM push_tally_deltas) x WHERE month = '2015-01-01'`.execute(t.db);
    expect(Number(left.rows[0]!.n)).toBe(0);
    expect(await tallied()).toEqual(await counted());
  });

  it('folds a net decrease into a tally already held (a push leaving a state)', async () => {
    await foldPushTallies(t.db);
    const moved = await sql`
      UPDATE push_events SET commits_state = 'complete', commits_next_attempt_at = NULL
      WHERE ctid IN (SELECT ctid FROM push_events WHERE commits_state = 'pending' LIMIT 3)`.execute(
      t.db,
    );
    expect(Number(moved.numAffectedRows)).toBe(3);
    expect(await foldPushTallies(t.db)).toBeGreaterThan(0);
    expect(await tallied()).toEqual(await counted());
  });

  it("a month's drop racing a fold that took its deltas leaves no tally of it", async () => {
    const month = parseMonth('2015-03')!;
    await sql`SELECT push_events_ensure_month('2015-03-15T00:00:00Z')`.execute(t.db);
    await sql`
      INSERT INTO push_events (actor_id, repository_id, ref, before, head, created_at, payload,
        origin, commits_state)
      SELECT 1, 900000 + g, 'refs/heads/main', 'b' || g, 'h' || g, '2015-03-02T00:00:00Z', '{}',
        'archive', 'complete'
      FROM generate_series(1, 5) g`.execute(t.db);
    // A fold on its own session: its deltas taken, its new tally row not yet committed while
    // the drop starts; the fold commits once the drop waits for it (a signal, not a sleep).
    const pool = createPool(t.url, { max: 1, applicationName: 'test-tally-fold' });
    const fold = createDb(pool);
    let drop: Promise<{ dropped: boolean }> | undefined;
    try {
      await fold.transaction().execute(async (trx) => {
        await foldPushTallies(trx);
        drop = dropMonth(t.db, {
          month,
          pushes: 5,
          exportedTo: '/nowhere',
          verifiedAt: new Date(),
          stillVerified: async () => null,
        });
        await expect
          .poll(async () => {
            const r = await sql<{ n: string }>`
              SELECT count(*) AS n FROM pg_stat_activity
              WHERE datname = current_database() AND wait_event_type = 'Lock'`.execute(t.db);
            return Number(r.rows[0]!.n);
          })
          .toBeGreaterThan(0);
      });
      expect((await drop!).dropped).toBe(true);
    } finally {
      await fold.destroy();
    }
    const left = await sql<{ n: string }>`
      SELECT count(*) AS n FROM (SELECT month FROM push_tallies UNION ALL
        SELECT month FROM push_tally_deltas) x WHERE month = '2015-03-01'`.execute(t.db);
    expect(Number(left.rows[0]!.n)).toBe(0);
    expect(await tallied()).toEqual(await counted());
  });

  it('TRUNCATE push_events empties them', async () => {
    await sql`TRUNCATE push_events`.execute(t.db);
    expect(await readPushTallies(t.db)).toEqual([]);
    expect((await tallied()).size).toBe(0);
  });

  it('status statements read no push_events at all', async () => {
    await sql`SELECT push_events_ensure_month('2026-10-01T00:00:00Z')`.execute(t.db);
    await t.db.transaction().execute(async (trx) => {
      await sql`SET LOCAL synchronous_commit = on`.execute(trx);
      await sql`
        INSERT INTO push_events (actor_id, repository_id, ref, head, before, created_at,
          payload, commits_state, ingested_at)
        SELECT 1, 2000000 + g, 'refs/heads/main', 'h' || g, 'b' || g,
          timestamptz '2026-10-01' + g * interval '10 seconds', '{}', 'none',
          timestamptz '2026-10-01' + g * interval '10 seconds'
        FROM generate_series(1, 200000) g`.execute(trx);
    });
    await sql`VACUUM (ANALYZE) push_events`.execute(t.db);
    const since = new Date(Date.now() - 86_400_000);
    const recent = pushesSinceStatements(since);
    for (const statement of [commitsStateCounts(), recent.arrived, recent.pushed]) {
      const plan = await explain(t.db, statement);
      const pushesRead = plan.nodes.filter((n) =>
        String(n['Relation Name'] ?? '').startsWith('push_events'),
      );
      expect(pushesRead, plan.shown).toEqual([]);
    }
    // The last 24 hours are the minute tallies' window (migration 2026-12-05T1440).
    for (const statement of [recent.arrived, recent.pushed]) {
      const plan = await explain(t.db, statement);
      const read = plan.nodes.map((n) => n['Relation Name']).filter(Boolean);
      expect(read, plan.shown).toEqual(['push_minute_tallies']);
    }
  });
});
