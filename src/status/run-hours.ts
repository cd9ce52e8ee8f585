import { sql } from 'kysely';
import type { Db } from '../platform/db/pool.ts';

/**
 * The status surfaces' "last 24 hours" of runs, read from the hourly rollups (migration
 * 2026-12-02T0300, ADR 0150) instead of every run: the current UTC hour and the 23 before
 * it, so between 23 and 24 hours, never more. A run counts in its rollups once it has its
 * outcome; the runs still in flight (few: one a source at most) are read live from
 * ingestion_runs_running. What these read is bounded by sources × 24 hours, whatever the
 * history held.
 */

export const RUN_WINDOW_HOURS = 24;
const HOUR_MS = 3_600_000;

/** The first instant the window counts: the start of the hour 23 hours before the current one. */
export function runWindowStart(now: Date): Date {
  return new Date(Math.floor(now.getTime() / HOUR_MS) * HOUR_MS - (RUN_WINDOW_HOURS - 1) * HOUR_MS);
}

/**
 * One source's window (alias `s`, an event_sources row) as lateral subqueries `day`: runs,
 * events, rejected, gaps — its rollup rows plus its runs in flight.
 */
export function sourceWindowSql(since: Date) {
  return sql`CROSS JOIN LATERAL (
      SELECT h.runs + l.runs AS runs, h.events + l.events AS events,
             h.rejected + l.rejected AS rejected, h.gaps + l.gaps AS gaps
      FROM (
        SELECT coalesce(sum(runs), 0) AS runs, coalesce(sum(events), 0) AS events,
               coalesce(sum(rejected), 0) AS rejected, coalesce(sum(gaps), 0) AS gaps
        FROM ingestion_run_hours WHERE source_id = s.id AND hour >= ${since}
      ) h, (
        SELECT count(*) AS runs, coalesce(sum(events_created), 0) AS events,
               coalesce(sum(events_rejected), 0) AS rejected,
               count(*) FILTER (WHERE gap_detected) AS gaps
        FROM ingestion_runs
        WHERE source_id = s.id AND status = 'running' AND started_at >= ${since}
      ) l
    ) day`;
}

/** Every source's runs in the window by outcome ('running': in flight), and the gaps they recorded. */
export async function runsInWindow(
  db: Db,
  now: Date,
): Promise<{ byStatus: Record<string, number>; gaps: number }> {
  const since = runWindowStart(now);
  const r = await sql<{ status: string; n: string; gaps: string }>`
    SELECT status, sum(runs) AS n, sum(gaps) AS gaps
    FROM ingestion_run_totals WHERE hour >= ${since} GROUP BY status
    UNION ALL
    SELECT 'running', count(*), count(*) FILTER (WHERE gap_detected)
    FROM ingestion_runs WHERE status = 'running' AND started_at >= ${since}`.execute(db);
  const byStatus: Record<string, number> = {};
  let gaps = 0;
  for (const row of r.rows) {
    const n = Number(row.n);
    gaps += Number(row.gaps);
    // Counted rows that came back to 0 (their runs deleted) say nothing.
    if (n > 0) byStatus[row.status] = (byStatus[row.status] ?? 0) + n;
  }
  return { byStatus, gaps };
}
