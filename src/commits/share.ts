import { sql } from 'kysely';
import type { Db } from '../db/pool.ts';
import { hasDueWork } from '../enrichment/due.ts';
import { ENTITY_CLASSES } from '../enrichment/entity.ts';
import { windowFloor, windowStartSql } from '../github/budget-state.ts';
import { defaultQuota } from '../github/credential.ts';
import { SPENDS_QUOTA } from '../github/ledger.ts';
import type { GitHubClient } from '../github/types.ts';
import { hasDueCommits } from './due.ts';

/**
 * The soft split of the background allowance between enrichment and commits (ADR 0071).
 *
 * The GitHub layer enforces the hard rule: enrich and commits TOGETHER spend at most
 * floor(quota × ENRICH_SHARE) of each credential's hour (the background allowance; polls
 * keep the rest, so they are never starved). Above it, the way fair-share.ts splits
 * actors and repositories: while enrichment has due work, commits may take at most
 * ceil(background × COMMITS_SHARE) in the window; while commits have due work,
 * enrichment may take at most the rest. When the other side has nothing due, the rule
 * steps aside (work-conserving): a user without commit sources loses nothing.
 *
 * A read, not a lock: runners deciding at the same instant may each take the last slot,
 * so the split may be off by the number of concurrent runners; the allowance itself is
 * exact (the GitHub layer serializes it).
 */

export interface BackgroundSpend {
  /** The pool's background allowance in the window (sum over credentials). */
  allowance: number;
  enrich: number;
  commits: number;
}

export interface SplitDecision extends BackgroundSpend {
  allowed: boolean;
  /** The most this side takes while the other waits. */
  cap: number;
}

/** The parts of `allowance`: commits ceil(allowance × share), enrichment the rest. */
export function splitOf(
  allowance: number,
  commitsShare: number,
): { commits: number; enrich: number } {
  const commits = Math.min(allowance, Math.ceil(allowance * commitsShare));
  return { commits, enrich: allowance - commits };
}

/**
 * The pool's background allowance and what each side spent of it, in one statement, in the
 * budget's own window (windowStartSql: the same expression), counting only requests that
 * spend quota (not a free 304, not a reservation never sent).
 */
function backgroundStatement(credentials: readonly string[], share: number, now: Date) {
  const rows = credentials.map((c) => sql`(${c}::text, ${defaultQuota(c)}::int)`);
  return sql<{ allowance: number; enrich: number; commits: number }>`
    WITH creds (credential, default_quota) AS (VALUES ${sql.join(rows)}),
    w AS (
      SELECT creds.credential,
        floor(COALESCE(rl.quota, creds.default_quota) * ${share}::float8)::int AS allowance,
        ${windowStartSql(now)} AS since
      FROM creds LEFT JOIN github_rate_limits rl ON rl.credential = creds.credential
    )
    SELECT COALESCE(sum(w.allowance), 0)::int AS allowance,
      COALESCE(sum(x.enrich), 0)::int AS enrich, COALESCE(sum(x.commits), 0)::int AS commits
    FROM w CROSS JOIN LATERAL (
      SELECT count(*) FILTER (WHERE purpose = 'enrich') AS enrich,
             count(*) FILTER (WHERE purpose = 'commits') AS commits
      FROM github_requests
      WHERE credential = w.credential AND reserved_at >= w.since
        AND reserved_at >= ${windowFloor(now)}::timestamptz
        AND purpose IN ('enrich', 'commits') AND ${SPENDS_QUOTA}
    ) x`;
}

export async function backgroundSpend(
  db: Db,
  github: Pick<GitHubClient, 'credentials'>,
  opts: { now: Date; share: number },
): Promise<BackgroundSpend> {
  const r = await backgroundStatement(github.credentials, opts.share, opts.now).execute(db);
  return r.rows[0]!;
}

async function enrichmentDue(db: Db, now: Date, ttlSeconds: number): Promise<boolean> {
  for (const cls of ENTITY_CLASSES) if (await hasDueWork(db, cls, now, ttlSeconds)) return true;
  return false;
}

export interface SplitOptions {
  now: Date;
  /** ENRICH_SHARE: the background allowance's part of each quota. */
  share: number;
  /** COMMITS_SHARE. */
  commitsShare: number;
  /** ENRICH_TTL (aged-out profiles are due enrichment work too). */
  ttlSeconds: number;
}

/** May commit fetching spend one more request now? (Asked before every commits reservation.) */
export async function commitsShare(
  db: Db,
  github: Pick<GitHubClient, 'credentials'>,
  opts: SplitOptions,
): Promise<SplitDecision> {
  const spend = await backgroundSpend(db, github, opts);
  const cap = splitOf(spend.allowance, opts.commitsShare).commits;
  if (spend.commits < cap) return { ...spend, cap, allowed: true };
  const waiting = await enrichmentDue(db, opts.now, opts.ttlSeconds);
  return { ...spend, cap, allowed: !waiting };
}

/** May enrichment (either class) spend one more request now? The hook in fair-share.ts. */
export async function enrichmentShare(
  db: Db,
  github: Pick<GitHubClient, 'credentials'>,
  opts: SplitOptions,
): Promise<SplitDecision> {
  const spend = await backgroundSpend(db, github, opts);
  const cap = splitOf(spend.allowance, opts.commitsShare).enrich;
  if (spend.enrich < cap) return { ...spend, cap, allowed: true };
  const waiting = await hasDueCommits(db, opts.now);
  return { ...spend, cap, allowed: !waiting };
}
