import { sql } from 'kysely';
import type { Db } from '../platform/db/pool.ts';

/**
 * How complete each hour is (docs/mirrors.md): the view hourly_coverage, read through its
 * function hourly_coverage_between(since, until) so a window reads the BRIN index on
 * push_events.created_at. Every stored push is counted once, by the origin it first
 * arrived from; the hours of the window with nothing in them are zeros, so a chart or a
 * table shows the holes as holes.
 */

export interface CoverageHour {
  /** The hour's first instant (UTC). */
  hour: Date;
  pushes: number;
  poll: number;
  webhook: number;
  archive: number;
  /** Gaps still open that overlap this hour. */
  gapsOpen: number;
  /** Mirrors whose file of this hour was read (by bin/backfill or a gap fill). */
  mirrorsRead: number;
}

export const DEFAULT_COVERAGE_HOURS = 48;
/** A year of hours: the window's bound (the answer is one row an hour). */
export const MAX_COVERAGE_HOURS = 24 * 366;

const HOUR_MS = 3_600_000;

/** The last `hours` UTC hours up to and including the current one, oldest first. */
export async function hourlyCoverage(
  db: Db,
  now: Date,
  hours = DEFAULT_COVERAGE_HOURS,
): Promise<CoverageHour[]> {
  const current = Math.floor(now.getTime() / HOUR_MS) * HOUR_MS;
  const since = new Date(current - (hours - 1) * HOUR_MS);
  const until = new Date(current + HOUR_MS);
  const r = await sql<{
    hour: Date;
    pushes: string;
    poll: string;
    webhook: string;
    archive: string;
    gaps_open: string;
    mirrors_read: string;
  }>`SELECT * FROM hourly_coverage_between(${since}, ${until})`.execute(db);
  const out: CoverageHour[] = Array.from({ length: hours }, (_, i) => ({
    hour: new Date(since.getTime() + i * HOUR_MS),
    pushes: 0,
    poll: 0,
    webhook: 0,
    archive: 0,
    gapsOpen: 0,
    mirrorsRead: 0,
  }));
  for (const row of r.rows) {
    const i = Math.round((row.hour.getTime() - since.getTime()) / HOUR_MS);
    if (i < 0 || i >= hours) continue;
    out[i] = {
      hour: out[i]!.hour,
      pushes: Number(row.pushes),
      poll: Number(row.poll),
      webhook: Number(row.webhook),
      archive: Number(row.archive),
      gapsOpen: Number(row.gaps_open),
      mirrorsRead: Number(row.mirrors_read),
    };
  }
  return out;
}
