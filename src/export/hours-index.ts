import { COMMITS_STATES, type CommitsState } from '../platform/db/columns.ts';
import type { Db } from '../platform/db/pool.ts';
import { hourFileName, hourOf } from '../store/archive-hours.ts';
import { type OpenReason, openReasonsBetween, withPending } from '../store/open-hours.ts';
import { VISIBLE } from './hour-query.ts';
import { inHourSnapshot } from './write.ts';

/**
 * GET /archive/'s answer: the hours of a window that hold pushes, an open gap or an import,
 * each with its pushes (as its file counts them), their commits states, and whether it is
 * still open and why (src/store/open-hours.ts): its file will change. Read in one snapshot.
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
  /** Why it is open (empty when final); all but `commits_pending` say pushes may be added. */
  open_reasons: OpenReason[];
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
  return inHourSnapshot(db, async (run) => {
    const pushes = await run<{ hour: Date; state: CommitsState; n: string }>(
      `SELECT date_trunc('hour', p.created_at, 'UTC') AS hour, p.commits_state AS state, count(*) AS n
       FROM push_events p JOIN repositories r ON r.id = p.repository_id
       WHERE p.created_at >= $1 AND p.created_at < $2 AND ${VISIBLE}
       GROUP BY 1, 2`,
      [from, to],
    );
    const gaps = await run<{ hour: Date; n: string }>(
      `SELECT h AS hour, count(*) AS n
       FROM gaps, generate_series(date_trunc('hour', greatest(gaps.from_at, $1::timestamptz), 'UTC'),
                                  least(gaps.to_at, $2::timestamptz), interval '1 hour') AS h
       WHERE gaps.state = 'open' AND gaps.to_at >= $1::timestamptz AND gaps.from_at < $2::timestamptz
         AND h < $2::timestamptz
       GROUP BY 1`,
      [from, to],
    );
    const reasons = await openReasonsBetween(run, from, to, now);
    const byHour = new Map<number, IndexHour>();
    const entry = (key: number) => {
      let e = byHour.get(key);
      if (!e) {
        const h = hourOf(new Date(key));
        e = {
          hour: h.name,
          file: hourFileName(h),
          pushes: 0,
          commits: zeros(),
          gaps_open: 0,
          open: false,
          open_reasons: [],
        };
        byHour.set(key, e);
      }
      return e;
    };
    for (const r of pushes) {
      const e = entry(r.hour.getTime());
      e.pushes += Number(r.n);
      e.commits[r.state] += Number(r.n);
    }
    for (const r of gaps) entry(r.hour.getTime()).gaps_open = Number(r.n);
    // An hour an import holds is listed even before its first pushes land.
    for (const [key, list] of reasons) {
      if (list.includes('importing') || list.includes('incomplete')) entry(key);
    }
    for (const [key, e] of byHour) {
      e.open_reasons = withPending(reasons.get(key) ?? [], e.commits.pending);
      e.open = e.open_reasons.length > 0;
    }
    return {
      from: from.toISOString(),
      to: to.toISOString(),
      hours: [...byHour.entries()].sort((a, b) => a[0] - b[0]).map(([, e]) => e),
    };
  });
}
