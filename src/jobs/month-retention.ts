import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { type ArchivePlace, archivePlace, readSmall } from '../export/archive-place.ts';
import { exportHour } from '../export/hour-export.ts';
import { manifestName } from '../export/manifest.ts';
import { checkMonth, type HourProblem, monthChanges } from '../export/month-check.ts';
import { sweepTemporaryFiles } from '../export/temporary-files.ts';
import { inHourSnapshot } from '../export/write.ts';
import type { Config } from '../platform/config/config.ts';
import type { Db } from '../platform/db/pool.ts';
import { faultPoint } from '../platform/fault.ts';
import type { Logger } from '../platform/log.ts';
import {
  dropMonth,
  firstKeptMonth,
  type Month,
  monthHours,
  queryOn,
  recordHeldMonth,
  storedMonths,
} from '../store/history-months.ts';

/**
 * Retention of push history (ADR 0201): with HISTORY_MONTHS = N, every month of push_events
 * older than the current one and the N-1 before it is, oldest first,
 *
 * 1. exported where it is missing: each hour without a manifest in ARCHIVE_DIR is written
 *    there (JSON, both Parquet tables, the manifest), never over a file already there;
 * 2. verified by reading the files in every place (ARCHIVE_DIR, RETENTION_MIRROR) against
 *    the store (src/export/month-check.ts);
 * 3. dropped, only then, in one transaction that checks nothing changed since (store/
 *    history-months.ts). A month with any hour unexported or unverifiable stays, and the
 *    log says which hour and why (`retention.kept_unexported`).
 *
 * Run by the maintenance job (bounded by its time: a month cut short is checked again next
 * time) and by bin/retention.
 */

export interface RetentionDeps {
  db: Db;
  config: Pick<Config, 'history'>;
  logger: Logger;
}

export interface RetentionOptions {
  now: Date;
  /** Verify and say what would be dropped: export nothing, drop nothing, record nothing. */
  dryRun?: boolean;
  /** Export a month's missing hours into ARCHIVE_DIR first (default: yes when it is set). */
  exportMissing?: boolean;
  signal?: AbortSignal;
}

export const MONTH_ACTIONS = ['dropped', 'would_drop', 'kept', 'interrupted'] as const;
export type MonthAction = (typeof MONTH_ACTIONS)[number];

export interface MonthOutcome {
  month: string;
  action: MonthAction;
  /** Why it was kept (null when dropped or it would be). */
  reason: string | null;
  /** The first hour found unexported or unverifiable, when that is why. */
  problem: HourProblem | null;
  /** Hours exported into ARCHIVE_DIR by this run. */
  exportedHours: number;
  /** The partition's bytes (when dropped: what the drop freed). */
  bytes: number;
  /** Pushes verified (the month's, when it was dropped or would be). */
  pushes: number;
}

export interface RetentionReport {
  /** HISTORY_MONTHS (null: retention is off, nothing looked at). */
  historyMonths: number | null;
  /** The oldest month kept whatever happens: `2026-10`. */
  firstKept: string | null;
  /** Where a month must be verified before it is dropped. */
  places: string[];
  months: MonthOutcome[];
}

/** The places a month must be verified in: ARCHIVE_DIR, then RETENTION_MIRROR. */
export function retentionPlaces(config: Pick<Config, 'history'>): ArchivePlace[] {
  const h = config.history;
  return [h.archiveDir, h.mirror].filter((p): p is string => p !== null).map(archivePlace);
}

/** Exports every hour of the month that has no manifest in `dir`; returns how many. */
async function exportMissingHours(
  db: Db,
  month: Month,
  dir: string,
  o: { now: Date; signal?: AbortSignal; logger: Logger },
): Promise<number> {
  const place = archivePlace(dir);
  await mkdir(dir, { recursive: true });
  for (const d of [dir, path.join(dir, 'pushes'), path.join(dir, 'push_commits')]) {
    await sweepTemporaryFiles(d);
  }
  const formats = new Set(['json', 'parquet'] as const);
  let n = 0;
  for (const hour of monthHours(month)) {
    o.signal?.throwIfAborted();
    if ((await readSmall(place, manifestName(hour), 1024 * 1024)) !== null) continue;
    await inHourSnapshot(db, (run) => exportHour(run, hour, dir, formats, { signal: o.signal }));
    n++;
  }
  if (n > 0) {
    o.logger.info(
      { event: 'retention.month_exported', month: month.name, hours: n, to: dir },
      `${month.name}: ${n} hours exported into ${dir}`,
    );
  }
  return n;
}

