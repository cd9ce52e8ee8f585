import { sql } from 'kysely';
import type { Db } from '../db/pool.ts';
import { backoffSeconds } from '../enrichment/state.ts';
import { type CommitsClaim, stillOurs } from './claim.ts';

/**
 * Commit fetches that killed their process (issue 27.1, ADR 0120), as gap fills' (ADR 0061).
 *
 * A fetch opens its attempt before its first request, in one committed statement
 * (openFetchAttempt): commits_attempts + 1, commits_next_attempt_at on the backoff ladder,
 * commits_fetch_started_at set. Every settle of the push (state.ts) closes it. A process that
 * dies mid-request leaves it open and the push not due until the backoff (its lease expiring
 * is not enough): the next claim finds the attempt open and counts a death. The second death
 * sets the push aside: `failed`, with commits_error naming why — never a crash loop.
 *
 * Any fetcher calls it between its claim and its first request, once per push, and skips a
 * push it sets aside; a fetcher that gives a claim back without an answer (the budget said
 * no after all, the gate stayed busy) calls abandonFetchAttempt. See
 * notes in docs/adr/0120-bounded-answers-and-work-that-dies.md.
 */

/** A push whose fetch died this many times mid-request is not fetched again. */
export const MAX_FETCH_DEATHS = 2;

export type OpenedFetch =
  /** The attempt is open and committed: send the request. */
  | { kind: 'opened'; attempts: number; deaths: number; nextAttemptAt: Date }
  /** Set aside (`failed`): its fetches died too often, or its last allowed attempt died. */
  | { kind: 'set_aside'; attempts: number; deaths: number; reason: string }
  /** The lease was no longer ours: another fetcher has the push. */
  | { kind: 'lost' };

interface Row {
  attempts: number;
  deaths: number;
  set_aside: boolean;
  next_at: Date;
  error: string | null;
}

/**
 * Before the first request for a claimed push: count the death an open attempt stands for,
 * then either set the push aside or open this attempt — one statement, committed before any
 * byte is sent.
 */
export async function openFetchAttempt(
  db: Db,
  claim: CommitsClaim,
  o: { now: Date; maxAttempts: number },
): Promise<OpenedFetch> {
  const attempts = claim.attempts + 1;
  const nextAt = new Date(o.now.getTime() + backoffSeconds(attempts) * 1000);
  const r = await sql<Row>`
    WITH cur AS (
      SELECT commits_deaths + (commits_fetch_started_at IS NOT NULL)::int AS deaths,
             commits_fetch_started_at AS died_at, commits_attempts AS attempts
      FROM push_events WHERE ${stillOurs(claim)} FOR UPDATE
    ),
    verdict AS (
      SELECT deaths, died_at, attempts,
             deaths >= ${MAX_FETCH_DEATHS} OR (died_at IS NOT NULL AND attempts >= ${o.maxAttempts})
               AS set_aside
      FROM cur
    )
    UPDATE push_events p SET
      commits_deaths = v.deaths,
      commits_state = CASE WHEN v.set_aside THEN 'failed' ELSE p.commits_state END,
      commits_error = CASE
        WHEN v.deaths >= ${MAX_FETCH_DEATHS} THEN format(
          'the fetch of this push killed its process %s times (killed, or out of memory; last attempt started %s); not retried',
          v.deaths, to_char(v.died_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS "UTC"'))
        WHEN v.set_aside THEN format(
          'the last of %s attempts died before it ended (killed, or out of memory); not retried',
          v.attempts)
        ELSE p.commits_error END,
      commits_attempts = CASE WHEN v.set_aside THEN p.commits_attempts ELSE ${attempts}::int END,
      commits_next_attempt_at = CASE WHEN v.set_aside THEN p.commits_next_attempt_at
        ELSE ${nextAt}::timestamptz END,
      commits_fetch_started_at = CASE WHEN v.set_aside THEN NULL ELSE ${o.now}::timestamptz END,
      commits_claimed_until = CASE WHEN v.set_aside THEN NULL ELSE p.commits_claimed_until END
    FROM verdict v
    WHERE ${stillOursAs(claim)}
    RETURNING p.commits_attempts AS attempts, p.commits_deaths AS deaths, v.set_aside,
      p.commits_next_attempt_at AS next_at, p.commits_error AS error`.execute(db);
  const row = r.rows[0];
  if (!row) return { kind: 'lost' };
  if (row.set_aside) {
    return { kind: 'set_aside', attempts: row.attempts, deaths: row.deaths, reason: row.error! };
  }
  return { kind: 'opened', attempts: row.attempts, deaths: row.deaths, nextAttemptAt: row.next_at };
}

/**
 * An opened attempt given back without an answer that says anything about the push (the
 * budget or the share said no after all, the gate stayed busy, a failure that is not the
 * push's): its count and backoff undone, the push due again, the lease as before the claim.
 */
export async function abandonFetchAttempt(
  db: Db,
  claim: CommitsClaim,
  now: Date,
): Promise<boolean> {
  const r = await sql`
    UPDATE push_events SET
      commits_attempts = ${claim.attempts},
      commits_fetch_started_at = NULL,
      commits_next_attempt_at = LEAST(commits_next_attempt_at, ${now}::timestamptz),
      commits_claimed_until = ${claim.previousLease}::timestamptz
    WHERE ${stillOurs(claim)}`.execute(db);
  return Number(r.numAffectedRows ?? 0) === 1;
}

/** stillOurs on the alias `p` (the UPDATE … FROM above). */
function stillOursAs(claim: CommitsClaim) {
  return sql`p.repository_id = ${claim.repositoryId}::bigint AND p.ref = ${claim.ref}
    AND p.before = ${claim.before} AND p.head = ${claim.head}
    AND p.commits_state IN ('pending', 'unverified')
    AND p.commits_claimed_until = ${claim.lease}::timestamptz`;
}
