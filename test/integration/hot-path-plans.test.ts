import { type RawBuilder, sql } from 'kysely';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { quickPickStatement, reservationStatement } from '../../src/budget/reserve.ts';
import { budgetStateStatement } from '../../src/budget/window.ts';
import { countDueStatement } from '../../src/work/enrichment-due.ts';
import { useTestDatabase } from '../support/db.ts';
import {
  explain,
  indexReads,
  type Plan,
  planFromRows,
  rowsRead,
  seqScans,
} from '../support/plans.ts';

/**
 * The two counts benchmark 2 found slow are cheap whatever the table's size: the budget's
 * window on every reservation reads per-minute counters and small indexes (migration
 * 2026-12-01T1300, ADR 0083), countDue is index-only (migration 2026-11-29T0930). Checked
 * as plans, on tables big enough that the planner would otherwise choose something else,
 * and as rows read; no timings. Runs on
 * every harness path: Postgres 15 (CI's server) and the embedded Postgres 18.
 */

const t = useTestDatabase();

/**
 * Loads rows the way production data sits after autovacuum: committed durably, then
 * VACUUMed, so the visibility map marks every page all-visible — the condition an
 * index-only scan's cost depends on. The durable commit matters: VACUUM may not mark a
 * page all-visible while the commit of its rows is not yet flushed (an asynchronous
 * commit, which the embedded test server uses for speed: synchronous_commit=off), and
 * the planner then rightly prefers a bitmap heap scan. Asserted, so a plan failure below
 * is about the plan, not about the setup.
 */
async function load(table: string, insert: RawBuilder<unknown>): Promise<void> {
  await t.db.transaction().execute(async (trx) => {
    await sql`SET LOCAL synchronous_commit = on`.execute(trx);
    await insert.execute(trx);
  });
  // VACUUM marks a page all-visible only once its rows are older than every snapshot of this
  // database, and an autovacuum ANALYZE of another table here (the test before loads two days
  // of ledger) holds a snapshot for as long as it runs: on a loaded machine, seconds. So
  // VACUUM again until the map is set, and name the sessions holding it back if it never is.
  const deadline = Date.now() + 60_000;
  let pages = 0;
  let visible = 0;
  let holders: unknown[] = [];
  for (;;) {
    // Who holds the horizon back as this pass starts: sessions with a snapshot, prepared
    // transactions, replication slots.
    holders = (
      await sql`
      SELECT backend_type AS holder, left(query, 80) AS what FROM pg_stat_activity
      WHERE datname = current_database() AND backend_xmin IS NOT NULL AND pid <> pg_backend_pid()
      UNION ALL SELECT 'prepared transaction', gid FROM pg_prepared_xacts
      UNION ALL SELECT 'replication slot', slot_name FROM pg_replication_slots
        WHERE xmin IS NOT NULL OR catalog_xmin IS NOT NULL`.execute(t.db)
    ).rows;
    await sql`VACUUM (ANALYZE) ${sql.table(table)}`.execute(t.db);
    const vm = await sql<{ pages: number; visible: number }>`
      SELECT relpages AS pages, relallvisible AS visible FROM pg_class WHERE relname = ${table}`.execute(
      t.db,
    );
    ({ pages, visible } = vm.rows[0]!);
    if (visible / pages > 0.95 || Date.now() > deadline) break;
    await new Promise((r) => setTimeout(r, 250));
  }
  expect(pages).toBeGreaterThan(100);
  expect(
    visible / pages,
    `what held the horizon back at the last pass: ${JSON.stringify(holders)}`,
  ).toBeGreaterThan(0.95);
}

/**
 * The plan Postgres caches for `statement` as a prepared statement under force_generic_plan
 * (src/platform/db/prepared.ts: the budget's statements run so): planned blind to the parameters, then
 * executed with them. EXPLAIN (GENERIC_PLAN) exists only from Postgres 16; this works on 15.
 */
async function genericPlan(statement: RawBuilder<unknown>, analyze = false): Promise<Plan> {
  const compiled = statement.compile(t.db);
  const literal = (v: unknown) =>
    v === null || v === undefined
      ? 'NULL'
      : pg.escapeLiteral(v instanceof Date ? v.toISOString() : String(v));
  const client = await t.pool.connect();
  try {
    // Rolled back: an executed reservation inserts its row.
    await client.query('BEGIN');
    await client.query(`PREPARE generic_probe AS ${compiled.sql}`);
    await client.query('SET LOCAL plan_cache_mode = force_generic_plan');
    const args = compiled.parameters.map(literal).join(', ');
    const options = analyze ? '(ANALYZE, FORMAT JSON)' : '(FORMAT JSON)';
    const r = await client.query(`EXPLAIN ${options} EXECUTE generic_probe(${args})`);
    return planFromRows(r.rows);
  } finally {
    await client.query('ROLLBACK');
    // PREPARE is not transactional: the next probe on this session must find the name free.
    await client.query('DEALLOCATE generic_probe').catch(() => {});
    client.release();
  }
}

/** The budget's reads: each window's minutes and spends from their indexes, never a table scan. */
function expectBudgetIndexes(p: Plan): void {
  // (The minutes may be read through a bitmap of that same index range.)
  expect(indexReads(p, 'github_request_minutes_pkey'), p.shown).not.toEqual([]);
  expect(indexReads(p, 'github_requests_spend', ['Index Only Scan']), p.shown).not.toEqual([]);
  const scan = ['Index Scan', 'Index Only Scan'];
  expect(indexReads(p, 'github_requests_unfinished', scan), p.shown).not.toEqual([]);
  expect(indexReads(p, 'github_requests_finished', scan), p.shown).not.toEqual([]);
  expect(seqScans(p, 'github_requests'), p.shown).toEqual([]);
  expect(seqScans(p, 'github_request_minutes'), p.shown).toEqual([]);
}

