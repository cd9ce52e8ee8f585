import { sql } from 'kysely';
import type { GitHubClient } from '../budget/client-types.ts';
import { SPENDS_QUOTA } from '../budget/ledger.ts';
import type { BudgetSnapshot } from '../budget/types.ts';
import { HOUR_MS, windowFloor, windowStartSql } from '../budget/window.ts';
import type { Config } from '../platform/config/config.ts';
import { defaultQuota } from '../platform/config/credential-label.ts';
import type { Db } from '../platform/db/pool.ts';
import { commitsDueStatement, hasDueCommits } from './commits-due.ts';
import { dueStatement, hasDueWork } from './enrichment-due.ts';
import { ENTITY_CLASSES } from './entity.ts';

/**
 * The background allowance between enrichment and commit fetching: shares are floors, not
 * fences (ADR 0181).
 *
 * The GitHub layer enforces the hard rule: enrich and commits TOGETHER spend at most
 * floor(quota × ENRICH_SHARE) of each credential's hour (the background allowance); polls
 * keep the rest, so they are never starved. Above it, each side has a floor of the pool's
 * allowance: commits ceil(background × COMMITS_SHARE), enrichment the rest.
 * - Below its floor a side may always spend.
 * - Past its floor it spends what the other leaves unused: it may go on while the other is
 *   not waiting for REST requests, and is told no while the other is. So under contention
 *   each gets at least its floor, and a side with no REST work lends all of its part.
 * - Enrichment waits while an entity is due (every profile is a REST request). Commits wait
 *   while a push is due and commits go by REST (COMMITS_TRANSPORT=rest, or no credential
 *   GraphQL takes); by GraphQL, whose points are a window of their own, REST pays only for
 *   the pushes GraphQL cannot prove, so commits wait only while such a push was told no
 *   (budget_waits) and has not been served since.
 * What one side borrowed while the other had nothing waiting is not taken back: the other
 * gets its floor from what is left of the window, and all of it in the next.
 *
 * A read, not a lock: runners deciding at the same instant may each take the last slot of a
 * floor, so a part may be off by the number of concurrent runners; the allowance itself is
 * exact (the GitHub layer serializes it).
 */

/** What the rule reads of a process's configuration. */
export interface ShareRule {
  /** ENRICH_SHARE: the background allowance's part of each quota. */
  share: number;
  /** COMMITS_SHARE: commits' floor of the background allowance. */
  commitsShare: number;
  /** ENRICH_TTL (aged-out profiles are due enrichment work too). */
  ttlSeconds: number;
  /** Commits go by REST compare: every due push waits for a REST request. */
  commitsByRest: boolean;
}

/** The rule as this process's configuration and credentials make it. */
export function shareRule(
  config: Pick<Config, 'enrichment' | 'commits'>,
  github: Pick<GitHubClient, 'graphqlEnabled'>,
): ShareRule {
  return {
    share: config.enrichment.share,
    commitsShare: config.commits.share,
    ttlSeconds: config.enrichment.ttlSeconds,
    commitsByRest: config.commits.transport === 'rest' || !github.graphqlEnabled,
  };
}

export interface BackgroundSpend {
  /** The pool's background allowance in the window (sum over credentials). */
  allowance: number;
  enrich: number;
  commits: number;
  /** Enrichment's spend by class. */
  actor: number;
  repository: number;
  /** When commits were last told no a REST request they still wait for (null: they do not). */
  commitsRefusedAt: Date | null;
  /** When that wait began. */
  commitsWaitSince: Date | null;
}

export interface SplitDecision extends BackgroundSpend {
  allowed: boolean;
  /** This side's floor: what it may always take. */
  cap: number;
  /** Whether the other side waits for REST requests, when the answer needed to know. */
  otherWaits?: boolean;
}

/** The floors of `allowance`: commits ceil(allowance × share), enrichment the rest. */
export function splitOf(
  allowance: number,
  commitsShare: number,
): { commits: number; enrich: number } {
  const commits = Math.min(allowance, Math.ceil(allowance * commitsShare));
  return { commits, enrich: allowance - commits };
}

interface SpendRow {
  allowance: number;
  enrich: number;
  commits: number;
  actor: number;
  repository: number;
  commits_refused_at: Date | null;
  commits_wait_since: Date | null;
}

/** A wait older than a window (and a slack) is stale: nothing has asked since. */
const WAIT_MEMORY_MS = HOUR_MS + 60_000;

/**
 * The pool's background allowance, what each side (and each class) spent of it, and a wait
 * of commits still fresh, in one statement, in the budget's own window (windowStartSql: the
 * same expression), counting only requests that spend quota (not a free 304, not a
 * reservation never sent).
 */
