import type { AuthBlock } from '../github/errors.ts';
import type { Db } from '../platform/db/pool.ts';

/**
 * The credentials a 401 blocks right now, with since when, until when and what GitHub
 * said (github_rate_limits, written by recordAuthFailure): the truth behind a message
 * that says why no credential is left, and behind /status's auth blocks.
 */
export async function authBlocks(
  db: Db,
  credentials: readonly string[],
  now: Date,
): Promise<AuthBlock[]> {
  if (credentials.length === 0) return [];
  const rows = await db
    .selectFrom('github_rate_limits')
    .select(['credential', 'blocked_until', 'auth_failures', 'auth_failed_since', 'auth_error'])
    .where('credential', 'in', [...credentials])
    .where('block_reason', '=', 'auth')
    .where('blocked_until', '>', now)
    .execute();
  const order = new Map(credentials.map((c, i) => [c, i]));
  return rows
    .map((r) => ({
      credential: r.credential,
      since: r.auth_failed_since ?? r.blocked_until!,
      until: r.blocked_until!,
      failures: r.auth_failures,
      error: r.auth_error,
    }))
    .sort((a, b) => order.get(a.credential)! - order.get(b.credential)!);
}
