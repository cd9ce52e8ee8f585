import { sql } from 'kysely';
import type { CommitsState, PushOrigin } from '../platform/db/columns.ts';
import type { Db } from '../platform/db/pool.ts';
import { foldTallies } from './tally-fold.ts';

/**
 * The pushes stored, by month, origin and commits_state, without counting push_events (ADR
 * 0203, migration 2026-12-05T1300): `push_tallies` holds what was folded, and
 * `push_tally_deltas` what each statement on push_events changed since, appended by its
 * triggers in the writer's transaction. A reader sums both in one statement, so it is exact
 * at every commit; what it reads is bounded by months × origins × states plus the deltas
 * of the writes since the last fold, never by the pushes held. The maintenance job folds.
 */

/** The pushes held by origin and commits_state: the tallies plus the deltas not yet folded. */
export function pushTallyCounts() {
  return sql<{ origin: PushOrigin; commits_state: CommitsState; n: string }>`
    SELECT origin, commits_state, sum(pushes) AS n
    FROM (SELECT origin, commits_state, pushes FROM push_tallies
          UNION ALL
          SELECT origin, commits_state, pushes FROM push_tally_deltas) t
    GROUP BY origin, commits_state`;
}

export interface PushTally {
  origin: PushOrigin;
  commitsState: CommitsState;
  pushes: number;
}

export async function readPushTallies(db: Db): Promise<PushTally[]> {
  return (await pushTallyCounts().execute(db)).rows.map((r) => ({
    origin: r.origin,
    commitsState: r.commits_state,
    pushes: Number(r.n),
  }));
}

/**
 * The pushes of `clock`'s minutes from `since`'s (UTC) on, by origin: push_minute_tallies
 * (migration 2026-12-05T1440), appended by push_events' triggers, a row a minute, clock and
 * origin of each statement. Its index reads only the window's rows.
 */
export function pushMinuteCounts(clock: 'arrived' | 'pushed', since: Date) {
  return sql<{ origin: PushOrigin; n: string }>`
    SELECT origin, sum(pushes) AS n FROM push_minute_tallies
    WHERE clock = ${clock} AND minute >= date_trunc('minute', ${since}::timestamptz, 'UTC')
    GROUP BY origin HAVING sum(pushes) <> 0`;
}

/** Minutes kept: status reads the last 24 hours; a day more for a clock set back. */
export const MINUTES_KEPT_MS = 2 * 86_400_000;

/**
 * Deletes the minute tallies older than MINUTES_KEPT_MS before `now`, and compacts the rest
 * to one row a minute, clock and origin (every statement on push_events appends its own: a
 * day of webhook deliveries is a row each until then). One statement: a reader sees the
 * rows before or after it, never both. Rows appended meanwhile are left for the next run.
 * Returns the rows deleted as old.
 */
export async function prunePushMinutes(db: Db, now: Date): Promise<number> {
  const r = await sql<{ old: string }>`
    WITH gone AS (
      DELETE FROM push_minute_tallies RETURNING minute, clock, origin, pushes
    ), kept AS (
      INSERT INTO push_minute_tallies (minute, clock, origin, pushes)
      SELECT minute, clock, origin, sum(pushes) FROM gone
      WHERE minute >= ${new Date(now.getTime() - MINUTES_KEPT_MS)}
      GROUP BY 1, 2, 3 HAVING sum(pushes) <> 0
    )
    SELECT count(*) FILTER (WHERE minute < ${new Date(now.getTime() - MINUTES_KEPT_MS)}) AS old
    FROM gone`.execute(db);
  return Number(r.rows[0]?.old ?? 0);
}

/** Folds every committed delta into the tallies (src/store/tally-fold.ts). */
export function foldPushTallies(db: Db): Promise<number> {
  return foldTallies(db, {
    tallies: 'push_tallies',
    deltas: 'push_tally_deltas',
    keys: ['month', 'origin', 'commits_state'],
    value: 'pushes',
  });
}

/**
 * The statements that forget a dropped month's tallies (retention's drop, in its
 * transaction, under the month's lock: no writer of the month can add a delta meanwhile).
 * Deltas first: a fold that has taken the month's deltas (and not committed) holds them, so
 * the drop waits for it and then, in its next statement, sees and deletes the tally the fold
 * wrote. Tallies first would miss a tally row the fold was still inserting.
 */
export const FORGET_MONTH_TALLIES = [
  'DELETE FROM push_tally_deltas WHERE month = $1::date',
  'DELETE FROM push_tallies WHERE month = $1::date',
  // Its pushes' minutes: by event time, the month's; by arrival, those of its pushes that
  // arrived in the minutes still kept (a backfilled old month dropped within the day), taken
  // back by negative rows. Read before the DETACH, through the month's BRIN on ingested_at.
  `DELETE FROM push_minute_tallies WHERE clock = 'pushed'
     AND minute >= $1::date::timestamp AT TIME ZONE 'UTC'
     AND minute < ($1::date + interval '1 month')::timestamp AT TIME ZONE 'UTC'`,
  `INSERT INTO push_minute_tallies (minute, clock, origin, pushes)
   SELECT date_trunc('minute', ingested_at, 'UTC'), 'arrived', origin, -count(*)
   FROM push_events
   WHERE created_at >= $1::date::timestamp AT TIME ZONE 'UTC'
     AND created_at < ($1::date + interval '1 month')::timestamp AT TIME ZONE 'UTC'
     AND ingested_at >= (SELECT min(minute) FROM push_minute_tallies WHERE clock = 'arrived')
   GROUP BY 1, 3`,
] as const;
