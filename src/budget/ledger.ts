import { type RawBuilder, sql } from 'kysely';
import type { RateLimitState } from '../github/answer-headers.ts';
import type { RequestPurpose } from '../platform/db/columns.ts';
import type { Db } from '../platform/db/pool.ts';
import { rateLimitUpsert, siblingAuthCleared } from './rate-limits.ts';
import type { EntityClass } from './types.ts';

/**
 * The request ledger (github_requests): one row per request, written BEFORE it is sent
 * ('reserved' → 'sent' → 'completed' | 'error'; or 'abandoned' when never used or when
 * its process died). Every process reads the same rows, so the budget is shared.
 */

/** Placeholder path of a reservation made before its caller knew the path. */
export const UNSPECIFIED_PATH = '(unspecified)';

/** Rows that spend quota: not a known 304, and not given back before being sent. */
export const SPENDS_QUOTA = sql<boolean>`(counted IS NOT FALSE AND NOT (outcome = 'abandoned' AND sent_at IS NULL))`;

export interface ReservationRow {
  credential: string;
  purpose: RequestPurpose;
  path?: string;
  method?: string;
  jobId?: string | null;
  runId?: number | null;
  entity?: { class: EntityClass; id: string | number };
  /** A GraphQL query's estimated points; none for a REST request (NULL: 1). */
  points?: number;
  now: Date;
}

export interface Settlement {
  outcome: 'completed' | 'error';
  /** HTTP status, or null when no answer arrived (timeout, reset). */
  status: number | null;
  /** False when the request never left this machine (DNS, connect refused, TLS): not counted. */
  reached?: boolean;
  durationMs: number;
  rateLimit: RateLimitState | null;
  error?: string;
  /** A GraphQL answer's points (its rateLimit.cost, else the estimate); REST: not written. */
  points?: number;
  now: Date;
}

function settlement(db: Db, id: number, s: Settlement) {
  return db
    .updateTable('github_requests')
    .set({
      outcome: s.outcome,
      status: s.status,
      // A 304 is free; anything else that got an answer was counted; a request that never
      // reached GitHub was not; with no answer we cannot know, so NULL (and the budget
      // assumes it was spent).
      counted: s.reached === false ? false : s.status === null ? null : s.status !== 304,
      finished_at: s.now,
      duration_ms: s.durationMs,
      rate_limit_limit: s.rateLimit?.limit ?? null,
      rate_limit_remaining: s.rateLimit?.remaining ?? null,
      rate_limit_reset: s.rateLimit?.resetAt ?? null,
      error: s.error ?? null,
      ...(s.points === undefined ? {} : { points: s.points }),
    })
    .where('id', '=', String(id));
}

/**
 * Record the answer on the ledger row and, when the answer carried x-ratelimit-*
 * headers, store them for `credential` in the SAME statement (a data-modifying CTE):
 * one round trip, and atomic even outside a transaction, on every request's path.
 */
export async function settle(
  db: Db,
  id: number,
  s: Settlement,
  credential: string | null = null,
  /** The answer shows the credential is accepted (anything but a 401): clear the auth ladder. */
  accepted = false,
): Promise<void> {
  if (s.rateLimit && credential !== null) {
    const settled = db.with('settled', () => settlement(db, id, s).returning('id'));
    await rateLimitUpsert(
      accepted
        ? settled.with('sibling', () => siblingAuthCleared(db, credential).returning('credential'))
        : settled,
      credential,
      s.rateLimit,
      s.now,
      accepted,
    ).execute();
  } else {
    await settlement(db, id, s).execute();
  }
}

/**
 * settle() in the statement that releases the request gate (`unlock`, the gate's
 * expression): the answer and the rate-limit row are written, then the lock released — one
 * round trip. The gate runs it on its own session (src/budget/gate.ts).
 */
export function settleAndUnlock(
  db: Db,
  id: number,
  s: Settlement,
  credential: string,
  accepted: boolean,
  unlock: RawBuilder<unknown>,
): RawBuilder<unknown> {
  const settled = settlement(db, id, s).returning('id');
  if (!s.rateLimit) {
    return sql`WITH settled AS (${settled})
      SELECT ${unlock} AS unlocked FROM (SELECT count(*) FROM settled) AS done`;
  }
  const rl = rateLimitUpsert(db, credential, s.rateLimit, s.now, accepted).returning('credential');
  // An accepted answer clears the credential's other key's auth ladder too.
  const sibling = accepted
    ? sql`, sibling AS (${siblingAuthCleared(db, credential).returning('credential')})`
    : sql``;
  const siblings = accepted ? sql` + (SELECT count(*) FROM sibling)` : sql``;
  return sql`WITH settled AS (${settled}), rl AS (${rl})${sibling}
    SELECT ${unlock} AS unlocked
    FROM (SELECT (SELECT count(*) FROM settled) + (SELECT count(*) FROM rl)${siblings}) AS done`;
}

/**
 * A request marked sent that never left (no token to send it with): back to what
 * releaseReservation leaves — abandoned, never sent, spending nothing — as the gate unlocks.
 */
export function unsendAndUnlock(
  id: number,
  reason: string,
  now: Date,
  unlock: RawBuilder<unknown>,
): RawBuilder<unknown> {
  return sql`WITH unsent AS (
      UPDATE github_requests SET outcome = 'abandoned', sent_at = NULL,
        finished_at = ${now}::timestamptz, error = ${reason}
      WHERE id = ${String(id)} AND outcome = 'sent' RETURNING id
    )
    SELECT ${unlock} AS unlocked FROM (SELECT count(*) FROM unsent) AS done`;
}

/**
 * Bookkeeping writes of the ledger commit asynchronously: other sessions see
 * them at once; a crash of the Postgres server itself may lose the last ~200 ms of them,
 * which the next response's x-ratelimit-remaining corrects. Evaluate inside a transaction.
 */
export const ASYNC_COMMIT = sql`set_config('synchronous_commit', 'off', true)`;

/** Give back a reservation that was never sent. Returns false when it was not open. */
export async function releaseReservation(
  db: Db,
  id: number,
  reason: string,
  now: Date,
): Promise<boolean> {
  return db.transaction().execute(async (trx) => {
    await sql`SELECT ${ASYNC_COMMIT}`.execute(trx);
    const res = await trx
      .updateTable('github_requests')
      .set({ outcome: 'abandoned', finished_at: now, error: reason })
      .where('id', '=', String(id))
      .where('outcome', '=', 'reserved')
      .executeTakeFirst();
    return Number(res.numUpdatedRows) === 1;
  });
}

/**
 * Rows left 'reserved' or 'sent' for longer than any live request can take belong to a
 * process that died. Marks them 'abandoned' so the ledger shows what happened; one that
 * was already sent still counts against the budget (GitHub may have served it).
 * Called by the reconciler and the maintenance job. Returns how many were settled.
 */
export async function settleAbandonedReservations(
  db: Db,
  olderThanSeconds: number,
): Promise<number> {
  const res = await sql`
    UPDATE github_requests
    SET outcome = 'abandoned',
        finished_at = COALESCE(finished_at, now()),
        error = COALESCE(error, 'abandoned: no answer recorded (the process ended?)')
    WHERE outcome IN ('reserved', 'sent')
      AND reserved_at < now() - make_interval(secs => ${olderThanSeconds})`.execute(db);
  return Number(res.numAffectedRows ?? 0);
}
