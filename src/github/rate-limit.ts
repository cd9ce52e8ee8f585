import { type QueryCreator, sql } from 'kysely';
import type { Db } from '../db/pool.ts';
import type { Database } from '../db/schema.ts';
import type { RateLimitState } from './types.ts';

/** Response headers, lower-cased names (fetch and fixture files both give these). */
export type Headers = Record<string, string | undefined>;

/** x-ratelimit-* as GitHub sends them on every response; null when any is missing. */
export function parseRateLimit(headers: Headers): RateLimitState | null {
  const limit = Number(headers['x-ratelimit-limit']);
  const remaining = Number(headers['x-ratelimit-remaining']);
  const reset = Number(headers['x-ratelimit-reset']);
  if (
    headers['x-ratelimit-limit'] === undefined ||
    headers['x-ratelimit-remaining'] === undefined ||
    headers['x-ratelimit-reset'] === undefined ||
    !Number.isFinite(limit) ||
    !Number.isFinite(remaining) ||
    !Number.isFinite(reset)
  ) {
    return null;
  }
  return { limit, remaining, resetAt: new Date(reset * 1000) };
}

/** GitHub's documented minimum wait after a secondary limit that names no time. */
const MIN_BACKOFF_MS = 60_000;

/**
 * Is this answer a rate-limit event, and if so, when may we try again? (DESIGN §5:
 * honour retry-after; with remaining 0 wait for the reset; otherwise at least a minute.)
 *
 * A 403 that has neither retry-after nor remaining 0 nor a rate-limit message is NOT
 * one: GitHub also answers 403 for e.g. a repository blocked for legal reasons, and
 * treating that as a budget event would retry it forever.
 */
export function rateLimitRetryAt(
  status: number,
  headers: Headers,
  message: string,
  now: Date,
): Date | null {
  if (status !== 403 && status !== 429) return null;
  const retryAfter = Number(headers['retry-after']);
  const rl = parseRateLimit(headers);
  const limitedByMessage = /rate limit|abuse/i.test(message);
  if (status === 403 && !headers['retry-after'] && rl?.remaining !== 0 && !limitedByMessage) {
    return null;
  }
  if (headers['retry-after'] !== undefined && Number.isFinite(retryAfter) && retryAfter >= 0) {
    return new Date(now.getTime() + retryAfter * 1000);
  }
  if (rl && rl.remaining === 0 && rl.resetAt.getTime() > now.getTime()) return rl.resetAt;
  return new Date(now.getTime() + MIN_BACKOFF_MS);
}

export interface StoredRateLimit {
  quota: number;
  remaining: number;
  resetAt: Date;
  blockedUntil: Date | null;
  observedAt: Date;
}

export async function readRateLimit(db: Db, credential: string): Promise<StoredRateLimit | null> {
  const row = await db
    .selectFrom('github_rate_limits')
    .selectAll()
    .where('credential', '=', credential)
    .executeTakeFirst();
  if (!row) return null;
  return {
    quota: row.quota,
    remaining: row.remaining,
    resetAt: row.reset_at,
    blockedUntil: row.blocked_until,
    observedAt: row.observed_at,
  };
}

/**
 * The upsert that records what the latest response said, as a builder so that settling
 * the ledger row can send it in the same statement. Keeps blocked_until: only time or a
 * new block lifts it.
 */
export function rateLimitUpsert(
  qc: Pick<QueryCreator<Database>, 'insertInto'>,
  credential: string,
  state: RateLimitState,
  observedAt: Date,
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
      }),
    );
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
    })
    .onConflict((oc) =>
      oc.column('credential').doUpdateSet({
        blocked_until: sql<Date>`GREATEST(github_rate_limits.blocked_until, ${until})`,
      }),
    )
    .execute();
}
