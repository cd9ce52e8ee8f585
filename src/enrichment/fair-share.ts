import { sql } from 'kysely';
import { enrichmentShare } from '../commits/share.ts';
import type { Db } from '../db/pool.ts';
import { windowFloor, windowStartSql } from '../github/budget-state.ts';
import { defaultQuota } from '../github/credential.ts';
import { SPENDS_QUOTA } from '../github/ledger.ts';
import type { GitHubClient } from '../github/types.ts';
import { hasDueWork } from './due.ts';
import { type EntityClass, otherClass } from './entity.ts';

/**
 * The split of enrichment's allowance between the two classes (DESIGN §6, ADR 0006).
 *
 * The GitHub layer enforces the hard limit (enrich may spend floor(quota × ENRICH_SHARE)
 * an hour of each credential; the allowance here is the pool's sum). This adds one rule on
 * top: while the OTHER class has due work, a class may not take more than half of that
 * allowance (rounded up) in the window. When the other
 * class has nothing due, the rule steps aside, so the split is work-conserving: a flood
 * of repositories can never starve ten actors, and ten actors never idle a budget that
 * repositories could use.
 *
 * The count is a read, not a lock, so two runners deciding at the same instant can each
 * take the last slot of a half: the split may be off by the number of concurrent
 * runners. The allowance itself is still exact (the GitHub layer serializes it).
 */

export interface ShareDecision {
  allowed: boolean;
  allowance: number;
  /** Requests this class has taken in the window. */
  spent: number;
  /** Half of the allowance (rounded up): the most a class takes while the other waits. */
  half: number;
}

/**
 * The pool's enrich allowance and what `cls` took of it, in one statement: per credential,
 * floor(quota × share) — the quota GitHub last reported, else the default for its kind — and
 * the enrich requests of `cls` that spend quota (sent or still open; not a free 304) in the
 * budget's own window (windowStartSql in src/github/budget-state.ts, the same expression). Reading the rate-limit rows directly rather than a whole
 * budget snapshot saves every credential's window count on every entity.
 */
function classWindowStatement(
  credentials: readonly string[],
  cls: EntityClass,
  share: number,
  now: Date,
) {
  const rows = credentials.map((c) => sql`(${c}::text, ${defaultQuota(c)}::int)`);
  return sql<{ allowance: number; spent: number }>`
    WITH creds (credential, default_quota) AS (VALUES ${sql.join(rows)}),
    w AS (
      SELECT creds.credential,
        floor(COALESCE(rl.quota, creds.default_quota) * ${share}::float8)::int AS allowance,
        ${windowStartSql(now)} AS since
      FROM creds LEFT JOIN github_rate_limits rl ON rl.credential = creds.credential
    )
    SELECT COALESCE(sum(w.allowance), 0)::int AS allowance, COALESCE(sum(x.n), 0)::int AS spent
    FROM w CROSS JOIN LATERAL (
      SELECT count(*) AS n FROM github_requests
      WHERE credential = w.credential AND reserved_at >= w.since
        AND reserved_at >= ${windowFloor(now)}::timestamptz AND purpose = 'enrich'
        AND entity_class = ${cls} AND ${SPENDS_QUOTA}
    ) x`;
}

/**
 * `commitsShare` (COMMITS_SHARE, default 0.5 when absent): the background allowance is also
 * split with commit fetching first (src/commits/share.ts, ADR 0071), the same
 * work-conserving way; within enrichment's part, the classes split it by halves.
 */
export async function fairShare(
  db: Db,
  github: Pick<GitHubClient, 'credentials'>,
  cls: EntityClass,
  opts: { now: Date; ttlSeconds: number; share: number; commitsShare?: number },
): Promise<ShareDecision> {
  const split = await enrichmentShare(db, github, {
    ...opts,
    commitsShare: opts.commitsShare ?? 0.5,
  });
  if (!split.allowed) {
    return { allowed: false, allowance: split.allowance, spent: split.enrich, half: split.cap };
  }
  const r = await classWindowStatement(github.credentials, cls, opts.share, opts.now).execute(db);
  const { allowance, spent } = r.rows[0]!;
  const half = Math.ceil(allowance / 2);
  if (spent < half) return { allowed: true, allowance, spent, half };
  const otherWaiting = await hasDueWork(db, otherClass(cls), opts.now, opts.ttlSeconds);
  return { allowed: !otherWaiting, allowance, spent, half };
}