export function backgroundStatement(credentials: readonly string[], share: number, now: Date) {
  const rows = credentials.map((c) => sql`(${c}::text, ${defaultQuota(c)}::int)`);
  const fresh = new Date(now.getTime() - WAIT_MEMORY_MS);
  return sql<SpendRow>`
    WITH creds (credential, default_quota) AS (VALUES ${sql.join(rows)}),
    w AS (
      SELECT creds.credential,
        floor(COALESCE(rl.quota, creds.default_quota) * ${share}::float8)::int AS allowance,
        ${windowStartSql(now)} AS since
      FROM creds LEFT JOIN github_rate_limits rl ON rl.credential = creds.credential
    )
    SELECT COALESCE(sum(w.allowance), 0)::int AS allowance,
      COALESCE(sum(x.enrich), 0)::int AS enrich, COALESCE(sum(x.commits), 0)::int AS commits,
      COALESCE(sum(x.actor), 0)::int AS actor, COALESCE(sum(x.repository), 0)::int AS repository,
      (SELECT refused_at FROM budget_waits
       WHERE purpose = 'commits' AND refused_at > ${fresh}::timestamptz) AS commits_refused_at,
      (SELECT since FROM budget_waits
       WHERE purpose = 'commits' AND refused_at > ${fresh}::timestamptz) AS commits_wait_since
    FROM w CROSS JOIN LATERAL (
      SELECT count(*) FILTER (WHERE purpose = 'enrich') AS enrich,
             count(*) FILTER (WHERE purpose = 'commits') AS commits,
             count(*) FILTER (WHERE purpose = 'enrich' AND entity_class = 'actor') AS actor,
             count(*) FILTER (WHERE purpose = 'enrich' AND entity_class = 'repository')
               AS repository
      FROM github_requests
      WHERE credential = w.credential AND reserved_at >= w.since
        AND reserved_at >= ${windowFloor(now)}::timestamptz
        AND purpose IN ('enrich', 'commits') AND ${SPENDS_QUOTA}
    ) x`;
}

function spendOf(row: SpendRow): BackgroundSpend {
  return {
    allowance: row.allowance,
    enrich: row.enrich,
    commits: row.commits,
    actor: row.actor,
    repository: row.repository,
    commitsRefusedAt: row.commits_refused_at,
    commitsWaitSince: row.commits_wait_since,
  };
}

export async function backgroundSpend(
  db: Db,
  github: Pick<GitHubClient, 'credentials'>,
  opts: { now: Date; share: number },
): Promise<BackgroundSpend> {
  const r = await backgroundStatement(github.credentials, opts.share, opts.now).execute(db);
  return spendOf(r.rows[0]!);
}

/** Is an entity of either class due? (Enrichment is all REST: due work is REST work.) */
export async function enrichmentWaits(db: Db, now: Date, ttlSeconds: number): Promise<boolean> {
  for (const cls of ENTITY_CLASSES) if (await hasDueWork(db, cls, now, ttlSeconds)) return true;
  return false;
}

/** Do commits wait for a REST request: a push due, by REST, or one GraphQL gave to REST told no. */
export async function commitsWait(
  db: Db,
  spend: Pick<BackgroundSpend, 'commitsRefusedAt'>,
  rule: Pick<ShareRule, 'commitsByRest'>,
  now: Date,
): Promise<boolean> {
  if (!rule.commitsByRest && spend.commitsRefusedAt === null) return false;
  return hasDueCommits(db, now);
}

export interface SplitOptions extends ShareRule {
  now: Date;
}

/** May commit fetching spend one more REST request now? (Asked before every commits reservation.) */
export async function commitsShare(
  db: Db,
  github: Pick<GitHubClient, 'credentials'>,
  opts: SplitOptions,
): Promise<SplitDecision> {
  const spend = await backgroundSpend(db, github, opts);
  const cap = splitOf(spend.allowance, opts.commitsShare).commits;
  if (spend.commits < cap) return { ...spend, cap, allowed: true };
  const waiting = await enrichmentWaits(db, opts.now, opts.ttlSeconds);
  return { ...spend, cap, allowed: !waiting, otherWaits: waiting };
}

/**
 * May enrichment (either class) spend one more request now? The hook in fair-share.ts. Below
 * its floor the answer is yes without asking whether commits wait (a probe: this is every
 * reservation); fair-share.ts asks it only when a class's half depends on it.
 */
export async function enrichmentShare(
  db: Db,
  github: Pick<GitHubClient, 'credentials'>,
  opts: SplitOptions,
): Promise<SplitDecision> {
  const spend = await backgroundSpend(db, github, opts);
  const cap = splitOf(spend.allowance, opts.commitsShare).enrich;
  if (spend.enrich < cap) return { ...spend, cap, allowed: true };
  const waiting = await commitsWait(db, spend, opts, opts.now);
  return { ...spend, cap, allowed: !waiting, otherWaits: waiting };
}

