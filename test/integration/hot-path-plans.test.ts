import { type RawBuilder, sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { countDueStatement } from '../../src/enrichment/due.ts';
import { budgetStateStatement } from '../../src/github/budget.ts';
import { useTestDatabase } from '../support/db.ts';

/**
 * The two counts benchmark 2 found slow are index-only (migration 2026-11-29T0930): the
 * budget's window count on every reservation, and countDue. Checked as plans, on tables
 * big enough that the planner would otherwise choose something else; no timings. Runs on
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
  await sql`VACUUM (ANALYZE) ${sql.table(table)}`.execute(t.db);
  const vm = await sql<{ pages: number; visible: number }>`
    SELECT relpages AS pages, relallvisible AS visible FROM pg_class WHERE relname = ${table}`.execute(
    t.db,
  );
  const { pages, visible } = vm.rows[0]!;
  expect(pages).toBeGreaterThan(100);
  expect(visible / pages).toBeGreaterThan(0.95);
}

async function plan(statement: RawBuilder<unknown>): Promise<string> {
  const compiled = statement.compile(t.db);
  const r = await t.db.executeQuery({ ...compiled, sql: `EXPLAIN ${compiled.sql}` });
  return (r.rows as { 'QUERY PLAN': string }[]).map((x) => x['QUERY PLAN']).join('\n');
}

describe('hot-path plans', () => {
  it('the budget counts the window from github_requests_spend alone', async () => {
    // Two days of history for two credentials, 304s and unsent abandoned rows among them.
    await load(
      'github_requests',
      sql`
      INSERT INTO github_requests (credential, purpose, path, outcome, status, counted,
        reserved_at, sent_at, finished_at)
      SELECT CASE WHEN g % 2 = 0 THEN 'token:a' ELSE 'token:b' END,
        CASE WHEN g % 3 = 0 THEN 'poll' ELSE 'enrich' END, '/x',
        CASE WHEN g % 50 = 0 THEN 'abandoned' ELSE 'completed' END,
        CASE WHEN g % 7 = 0 THEN 304 ELSE 200 END, g % 7 <> 0,
        now() - g * interval '1 second',
        CASE WHEN g % 50 = 0 THEN NULL ELSE now() - g * interval '1 second' END,
        now() - g * interval '1 second'
      FROM generate_series(1, 172800) g`,
    );
    const p = await plan(budgetStateStatement('token:a', new Date()));
    expect(p).toMatch(/Index Only Scan using github_requests_spend/);
    expect(p).not.toMatch(/Seq Scan on github_requests/);
  });

  it('countDue counts pending and aged-out rows from their indexes alone', async () => {
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
    const p = await plan(countDueStatement('actor', new Date(), 7 * 86400));
    expect(p).toMatch(/Index Only Scan using actors_pending/);
    expect(p).toMatch(/Index Only Scan using actors_age_out/);
    expect(p).not.toMatch(/Seq Scan/);
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
