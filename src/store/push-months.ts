import { CompiledQuery } from 'kysely';
import type pg from 'pg';
import {
  DEFAULT_PARTITION,
  ENSURE_MONTH_FUNCTION,
} from '../../db/migrations/2026-12-05T1100_push_events_by_month.ts';
import type { Db } from '../platform/db/pool.ts';
import { addMonths, monthOf } from './history-months.ts';

/**
 * push_events' monthly partitions (ADR 0199): a push can only be stored in a month that has
 * one, so every writer makes sure of its batch's months before it inserts, and the
 * maintenance job makes this month's and the next ones ahead of time. Making one is a
 * CREATE TABLE and an ATTACH PARTITION under an advisory lock (SQL
 * push_events_ensure_month, migration 2026-12-05T1100): reads and writes go on meanwhile.
 *
 * One statement a batch, in the writer's transaction, whatever its months: a month that
 * exists costs a catalog lookup. Nothing is remembered in the process, so a month dropped
 * by retention, or a database another process made, is never taken for one that exists.
 */

/** The distinct month starts of `instants`, oldest first (the order partitions are made in). */
function monthsOf(instants: Iterable<Date>): Date[] {
  const starts = new Map<string, Date>();
  for (const at of instants) {
    const m = monthOf(at);
    starts.set(m.name, m.start);
  }
  return [...starts.keys()].sort().map((k) => starts.get(k)!);
}

// In month order: two writers making the same months take the advisory lock in one order.
const ENSURE = `SELECT count(*) FILTER (WHERE ${ENSURE_MONTH_FUNCTION}(m))::int AS made
  FROM unnest($1::timestamptz[]) WITH ORDINALITY AS u(m, n)`;

/** Makes the partitions of the months of `instants` that are missing; how many it made. */
export async function ensurePushMonths(db: Db, instants: Iterable<Date>): Promise<number> {
  const months = monthsOf(instants);
  if (months.length === 0) return 0;
  const r = await db.executeQuery<{ made: number }>(CompiledQuery.raw(ENSURE, [months]));
  return r.rows[0]?.made ?? 0;
}

/** ensurePushMonths on a client (the archive import's connection). */
export async function ensurePushMonthsOn(
  client: pg.ClientBase,
  instants: Iterable<Date>,
): Promise<number> {
  const months = monthsOf(instants);
  if (months.length === 0) return 0;
  const r = await client.query<{ made: number }>(ENSURE, [months]);
  return r.rows[0]?.made ?? 0;
}

/** Months the maintenance job keeps made ahead of this one. */
export const MONTHS_AHEAD = 1;

/** This month and the `ahead` after it: the maintenance job's, so no writer waits on one. */
export function monthsAhead(now: Date, ahead: number): Date[] {
  return Array.from({ length: ahead + 1 }, (_, k) => addMonths(monthOf(now), k).start);
}

/**
 * The months of the pushes the default partition holds (stored while their month had no
 * partition): making each month moves them into it.
 */
export async function monthsInDefault(db: Db): Promise<Date[]> {
  const r = await db.executeQuery<{ m: Date }>(
    CompiledQuery.raw(`SELECT DISTINCT date_trunc('month', created_at AT TIME ZONE 'UTC')
      AT TIME ZONE 'UTC' AS m FROM ${DEFAULT_PARTITION}`),
  );
  return r.rows.map((row) => row.m);
}