/**
 * Commits were told no a REST request (the allowance, or their floor): every process reads
 * that they wait, until their next grant (clearCommitsWait). Only the last refusal moves;
 * `since` is the first of this wait.
 */
export async function markCommitsWait(db: Db, now: Date): Promise<void> {
  const stale = new Date(now.getTime() - WAIT_MEMORY_MS);
  await sql`
    INSERT INTO budget_waits AS b (purpose, since, refused_at)
    VALUES ('commits', ${now}::timestamptz, ${now}::timestamptz)
    ON CONFLICT (purpose) DO UPDATE SET
      since = CASE WHEN b.refused_at <= ${stale}::timestamptz THEN EXCLUDED.since ELSE b.since END,
      refused_at = GREATEST(b.refused_at, EXCLUDED.refused_at)`.execute(db);
}

/** Commits were granted a REST request: the wait marked before `refusedAt` (or at it) is over. */
export async function clearCommitsWait(db: Db, refusedAt: Date): Promise<void> {
  // A refusal recorded after the one this grant answered is another wait: it stays.
  await sql`DELETE FROM budget_waits
    WHERE purpose = 'commits' AND refused_at <= ${refusedAt}::timestamptz`.execute(db);
}

/** The background as an operator reads it (bin/status, the page, /status, the CLIs' summaries). */
export interface BackgroundReading {
  /** The pool's background allowance in the window: floor(quota × ENRICH_SHARE) summed. */
  allowance: number;
  /** What each side may always take of it. */
  floors: { enrich: number; commits: number };
  spent: { enrich: number; commits: number };
  /** What each side's floor carried of the other's spend: the other's spend past its own floor. */
  lent: { enrich: number; commits: number };
  /** Whether each side waits for REST requests now (the rule's test of contention). */
  waiting: { enrich: boolean; commits: boolean };
  /** What each side may still spend in this window by the rule (before GitHub's own remaining). */
  room: { enrich: number; commits: number };
  /** Since when commits wait for a REST request GraphQL gave them (null: they do not). */
  commitsWaitingSince: Date | null;
}

/**
 * Whether each side has due work, in one statement (for the status surfaces, which read
 * both at once; a reservation asks only the side it needs, and only when it needs it).
 */
function dueWorkStatement(now: Date, ttlSeconds: number) {
  const [first, second] = ENTITY_CLASSES;
  return sql<{ enrich: boolean; commits: boolean }>`
    SELECT (${dueStatement(first, now, ttlSeconds)}) OR (${dueStatement(second, now, ttlSeconds)})
        AS enrich,
      (${commitsDueStatement(now)}) AS commits`;
}

export async function readBackground(
  db: Db,
  github: Pick<GitHubClient, 'credentials'>,
  rule: ShareRule,
  now: Date,
): Promise<BackgroundReading> {
  // One statement: the spend and both sides' due work.
  const r = await sql<SpendRow & { due_enrich: boolean; due_commits: boolean }>`
    SELECT b.*, d.enrich AS due_enrich, d.commits AS due_commits
    FROM (${backgroundStatement(github.credentials, rule.share, now)}) b
    CROSS JOIN (${dueWorkStatement(now, rule.ttlSeconds)}) d`.execute(db);
  const row = r.rows[0]!;
  const spend = spendOf(row);
  const floors = splitOf(spend.allowance, rule.commitsShare);
  const due = { enrich: row.due_enrich, commits: row.due_commits };
  const commitsWaitFor = rule.commitsByRest || spend.commitsRefusedAt !== null;
  const waiting = { enrich: due.enrich, commits: due.commits && commitsWaitFor };
  const left = Math.max(0, spend.allowance - spend.enrich - spend.commits);
  const roomOf = (side: 'enrich' | 'commits', other: 'enrich' | 'commits') =>
    waiting[other] ? Math.min(left, Math.max(0, floors[side] - spend[side])) : left;
  return {
    allowance: spend.allowance,
    floors,
    spent: { enrich: spend.enrich, commits: spend.commits },
    lent: {
      enrich: Math.max(0, spend.commits - floors.commits),
      commits: Math.max(0, spend.enrich - floors.enrich),
    },
    waiting,
    room: { enrich: roomOf('enrich', 'commits'), commits: roomOf('commits', 'enrich') },
    commitsWaitingSince:
      waiting.commits && !rule.commitsByRest && spend.commitsRefusedAt
        ? spend.commitsWaitSince
        : null,
  };
}

/** A side's room by the rule, never more than GitHub says the pool has left. */
export function withinRemaining(room: number, pool: Pick<BudgetSnapshot, 'remaining'>): number {
  return pool.remaining === null ? room : Math.min(room, Math.max(0, pool.remaining));
}
