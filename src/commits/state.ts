import { sql } from 'kysely';
import type { Db } from '../platform/db/pool.ts';
import { failLeasedAttempt, LEASED_ROWS, settleLeased } from '../work/leased-rows.ts';
import { type CommitsClaim, stillOurs } from './claim.ts';

/**
 * A pending push's fetch ladder (ADR 0071), the entity ladder's twin. Every
 * transition that ends an attempt clears the lease, and applies only while the lease is
 * still ours: a fetcher whose lease expired mid-request must not overwrite the next owner.
 *
 * (`unverified` — a mirror's commits stored, not yet proven — follows the same ladder as
 * `pending`, and stays `unverified` until an answer ends it.)
 *
 *   pending ──200, all commits──► complete        pending ──404/410/451──► gone (terminal)
 *   pending ──200, over the cap──► partial        pending ──403/429──► pending (no penalty)
 *   pending ──5xx/timeout/malformed/422──► pending (attempts+1, backoff) … ► failed
 *   pending ──new branch, default branch unknown──► pending (waits for the repository)
 *   pending ──the fetch died twice mid-request──► failed (deaths.ts)
 */

/** Every settle also closes the attempt openFetchAttempt opened (deaths.ts). */
function transition(db: Db, claim: CommitsClaim, set: ReturnType<typeof sql>) {
  return settleLeased(db, LEASED_ROWS.commits, stillOurs(claim), set);
}

/**
 * Stored: complete (every commit of the range) or partial (the true count, fewer rows). A
 * distinct_size the source gave that exceeds the proven count was never true (a mirror's
 * 1e9): it becomes unknown.
 */
export function markFetched(
  db: Db,
  claim: CommitsClaim,
  result: { state: 'complete' | 'partial'; commitCount: number | null },
): Promise<boolean> {
  return transition(
    db,
    claim,
    sql`commits_state = ${result.state}, commit_count = ${result.commitCount},
        commits_attempts = ${claim.attempts + 1}, commits_error = NULL,
        distinct_size = CASE WHEN distinct_size > ${result.commitCount}::int THEN NULL
          ELSE distinct_size END`,
  );
}

/** A deleted ref or a tag: no commits, no request (store time sets it; this is the fetcher's guard). */
export function markNone(db: Db, claim: CommitsClaim): Promise<boolean> {
  return transition(db, claim, sql`commits_state = 'none', commit_count = 0, commits_error = NULL`);
}

/** GitHub no longer has the range (404): terminal, never retried. */
export function markGone(db: Db, claim: CommitsClaim, detail: string): Promise<boolean> {
  return transition(
    db,
    claim,
    sql`commits_state = 'gone', commits_attempts = ${claim.attempts + 1}, commits_error = ${detail}`,
  );
}

/**
 * A transient failure: one more attempt spent; below the limit the push waits on the
 * backoff ladder, at the limit it is `failed` (terminal: a broken range costs at most
 * maxAttempts requests, never a loop).
 */
export function markFailedAttempt(
  db: Db,
  claim: CommitsClaim,
  detail: string,
  now: Date,
  maxAttempts: number,
): Promise<{ applied: boolean; terminal: boolean; nextAttemptAt: Date }> {
  // An unverified push stays so on the ladder: its mirror's commits are still unproven.
  return failLeasedAttempt(db, LEASED_ROWS.commits, stillOurs(claim), {
    attempts: claim.attempts,
    detail,
    now,
    maxAttempts,
  });
}

/**
 * Not the push's fault (403/429, or its repository is not profiled yet): no attempt counted —
 * one opened before the request (deaths.ts) is taken back.
 */
export function deferPush(
  db: Db,
  claim: CommitsClaim,
  until: Date,
  detail: string | null = null,
): Promise<boolean> {
  return transition(
    db,
    claim,
    sql`commits_next_attempt_at = ${until}, commits_attempts = ${claim.attempts},
        commits_error = ${detail ?? sql`commits_error`}`,
  );
}

/**
 * A new branch is compared against the repository's default branch, which only its
 * profile knows: make the repository's enrichment due now (a pending one moves up; a
 * profiled one without a default branch is fetched again). Returns false when there is
 * no row to bump.
 */
export function bumpRepository(db: Db, repositoryId: string, now: Date): Promise<boolean> {
  return makeRepositoryDue(db, repositoryId, now, { onlyWithoutDefaultBranch: true });
}

/**
 * The default branch answered 404 (renamed?): the repository's profile is fetched again
 * now, whatever it held, so the push's one retry compares against the name GitHub has.
 */
export function refreshRepository(db: Db, repositoryId: string, now: Date): Promise<boolean> {
  return makeRepositoryDue(db, repositoryId, now, { onlyWithoutDefaultBranch: false });
}

/** The repository's enrichment due now (a pending one moves up); false when no row moved. */
async function makeRepositoryDue(
  db: Db,
  repositoryId: string,
  now: Date,
  opts: { onlyWithoutDefaultBranch: boolean },
): Promise<boolean> {
  const r = await sql`
    UPDATE repositories SET
      enrichment_state = 'pending',
      next_attempt_at = LEAST(next_attempt_at, ${now}::timestamptz),
      updated_at = ${now}
    WHERE id = ${repositoryId}::bigint AND enrichment_state IN ('pending', 'enriched')
      ${opts.onlyWithoutDefaultBranch ? sql`AND default_branch IS NULL` : sql``}`.execute(db);
  return Number(r.numAffectedRows ?? 0) === 1;
}
