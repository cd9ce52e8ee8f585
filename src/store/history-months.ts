import { CompiledQuery } from 'kysely';
import { KEY_DIGEST_FUNCTION } from '../../db/migrations/2026-12-05T1100_push_events_by_month.ts';
import type { Db } from '../platform/db/pool.ts';
import { type ArchiveHour, hourOf } from './archive-hours.ts';
import { FORGET_MONTH_TALLIES } from './push-tallies.ts';

/**
 * The months of push_events (ADR 0201): one partition a month, `push_events_YYYY_MM`, and
 * `history_months`, what retention recorded of each month it looked at. A dropped month
 * has no partition left; its row here is what status shows of it (the bytes it took, the
 * pushes it held, where its hours are). The statements that drop a month are here, one
 * transaction: its keys, DETACH, DROP and its record, together or not at all.
 */

/** A UTC calendar month: `2015-01`, starting 2015-01-01T00:00Z. */
export interface Month {
  name: string;
  start: Date;
}

export type Query = <R>(text: string, params?: readonly unknown[]) => Promise<R[]>;

const pad = (n: number) => String(n).padStart(2, '0');

function monthAt(year: number, month0: number): Month {
  const start = new Date(Date.UTC(year, month0, 1));
  return { name: `${start.getUTCFullYear()}-${pad(start.getUTCMonth() + 1)}`, start };
}

/** The month containing `at`. */
export function monthOf(at: Date): Month {
  return monthAt(at.getUTCFullYear(), at.getUTCMonth());
}

/** `k` months after `m` (before it when negative). */
export function addMonths(m: Month, k: number): Month {
  return monthAt(m.start.getUTCFullYear(), m.start.getUTCMonth() + k);
}

/** The first instant after the month. */
export function monthEnd(m: Month): Date {
  return addMonths(m, 1).start;
}

/** `2015-01` → the month; null when it is not one (months 01 to 12, years 2000 to 9999). */
export function parseMonth(raw: string): Month | null {
  const m = /^(\d{4})-(\d{2})$/.exec(raw);
  if (!m) return null;
  const [y, mo] = [Number(m[1]), Number(m[2])];
  if (y < 2000 || mo < 1 || mo > 12) return null;
  return monthAt(y, mo - 1);
}

/** Every hour of the month, in order (GH Archive's names). */
export function monthHours(m: Month): ArchiveHour[] {
  const hours: ArchiveHour[] = [];
  for (let t = m.start.getTime(); t < monthEnd(m).getTime(); t += 3_600_000) {
    hours.push(hourOf(new Date(t)));
  }
  return hours;
}

/** The month's partition of push_events. */
export function partitionName(m: Month): string {
  return `push_events_${m.name.replace('-', '_')}`;
}

/** With HISTORY_MONTHS = n, the oldest month kept: the current one and the n-1 before it. */
export function firstKeptMonth(now: Date, n: number): Month {
  return addMonths(monthOf(now), -(n - 1));
}

export function queryOn(db: Db): Query {
  return async <R>(text: string, params: readonly unknown[] = []) =>
    (await db.executeQuery<R>(CompiledQuery.raw(text, [...params]))).rows as R[];
}

/** A month Postgres holds now: its partition and that partition's bytes (indexes and TOAST in). */
export interface StoredMonth {
  month: Month;
  partition: string;
  bytes: number;
}

/** Every month push_events has a partition for, oldest first. */
export async function storedMonths(q: Query): Promise<StoredMonth[]> {
  const rows = await q<{ name: string; bytes: string }>(
    `SELECT c.relname AS name, pg_total_relation_size(c.oid)::text AS bytes
     FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
     WHERE i.inhparent = 'push_events'::regclass
     ORDER BY c.relname`,
  );
  const out: StoredMonth[] = [];
  for (const r of rows) {
    const m = /^push_events_(\d{4})_(\d{2})$/.exec(r.name);
    const month = m ? parseMonth(`${m[1]}-${m[2]}`) : null;
    if (month) out.push({ month, partition: r.name, bytes: Number(r.bytes) });
  }
  return out;
}

export const HISTORY_STATES = ['kept', 'exported', 'dropped'] as const;
export type HistoryState = (typeof HISTORY_STATES)[number];

export interface HistoryRow {
  month: string;
  state: HistoryState;
  reason: string | null;
  pushes: number | null;
  bytes: number | null;
  exportedTo: string | null;
  verifiedAt: Date | null;
  droppedAt: Date | null;
  updatedAt: Date;
}

/** Every month retention recorded, oldest first. */
export async function historyRows(q: Query): Promise<HistoryRow[]> {
  const rows = await q<{
    month: string;
    state: HistoryState;
    reason: string | null;
    pushes: string | null;
    bytes: string | null;
    exported_to: string | null;
    verified_at: Date | null;
    dropped_at: Date | null;
    updated_at: Date;
  }>(
    `SELECT to_char(month, 'YYYY-MM') AS month, state, reason, pushes::text, bytes::text,
       exported_to, verified_at, dropped_at, updated_at
     FROM history_months ORDER BY month`,
  );
  const num = (v: string | null) => (v === null ? null : Number(v));
  return rows.map((r) => ({
    month: r.month,
    state: r.state,
    reason: r.reason,
    pushes: num(r.pushes),
    bytes: num(r.bytes),
    exportedTo: r.exported_to,
    verifiedAt: r.verified_at,
    droppedAt: r.dropped_at,
    updatedAt: r.updated_at,
  }));
}

