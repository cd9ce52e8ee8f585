import { sql } from 'kysely';
import type { Db } from '../../src/platform/db/pool.ts';

/**
 * A large deployment's sources, set-based (INSERT … SELECT generate_series): `n` sources,
 * 1 in 100 an org feed, the rest repos; 1 in 50 disabled; 1 in 97 failing (g % 20 + 1
 * failures in a row, a last error); 1 in 61 overdue (its next poll `g` × 10 s + 10 min past);
 * the rest polled within the last hour and due within the next minute. Each source polled
 * has `runsPerSource` runs in the last 24 hours. The counts by state are in manyCounts.
 */
export async function seedManySources(
  db: Db,
  n: number,
  now: Date,
  runsPerSource = 1,
): Promise<void> {
  await sql`
    INSERT INTO event_sources (kind, target, mode, enabled, commits_enabled, poll_interval_seconds, next_poll_at,
      consecutive_failures, last_error, last_polled_at)
    SELECT CASE WHEN g % 100 = 0 THEN 'org' ELSE 'repo' END,
      CASE WHEN g % 100 = 0 THEN 'org-' || g ELSE 'owner-' || g || '/repo-' || g END,
      'live', g % 50 <> 7, true, 60,
      CASE WHEN g % 61 = 5 THEN ${now}::timestamptz - interval '10 minutes' - g * interval '10 seconds'
           ELSE ${now}::timestamptz + (g % 60) * interval '1 second' END,
      CASE WHEN g % 97 = 3 THEN g % 20 + 1 ELSE 0 END,
      CASE WHEN g % 97 = 3 THEN 'GITHUB_UNAVAILABLE: GitHub answered 502 for source ' || g END,
      ${now}::timestamptz - (g % 3600) * interval '1 second'
    FROM generate_series(1, ${n}::int) g`.execute(db);
  await sql`
    INSERT INTO ingestion_runs (source_id, status, started_at, finished_at, pages_fetched,
      events_seen, events_created, error)
    SELECT s.id, CASE WHEN s.consecutive_failures > 0 AND r = 0 THEN 'failed' ELSE 'not_modified' END,
      s.last_polled_at - r * interval '10 minutes',
      s.last_polled_at - r * interval '10 minutes' + interval '200 milliseconds',
      1, 0, 0,
      CASE WHEN s.consecutive_failures > 0 AND r = 0 THEN s.last_error END
    FROM event_sources s, generate_series(0, ${runsPerSource - 1}::int) r`.execute(db);
  await sql`ANALYZE event_sources`.execute(db);
  await sql`ANALYZE ingestion_runs`.execute(db);
}

/** What seedManySources makes of 1..n, by the states the status report counts. */
export function manyCounts(n: number) {
  const c = { ok: 0, new: 0, failing: 0, overdue: 0, disabled: 0, org: 0, repo: 0 };
  for (let g = 1; g <= n; g++) {
    if (g % 100 === 0) c.org++;
    else c.repo++;
    if (g % 50 === 7) c.disabled++;
    else if (g % 97 === 3) c.failing++;
    else if (g % 61 === 5) c.overdue++;
    else c.ok++;
  }
  return c;
}