describe('hot-path plans', () => {
  it('the budget reads its window from the counters, never row by row (ADR 0083)', async () => {
    // Two days of history for two credentials, 304s and unsent abandoned rows among them:
    // token:a's window holds ~1,500 spending rows, 25 a minute.
    const now = new Date();
    await load(
      'github_requests',
      sql`
      INSERT INTO github_requests (credential, purpose, path, outcome, status, counted,
        reserved_at, sent_at, finished_at)
      SELECT CASE WHEN g % 2 = 0 THEN 'token:a' ELSE 'token:b' END,
        CASE WHEN g % 3 = 0 THEN 'poll' ELSE 'enrich' END, '/x',
        CASE WHEN g % 50 = 0 THEN 'abandoned' ELSE 'completed' END,
        CASE WHEN g % 7 = 0 THEN 304 ELSE 200 END, g % 7 <> 0,
        ${now}::timestamptz - g * interval '1 second',
        CASE WHEN g % 50 = 0 THEN NULL ELSE ${now}::timestamptz - g * interval '1 second' END,
        ${now}::timestamptz - g * interval '1 second'
      FROM generate_series(1, 172800) g`,
    );
    await sql`VACUUM (ANALYZE) github_request_minutes`.execute(t.db);
    const policy = [{ label: 'token:a', defaultQuota: 5000 }];
    const pool = [...policy, { label: 'token:b', defaultQuota: 5000 }];
    // The window past its reset (the last 60 minutes), then GitHub's hour (a reset ahead).
    for (const fresh of [false, true]) {
      if (fresh) {
        await sql`
          INSERT INTO github_rate_limits (credential, quota, remaining, reset_at, observed_at)
          VALUES ('token:a', 5000, 3000, ${now}::timestamptz + interval '10 minutes',
            ${now}::timestamptz - interval '30 seconds')`.execute(t.db);
      }
      const statement = budgetStateStatement(policy, now);
      // Planned for these parameters, then as the plan a session caches once (a poll's
      // reservation and pick, generic): the same short range scans, whatever the parameters.
      const plans = [
        {
          shown: await explain(t.db, statement),
          rows: rowsRead(await explain(t.db, statement, { analyze: true })),
        },
        { shown: await genericPlan(statement), rows: rowsRead(await genericPlan(statement, true)) },
      ];
      for (const { shown, rows } of plans) {
        expectBudgetIndexes(shown);
        // What it reads, executed: a minute or two of rows at most, never the window's ~1,500.
        expect(rows.github_request_minutes).toBeLessThanOrEqual(62);
        expect(rows.github_requests).toBeLessThan(120);
      }
      // The statements a poll runs generically: the pool's pick and the reservation.
      const statements = [
        quickPickStatement(
          { credentials: pool, share: 2 / 3 },
          'poll',
          now,
          '/repos/o/r/events',
          true,
        ),
        reservationStatement(policy[0]!, 2 / 3, 'poll', { now, path: '/repos/o/r/events' }),
      ];
      for (const s of statements) {
        const shown = await genericPlan(s);
        expect(indexReads(shown, 'github_request_minutes_pkey'), shown.shown).not.toEqual([]);
        expect(seqScans(shown, 'github_requests'), shown.shown).toEqual([]);
        expect(seqScans(shown, 'github_request_minutes'), shown.shown).toEqual([]);
        const rows = rowsRead(await genericPlan(s, true));
        expect(rows.github_request_minutes).toBeLessThanOrEqual(2 * 62);
        expect(rows.github_requests ?? 0).toBeLessThan(240);
      }
    }
  });

  it('countDue counts pending rows from their tally and the rest from indexes alone', async () => {
    await load(
      'actors',
      sql`
      INSERT INTO actors (id, login, enrichment_state, enriched_at, first_seen_at,
        next_attempt_at, claimed_until)
      SELECT g, 'u' || g, CASE WHEN g % 100 = 0 THEN 'pending' ELSE 'enriched' END,
        CASE WHEN g % 100 = 0 THEN NULL ELSE now() - (g % 20) * interval '1 day' END,
        now() - interval '30 days', now() - interval '1 hour',
        CASE WHEN g % 300 = 0 THEN now() + interval '1 minute' END
      FROM generate_series(1, 100000) g`,
    );
    const p = await explain(t.db, countDueStatement('actor', new Date(), 7 * 86400));
    expect(indexReads(p, 'actors_pending', ['Index Only Scan']), p.shown).not.toEqual([]);
    expect(indexReads(p, 'actors_age_out', ['Index Only Scan']), p.shown).not.toEqual([]);
    expect(indexReads(p, 'actors_leased', ['Index Only Scan']), p.shown).not.toEqual([]);
    // The pending ones are a tally (migration 2026-12-05T1440), not the backlog's index
    // entries; its deltas table, read whole by design, is the only table scanned.
    expect(
      seqScans(p).map((n) => n['Relation Name']),
      p.shown,
    ).toEqual(['entity_tally_deltas']);
    // And the count is right: 1,000 pending minus the 333 under a live lease (g % 300 = 0
    // are all pending), plus enriched rows 8–19 days old (12 of every 20 days).
    const r = await countDueStatement('actor', new Date(), 7 * 86400).execute(t.db);
    const enrichedOld = await sql<{ n: string }>`
      SELECT count(*) AS n FROM actors
      WHERE enrichment_state = 'enriched' AND enriched_at < now() - interval '7 days'`.execute(
      t.db,
    );
    expect(Number(r.rows[0]!.n)).toBe(1000 - 333 + Number(enrichedOld.rows[0]!.n));
  });
});