export async function runRetention(
  deps: RetentionDeps,
  o: RetentionOptions,
): Promise<RetentionReport> {
  const { db, config, logger } = deps;
  const n = config.history.months;
  const places = retentionPlaces(config);
  const report: RetentionReport = {
    historyMonths: n,
    firstKept: n === null ? null : firstKeptMonth(o.now, n).name,
    places: places.map((p) => p.label),
    months: [],
  };
  if (n === null) return report;
  const first = firstKeptMonth(o.now, n);
  const q = queryOn(db);
  const old = (await storedMonths(q)).filter((m) => m.month.start < first.start);
  const exportedTo = report.places.join(', ');
  for (const stored of old) {
    const { month } = stored;
    const outcome: MonthOutcome = {
      month: month.name,
      action: 'kept',
      reason: null,
      problem: null,
      exportedHours: 0,
      bytes: stored.bytes,
      pushes: 0,
    };
    report.months.push(outcome);
    const keep = async (reason: string, pushes: number | null) => {
      outcome.reason = reason;
      if (!o.dryRun) {
        await recordHeldMonth(q, month, {
          state: 'kept',
          reason,
          pushes,
          exportedTo: null,
          verifiedAt: null,
        });
      }
    };
    try {
      if (!o.dryRun && (o.exportMissing ?? true) && config.history.archiveDir !== null) {
        outcome.exportedHours = await exportMissingHours(db, month, config.history.archiveDir, {
          now: o.now,
          signal: o.signal,
          logger,
        });
      }
      const check = await checkMonth(db, month, places, { now: o.now, signal: o.signal });
      outcome.pushes = check.pushes;
      if (check.problem) {
        const p = check.problem;
        outcome.problem = p;
        const where = p.place ? ` in ${p.place}` : '';
        await keep(`${p.hour}${where}: ${p.problem}: ${p.detail}`, null);
        logger.warn(
          {
            event: 'retention.kept_unexported',
            month: month.name,
            hour: p.hour,
            place: p.place,
            problem: p.problem,
            detail: p.detail,
            hours_verified: check.hours,
          },
          `${month.name} is kept: hour ${p.hour} is not exported${where} (${p.problem}: ${p.detail})`,
        );
        continue;
      }
      if (o.dryRun) {
        outcome.action = 'would_drop';
        continue;
      }
      // Verified: said so before the drop, so that a drop that fails or dies leaves the
      // month recorded as what it is.
      await recordHeldMonth(q, month, {
        state: 'exported',
        reason: null,
        pushes: check.pushes,
        exportedTo,
        verifiedAt: check.verifiedAt,
      });
      const dropped = await dropMonth(db, {
        month,
        pushes: check.pushes,
        exportedTo,
        verifiedAt: check.verifiedAt,
        stillVerified: async (lockedQ) => {
          const now = await monthChanges(lockedQ, month);
          return now === check.changes
            ? null
            : 'written to since it was verified (its files no longer say all it holds)';
        },
        beforeCommit: () => faultPoint('retention.before_commit'),
      });
      if (!dropped.dropped) {
        await keep(dropped.reason, check.pushes);
        logger.warn(
          { event: 'retention.kept_changed', month: month.name, reason: dropped.reason },
          `${month.name} is kept this time: ${dropped.reason}`,
        );
        continue;
      }
      outcome.action = 'dropped';
      outcome.bytes = dropped.bytes;
      logger.info(
        {
          event: 'retention.month_dropped',
          month: month.name,
          bytes: dropped.bytes,
          pushes: check.pushes,
          exported_to: exportedTo,
        },
        `${month.name} dropped from Postgres (${dropped.bytes} bytes, ${check.pushes} pushes): every hour verified in ${exportedTo}`,
      );
    } catch (err) {
      if (o.signal?.aborted) {
        outcome.action = 'interrupted';
        outcome.reason = 'stopped before it was verified';
        logger.info(
          { event: 'retention.interrupted', month: month.name },
          `${month.name}: retention stopped before the month was verified; it is checked again next time`,
        );
        break;
      }
      throw err;
    }
  }
  return report;
}
