import { type QueryCreator, sql } from 'kysely';
import type { RateLimitState } from '../github/answer-headers.ts';
import { ladderIntervalSql, ladderSeconds } from '../platform/attempts.ts';
import type { BlockReason } from '../platform/db/columns.ts';
import type { Db } from '../platform/db/pool.ts';
import type { Database } from '../platform/db/schema.ts';
import { graphqlKey, isGraphQLKey, labelOf } from './graphql-key.ts';

/**
 * github_rate_limits: what each credential's (and `#graphql` key's) latest answer said of its
 * window, and its blocks: a rate limit until its time, or a 401 on the auth ladder.
 */

/**
 * An answer that is not a 401 proves the credential is accepted: the auth ladder starts
 * over, and a block that a 401 set is lifted (a rate-limit block stays until its time).
 */
const AUTH_CLEARED = {
  auth_failures: 0,
  auth_failed_since: null,
  auth_error: null,
  blocked_until: sql<Date | null>`CASE WHEN github_rate_limits.block_reason = 'auth' THEN NULL
    ELSE github_rate_limits.blocked_until END`,
  block_reason: sql<BlockReason | null>`CASE WHEN github_rate_limits.block_reason = 'auth' THEN NULL
    ELSE github_rate_limits.block_reason END`,
};

/**
 * The upsert that records what the latest response said, as a builder so that settling
 * the ledger row can send it in the same statement. Keeps a rate-limit block: only time
 * or a new block lifts it. `accepted` (any answer but a 401) also clears the auth ladder.
 */
export function rateLimitUpsert(
  qc: Pick<QueryCreator<Database>, 'insertInto'>,
  credential: string,
  state: RateLimitState,
  observedAt: Date,
  accepted = false,
) {
  return qc
    .insertInto('github_rate_limits')
    .values({
      credential,
      quota: state.limit,
      remaining: state.remaining,
      reset_at: state.resetAt,
      observed_at: observedAt,
    })
    .onConflict((oc) =>
      oc.column('credential').doUpdateSet({
        quota: state.limit,
        remaining: state.remaining,
        reset_at: state.resetAt,
        observed_at: observedAt,
        ...(accepted ? AUTH_CLEARED : {}),
      }),
    );
}

/**
 * The other budget key of the same credential (REST's label ↔ `label#graphql`): a
 * 401 on either blocks both, so an answer that accepts the credential on either clears both.
 */
export function siblingKey(key: string): string {
  return isGraphQLKey(key) ? labelOf(key) : graphqlKey(key);
}

/**
 * Clears the auth ladder of the credential's other key — a statement that writes nothing
 * unless that row is on the ladder (an index probe on every accepted answer).
 */
export function siblingAuthCleared(
  qc: Pick<QueryCreator<Database>, 'updateTable'>,
  credential: string,
) {
  return qc
    .updateTable('github_rate_limits')
    .set(AUTH_CLEARED)
    .where('credential', '=', siblingKey(credential))
    .where((eb) => eb.or([eb('auth_failures', '>', 0), eb('block_reason', '=', 'auth')]));
}

/** The auth ladder's clearing, for an accepted answer that carried no x-ratelimit-* headers. */
export async function clearAuthFailures(db: Db, credential: string): Promise<void> {
  await db
    .updateTable('github_rate_limits')
    .set(AUTH_CLEARED)
    .where('credential', 'in', [credential, siblingKey(credential)])
    .where((eb) => eb.or([eb('auth_failures', '>', 0), eb('block_reason', '=', 'auth')]))
    .execute();
}

/** A 403/429 told us to wait: nobody on this credential asks again before `until`. */
export async function recordBlock(
  db: Db,
  credential: string,
  until: Date,
  fallbackQuota: number,
): Promise<void> {
  await db
    .insertInto('github_rate_limits')
    .values({
      credential,
      quota: fallbackQuota,
      remaining: 0,
      reset_at: until,
      blocked_until: until,
      block_reason: 'rate_limit',
    })
    .onConflict((oc) =>
      oc.column('credential').doUpdateSet({
        blocked_until: sql<Date>`GREATEST(github_rate_limits.blocked_until, ${until})`,
        block_reason: sql<BlockReason>`CASE
          WHEN github_rate_limits.blocked_until > ${until} THEN github_rate_limits.block_reason
          ELSE 'rate_limit' END`,
      }),
    )
    .execute();
}

/** The most of GitHub's words kept with an auth block (its messages are a sentence). */
const AUTH_ERROR_MAX = 200;

/**
 * A 401: one more step up the auth ladder (src/platform/attempts.ts), and the credential blocked for that long for
 * every process. `reason` (what GitHub said) and the start of this run of 401s are kept
 * beside the block, for /status and for the message when the whole pool is rejected.
 * Returns when it may be tried again, how many 401s in a row it got, and since when.
 */
export async function recordAuthFailure(
  db: Db,
  credential: string,
  now: Date,
  fallbackQuota: number,
  reason = 'GitHub answered 401',
): Promise<{ until: Date; failures: number; since: Date }> {
  // GitHub's words are outside text: no control character reaches a status line, and bounded.
  const error = Array.from(reason.replace(/\p{Cc}+/gu, ' '))
    .slice(0, AUTH_ERROR_MAX)
    .join('');
  const row = await db
    .insertInto('github_rate_limits')
    .values({
      credential,
      quota: fallbackQuota,
      remaining: fallbackQuota,
      reset_at: now,
      blocked_until: new Date(now.getTime() + ladderSeconds('auth', 1) * 1000),
      block_reason: 'auth',
      auth_failures: 1,
      auth_failed_since: now,
      auth_error: error,
    })
    .onConflict((oc) =>
      oc.column('credential').doUpdateSet({
        auth_failures: sql<number>`github_rate_limits.auth_failures + 1`,
        blocked_until: sql<Date>`GREATEST(github_rate_limits.blocked_until,
          ${now}::timestamptz + ${ladderIntervalSql('auth', sql`github_rate_limits.auth_failures + 1`)})`,
        block_reason: 'auth',
        auth_failed_since: sql<Date>`CASE WHEN github_rate_limits.auth_failures > 0
          THEN COALESCE(github_rate_limits.auth_failed_since, ${now}::timestamptz)
          ELSE ${now}::timestamptz END`,
        auth_error: error,
      }),
    )
    .returning(['blocked_until', 'auth_failures', 'auth_failed_since'])
    .executeTakeFirstOrThrow();
  return {
    until: row.blocked_until!,
    failures: row.auth_failures,
    since: row.auth_failed_since ?? now,
  };
}
