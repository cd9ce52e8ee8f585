import { authBlocks } from '../budget/auth-blocks.ts';
import type { BudgetSnapshot, GraphQLBudget } from '../budget/types.ts';
import type { AuthBlock } from '../github/errors.ts';
import { systemClock } from '../platform/clock.ts';
import { pgBossInstalled } from '../platform/db/setup-state.ts';
import type { Deps } from '../work/deps.ts';
import { type Backlog, backlog } from '../work/enrichment-due.ts';
import type { BackgroundReading } from '../work/split.ts';
import { type IngestActivity, ingestActivity } from './activity.ts';
import { type CommitsStatus, commitsStatus } from './commits.ts';
import { deploymentBackground, deploymentBudget, deploymentPolicy } from './credentials.ts';
import { type GapStatus, gapStatus } from './gaps.ts';
import { type HistoryStatus, historyStatus } from './history.ts';
import { type MirrorStatus, mirrorStatuses } from './mirrors.ts';
import { type LastReconcile, lastReconcile, type QueueStatus, queueStatuses } from './queues.ts';
import {
  DEFAULT_SOURCE_QUERY,
  type SourcePage,
  type SourceQuery,
  type SourceStatus,
  type SourceSummary,
  sourcePage,
  sourceSummary,
} from './sources.ts';

/**
 * The one status model behind GET /status (JSON), GET / (HTML) and bin/status (terminal).
 * Everything is read from Postgres at the moment of asking, so any process shows the same
 * picture of the whole deployment, not of itself.
 */
export interface StatusReport {
  generatedAt: Date;
  /** Counts by state and kind, the worst and the latest sources: readable at 10,000. */
  sourceSummary: SourceSummary;
  /** Which page of sources `sources` is (SourceQuery: ?sources=N&page=P&state=S&kind=K). */
  sourcePage: SourcePage;
  /** One page of sources (50 by default, in id order), each in full. */
  sources: SourceStatus[];
  activity: IngestActivity;
  /** Recorded gaps by state, pushes recovered from the archive, the last backfill. */
  gaps: GapStatus;
  /** The archive mirrors configured here or read by any process, and what each added. */
  mirrors: MirrorStatus[];
  /** Months of pushes held, exported and dropped (HISTORY_MONTHS), with their bytes. */
  history: HistoryStatus;
  enrichment: Backlog;
  /** Pushes by commits_state, the fetch backlog and rate, commits stored. */
  commits: CommitsStatus;
  /** The pool's total (one credential: that credential); null with budgetError when unreadable. */
  budget: BudgetSnapshot | null;
  /**
   * The background allowance between enrichment and commits: each side's floor,
   * what it spent and lent, whether it waits for REST, its room; null with budgetError.
   */
  background: BackgroundReading | null;
  budgetError?: string;
  /** Each credential of the pool: labels and numbers, never a secret (empty with budgetError). */
  credentials: CredentialStatus[];
  /** null with queuesError when pg-boss is not installed (bin/setup has not run). */
  queues: QueueStatus[] | null;
  queuesError?: string;
  lastReconcile: LastReconcile | null;
  webhooksEnabled: boolean;
}

export interface CredentialStatus {
  /** `token:<sha256 prefix>`, `installation:<id>`, `anonymous` or `fixture`. */
  label: string;
  /** Hourly quota (GitHub's x-ratelimit-limit once seen). */
  quota: number;
  /** What is left of it in the current window; null until GitHub first answers. */
  remaining: number | null;
  resetAt: Date | null;
  /** True while a 403/429 or a 401 blocks it (the rest of the pool carries on). */
  blocked: boolean;
  blockedUntil: Date | null;
  blockReason: BudgetSnapshot['blockReason'];
  /** For a 401 block: since when GitHub keeps rejecting it and what it said; else null. */
  authBlock: { since: Date; failures: number; error: string | null } | null;
  spent: BudgetSnapshot['spent'];
  allowance: BudgetSnapshot['allowance'];
  /**
   * Its GraphQL points window (the `#graphql` budget key): quota, remaining,
   * resetAt, blocked ({ until, reason } or null), points spent by commits; null without one.
   */
  graphql: GraphQLBudget | null;
}

function credentialStatus(b: BudgetSnapshot, auth: AuthBlock | undefined): CredentialStatus {
  return {
    label: b.credential,
    quota: b.quota,
    remaining: b.remaining,
    resetAt: b.resetAt,
    blocked: b.blockedUntil !== null,
    blockedUntil: b.blockedUntil,
    blockReason: b.blockReason,
    authBlock:
      auth && b.blockReason === 'auth'
        ? { since: auth.since, failures: auth.failures, error: auth.error }
        : null,
    spent: b.spent,
    allowance: b.allowance,
    graphql: b.graphql ?? null,
  };
}

/**
 * What the report reads. No GitHub client: the budget is the deployment's, read from the
 * database (src/status/credentials.ts), whichever credentials the asking process holds.
 */
export type StatusDeps = Pick<Deps, 'db' | 'config' | 'clock'>;

/** A source is overdue once its next poll is two ticks past (it should have been claimed). */
export function overdueAfterSeconds(config: Pick<StatusDeps['config'], 'tickSeconds'>): number {
  return Math.max(120, 2 * config.tickSeconds);
}

export async function readStatus(
  deps: StatusDeps,
  query: SourceQuery = DEFAULT_SOURCE_QUERY,
): Promise<StatusReport> {
  const { db, config } = deps;
  const now = (deps.clock ?? systemClock).now();
  const overdue = overdueAfterSeconds(config);
  const page = await sourcePage(db, now, query, overdue);
  const report: StatusReport = {
    generatedAt: now,
    sourceSummary: await sourceSummary(db, now, overdue),
    sourcePage: page.page,
    sources: page.sources,
    activity: await ingestActivity(db, now),
    gaps: await gapStatus(db),
    mirrors: await mirrorStatuses(db, config.archive.mirrors),
    history: await historyStatus(db, config, now),
    enrichment: await backlog(db, now, config.enrichment.ttlSeconds),
    commits: await commitsStatus(db, now),
    budget: null,
    background: null,
    credentials: [],
    queues: null,
    lastReconcile: null,
    webhooksEnabled: config.webhookSecret !== undefined,
  };
  try {
    const policy = await deploymentPolicy(db, config, now);
    const { credentials, ...total } = await deploymentBudget(db, config, now, policy);
    report.budget = total;
    const labels = credentials.map((c) => c.credential);
    report.background = await deploymentBackground(db, config, policy, now);
    const auth = new Map((await authBlocks(db, labels, now)).map((a) => [a.credential, a]));
    report.credentials = credentials.map((c) => credentialStatus(c, auth.get(c.credential)));
  } catch (err) {
    report.budgetError = (err as Error).message;
  }
  if (await pgBossInstalled(db, config.pgbossSchema)) {
    report.queues = await queueStatuses(db, config.pgbossSchema, now);
    report.lastReconcile = await lastReconcile(db, config.pgbossSchema);
  } else {
    report.queuesError = `pg-boss schema "${config.pgbossSchema}" is not installed (run bin/setup)`;
  }
  return report;
}
