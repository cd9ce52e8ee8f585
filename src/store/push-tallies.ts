import { sql } from 'kysely';
import type { CommitsState, PushOrigin } from '../platform/db/columns.ts';
import type { Db } from '../platform/db/pool.ts';

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
 * Folds every committed delta into the tallies, in one statement: a reader in another
 * transaction sees the deltas or the tallies they became, never both and never neither. A
 * second fold at once skips the deltas the first deleted (it waits for them, then finds them
 * gone), so folds need no lock. Returns the deltas folded.
 */
export async function foldPushTallies(db: Db): Promise<number> {
  const r = await sql<{ deltas: string }>`
    WITH folded AS (
      DELETE FROM push_tally_deltas RETURNING month, origin, commits_state, pushes
    ), summed AS (
      SELECT month, origin, commits_state, sum(pushes)::bigint AS pushes, count(*) AS deltas
      FROM folded GROUP BY 1, 2, 3
    ), updated AS (
      UPDATE push_tallies t SET pushes = t.pushes + s.pushes FROM summed s
      WHERE (t.month, t.origin, t.commits_state) = (s.month, s.origin, s.commits_state)
      RETURNING t.month, t.origin, t.commits_state
    ), inserted AS (
      -- Only keys without a tally row: an INSERT checks its row (pushes >= 0) before ON
      -- CONFLICT turns it into an update, so a net decrease (a push gone from a state) must
      -- be the UPDATE above. A key first tallied here sums to what it holds, never below 0.
      INSERT INTO push_tallies AS t (month, origin, commits_state, pushes)
      SELECT s.month, s.origin, s.commits_state, s.pushes FROM summed s
      WHERE NOT EXISTS (SELECT 1 FROM updated u
        WHERE (u.month, u.origin, u.commits_state) = (s.month, s.origin, s.commits_state))
      ON CONFLICT (month, origin, commits_state) DO UPDATE SET pushes = t.pushes + excluded.pushes
    )
    SELECT coalesce(sum(deltas), 0) AS deltas FROM summed`.execute(db);
  return Number(r.rows[0]?.deltas ?? 0);
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
] as const;
