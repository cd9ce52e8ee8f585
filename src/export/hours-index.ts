import { sql } from 'kysely';
import type { Db } from '../db/pool.ts';
import { COMMITS_STATES, type CommitsState } from '../db/schema.ts';
import { hourFileName, hourOf } from '../gaps/hours.ts';
import { VISIBLE } from './hour-query.ts';

/**
 * GET /archive/'s answer: the hours of a window that hold pushes or an open gap, each with
 * its pushes (as its file counts them), their commits states and whether it is still open
 * — a gap overlaps it, or pushes wait for their commits: its file will change.
 */

const HOUR_MS = 3_600_000;

export interface IndexHour {
  hour: string;
  /** Relative to /archive/. */
  file: string;
  pushes: number;
  commits: Record<CommitsState, number>;
  gaps_open: number;
  open: boolean;
}

export interface ArchiveIndex {
  /** The window: [from, to), the last `hours` complete hours. */
  from: string;
  to: string;
  hours: IndexHour[];
}

function zeros(): Record<CommitsState, number> {
  return Object.fromEntries(COMMITS_STATES.map((s) => [s, 0])) as Record<CommitsState, number>;
}

export async function archiveIndex(db: Db, now: Date, hours: number): Promise<ArchiveIndex> {
  const to = hourOf(now).start;
  const from = new Date(to.getTime() - hours * HOUR_MS);
  const pushes = await sql<{ hour: Date; state: CommitsState; n: string }>`
    SELECT date_trunc('hour', p.created_at, 'UTC') AS hour, p.commits_state AS state, count(*) AS n
    FROM push_events p JOIN repositories r ON r.id = p.repository_id
    WHERE p.created_at >= ${from} AND p.created_at < ${to} AND ${sql.raw(VISIBLE)}
    GROUP BY 1, 2`.execute(db);
  const gaps = await sql<{ hour: Date; n: string }>`
    SELECT h AS hour, count(*) AS n
    FROM gaps, generate_series(date_trunc('hour', greatest(gaps.from_at, ${from}), 'UTC'),
                               least(gaps.to_at, ${to}), interval '1 hour') AS h
    WHERE gaps.state = 'open' AND gaps.to_at >= ${from} AND gaps.from_at < ${to} AND h < ${to}
    GROUP BY 1`.execute(db);
  const byHour = new Map<number, IndexHour>();
  const entry = (at: Date) => {
    const key = at.getTime();
    let e = byHour.get(key);
    if (!e) {
      const h = hourOf(at);
      e = {
        hour: h.name,
        file: hourFileName(h),
        pushes: 0,
        commits: zeros(),
        gaps_open: 0,
        open: false,
      };
      byHour.set(key, e);
    }
    return e;
  };
  for (const r of pushes.rows) {
    const e = entry(r.hour);
    e.pushes += Number(r.n);
    e.commits[r.state] += Number(r.n);
  }
  for (const r of gaps.rows) entry(r.hour).gaps_open = Number(r.n);
  for (const e of byHour.values()) e.open = e.gaps_open > 0 || e.commits.pending > 0;
  return {
    from: from.toISOString(),
    to: to.toISOString(),
    hours: [...byHour.entries()].sort((a, b) => a[0] - b[0]).map(([, e]) => e),
  };
}