/**
 * Records a month still held: `kept` with why, or `exported` (every hour verified, not yet
 * dropped). A month recorded dropped whose partition came back (bin/backfill read it in
 * again) is recorded as it is now.
 */
export async function recordHeldMonth(
  q: Query,
  month: Month,
  r: {
    state: 'kept' | 'exported';
    reason: string | null;
    pushes: number | null;
    exportedTo: string | null;
    verifiedAt: Date | null;
  },
): Promise<void> {
  await q(
    `INSERT INTO history_months (month, state, reason, pushes, exported_to, verified_at, updated_at)
     VALUES ($1::date, $2, $3, $4, $5, $6, now())
     ON CONFLICT (month) DO UPDATE SET state = excluded.state, reason = excluded.reason,
       pushes = excluded.pushes, exported_to = excluded.exported_to,
       verified_at = excluded.verified_at, bytes = NULL, dropped_at = NULL, updated_at = now()`,
    [month.name + '-01', r.state, r.reason, r.pushes, r.exportedTo, r.verifiedAt],
  );
}

/** What a drop needs to know, and to check under its lock before it drops anything. */
export interface DropPlan {
  month: Month;
  pushes: number;
  exportedTo: string;
  verifiedAt: Date;
  /**
   * Run under the month's lock, before anything is dropped: null when the month is still
   * what was verified, else why not (the drop is then rolled back and the month kept).
   */
  stillVerified: (q: Query) => Promise<string | null>;
  /** Called inside the transaction once everything is written, before COMMIT (a fault point). */
  beforeCommit?: () => void;
}

export type DropOutcome = { dropped: true; bytes: number } | { dropped: false; reason: string };

/** How long the drop waits for a lock before it gives up for this run (the month is kept). */
const LOCK_TIMEOUT = '5s';

/**
 * Drops a verified month in ONE transaction: takes the month's partition against writers
 * (a push stored into it now would be lost), checks it is still what was verified, deletes
 * its rows of push_keys and its tallies, DETACHes and DROPs the partition and records the
 * month `dropped` with the bytes it took. A crash anywhere before COMMIT leaves everything as it was.
 */
export async function dropMonth(db: Db, plan: DropPlan): Promise<DropOutcome> {
  const partition = partitionName(plan.month);
  try {
    return await db.transaction().execute(async (trx) => {
      const q = queryOn(trx);
      await q(`SET LOCAL lock_timeout = '${LOCK_TIMEOUT}'`);
      const found = await q<{ bytes: string }>(
        `SELECT pg_total_relation_size(c.oid)::text AS bytes
         FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = 'push_events'::regclass AND c.relname = $1`,
        [partition],
      );
      if (found.length === 0) return { dropped: false, reason: `no partition ${partition}` };
      // SHARE ROW EXCLUSIVE: readers go on, writers of this month wait (or time out).
      await q(`LOCK TABLE ${partition} IN SHARE ROW EXCLUSIVE MODE`);
      const changed = await plan.stillVerified(q);
      if (changed !== null) return { dropped: false, reason: changed };
      const bytes = Number(
        (
          await q<{ bytes: string }>(`SELECT pg_total_relation_size($1::regclass)::text AS bytes`, [
            partition,
          ])
        )[0]!.bytes,
      );
      // The month's keys, found from its own rows (push_keys' primary key): bounded by the
      // month, never a scan of every key.
      await q(
        `DELETE FROM push_keys k USING ${partition} p
         WHERE (k.repository_id, k.digest, k.created_at)
           = (p.repository_id, ${KEY_DIGEST_FUNCTION}(p.repository_id, p.ref, p.before, p.head), p.created_at)`,
      );
      // Its tallies, folded or not: status counts the pushes held, and these are no more.
      for (const forget of FORGET_MONTH_TALLIES) await q(forget, [`${plan.month.name}-01`]);
      await q(`ALTER TABLE push_events DETACH PARTITION ${partition}`);
      await q(`DROP TABLE ${partition}`);
      await q(
        `INSERT INTO history_months
           (month, state, reason, pushes, bytes, exported_to, verified_at, dropped_at, updated_at)
         VALUES ($1::date, 'dropped', NULL, $2, $3, $4, $5, now(), now())
         ON CONFLICT (month) DO UPDATE SET state = 'dropped', reason = NULL,
           pushes = excluded.pushes, bytes = excluded.bytes, exported_to = excluded.exported_to,
           verified_at = excluded.verified_at, dropped_at = excluded.dropped_at,
           updated_at = excluded.updated_at`,
        [`${plan.month.name}-01`, plan.pushes, bytes, plan.exportedTo, plan.verifiedAt],
      );
      plan.beforeCommit?.();
      return { dropped: true as const, bytes };
    });
  } catch (err) {
    const e = err as { code?: string; message: string };
    // 55P03 lock_not_available, 40P01 deadlock: another writer holds the month; next run.
    if (e.code === '55P03' || e.code === '40P01') {
      return { dropped: false, reason: `busy: ${e.message}` };
    }
    throw err;
  }
}
