import { sql } from 'kysely';
import type { Db } from '../db/pool.ts';
import { SPENDS_QUOTA } from '../github/ledger.ts';
import type { BudgetSnapshot, GitHubClient } from '../github/types.ts';
import { hasDueWork } from './due.ts';
import { type EntityClass, otherClass } from './entity.ts';

/**
 * The split of enrichment's allowance between the two classes (DESIGN §6, ADR 0006).
 *
 * The GitHub layer enforces the hard limit (enrich may spend floor(quota × ENRICH_SHARE)
 * an hour of each credential; the allowance here is the pool's sum). This adds one rule on top: while the OTHER class has due work, a class may
 * not take more than half of that allowance (rounded up) in the window. When the other
 * class has nothing due, the rule steps aside, so the split is work-conserving: a flood
 * of repositories can never starve ten actors, and ten actors never idle a budget that
 * repositories could use.
 *
 * The count is a read, not a lock, so two runners deciding at the same instant can each
 * take the last slot of a half: the split may be off by the number of concurrent
 * runners. The allowance itself is still exact (the GitHub layer serializes it).
 */

const HOUR_MS = 3600_000;

export interface ShareDecision {
  allowed: boolean;
  allowance: number;
  /** Requests this class has taken in the window. */
  spent: number;
  /** Half of the allowance (rounded up): the most a class takes while the other waits. */
  half: number;
}

/**
 * The budget's own window (src/github/budget.ts): GitHub's current rate-limit hour when
 * known (it ends at resetAt), else the last 60 minutes. Counting over the same window
 * with the same "spends quota" rule keeps the halves in step with the allowance.
 */
export function windowStart(b: BudgetSnapshot, now: Date): Date {
  if (b.resetAt && b.resetAt.getTime() > now.getTime())
    return new Date(b.resetAt.getTime() - HOUR_MS);
  return new Date(now.getTime() - HOUR_MS);
}

/**
 * Enrich requests of `cls` that spend quota (sent or still open; not a free 304), summed
 * over the pool, each credential counted over its own window.
 */
export async function classSpent(
  db: Db,
  windows: readonly { credential: string; since: Date }[],
  cls: EntityClass,
): Promise<number> {
  const r = await sql<{ n: number }>`
    SELECT COALESCE(sum(x.n), 0)::int AS n
    FROM unnest(${windows.map((w) => w.credential)}::text[],
                ${windows.map((w) => w.since)}::timestamptz[]) AS w (credential, since)
    CROSS JOIN LATERAL (
      SELECT count(*) AS n FROM github_requests
      WHERE credential = w.credential AND reserved_at >= w.since AND purpose = 'enrich'
        AND entity_class = ${cls} AND ${SPENDS_QUOTA}
    ) x`.execute(db);
  return r.rows[0]!.n;
}

export async function fairShare(
  db: Db,
  github: GitHubClient,
  cls: EntityClass,
  opts: { now: Date; ttlSeconds: number },
): Promise<ShareDecision> {
  const budget = await github.budget();
  const allowance = budget.allowance.enrich;
  const half = Math.ceil(allowance / 2);
  const windows = budget.credentials.map((b) => ({
    credential: b.credential,
    since: windowStart(b, opts.now),
  }));
  const spent = await classSpent(db, windows, cls);
  if (spent < half) return { allowed: true, allowance, spent, half };
  const otherWaiting = await hasDueWork(db, otherClass(cls), opts.now, opts.ttlSeconds);
  return { allowed: !otherWaiting, allowance, spent, half };
}
