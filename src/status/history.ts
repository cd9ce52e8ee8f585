import { retentionPlaces } from '../jobs/month-retention.ts';
import type { Config } from '../platform/config/config.ts';
import type { Db } from '../platform/db/pool.ts';
import { firstKeptMonth, historyRows, queryOn, storedMonths } from '../store/history-months.ts';

/**
 * The months of push history (ADR 0201): each month Postgres holds, with its partition's
 * bytes now, and each month retention dropped, with the bytes it took then (history_months:
 * its partition is gone). `kept`: held, inside HISTORY_MONTHS or not yet verified (with
 * why); `exported`: held and verified in every place, not dropped yet; `dropped`: only in
 * the archive now.
 */

export interface HistoryMonthStatus {
  month: string;
  state: 'kept' | 'exported' | 'dropped';
  /** Its partition's bytes now; for a dropped month, when it was dropped. */
  bytes: number | null;
  /** Pushes it held when retention last verified it (null: never verified). */
  pushes: number | null;
  /** Why a month past the kept window is still held. */
  reason: string | null;
  exportedTo: string | null;
  droppedAt: Date | null;
}

export interface HistoryStatus {
  /** HISTORY_MONTHS here (null: every month is kept). */
  historyMonths: number | null;
  /** The oldest month kept whatever happens (null: every month). */
  firstKept: string | null;
  /** Where a month must be verified before it is dropped (ARCHIVE_DIR, RETENTION_MIRROR). */
  places: string[];
  months: HistoryMonthStatus[];
  totals: Record<HistoryMonthStatus['state'], { months: number; bytes: number }>;
}

export async function historyStatus(
  db: Db,
  config: Pick<Config, 'history'>,
  now: Date,
): Promise<HistoryStatus> {
  const q = queryOn(db);
  const stored = await storedMonths(q);
  const rows = new Map((await historyRows(q)).map((r) => [r.month, r]));
  const held = new Set(stored.map((s) => s.month.name));
  const months: HistoryMonthStatus[] = stored.map((s) => {
    const r = rows.get(s.month.name);
    // A month recorded dropped whose partition is back was read in again: held, kept.
    const state = r?.state === 'exported' ? 'exported' : 'kept';
    return {
      month: s.month.name,
      state,
      bytes: s.bytes,
      pushes: r?.pushes ?? null,
      reason: r?.state === 'kept' ? r.reason : null,
      exportedTo: r?.state === 'exported' ? r.exportedTo : null,
      droppedAt: null,
    };
  });
  for (const r of rows.values()) {
    if (r.state !== 'dropped' || held.has(r.month)) continue;
    months.push({
      month: r.month,
      state: 'dropped',
      bytes: r.bytes,
      pushes: r.pushes,
      reason: null,
      exportedTo: r.exportedTo,
      droppedAt: r.droppedAt,
    });
  }
  months.sort((a, b) => (a.month < b.month ? -1 : a.month > b.month ? 1 : 0));
  const totals = {
    kept: { months: 0, bytes: 0 },
    exported: { months: 0, bytes: 0 },
    dropped: { months: 0, bytes: 0 },
  };
  for (const m of months) {
    totals[m.state].months++;
    totals[m.state].bytes += m.bytes ?? 0;
  }
  const n = config.history.months;
  return {
    historyMonths: n,
    firstKept: n === null ? null : firstKeptMonth(now, n).name,
    places: retentionPlaces(config).map((p) => p.label),
    months,
    totals,
  };
}
