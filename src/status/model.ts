import { systemClock } from '../clock.ts';
import type { Deps } from '../deps.ts';
import { type Backlog, backlog } from '../enrichment/due.ts';
import type { BudgetSnapshot } from '../github/types.ts';
import { type IngestActivity, ingestActivity } from './activity.ts';
import { type CommitsStatus, commitsStatus } from './commits.ts';
import { type GapStatus, gapStatus } from './gaps.ts';
import {
  type LastReconcile,
  lastReconcile,
  pgBossInstalled,
  type QueueStatus,
  queueStatuses,
} from './queues.ts';
import { type SourceStatus, sourceStatuses } from './sources.ts';

/**
 * The one status model behind GET /status (JSON), GET / (HTML) and bin/status (terminal).
 * Everything is read from Postgres at the moment of asking, so any process shows the same
 * picture of the whole deployment, not of itself.
 */
export interface StatusReport {
  generatedAt: Date;
  sources: SourceStatus[];
  activity: IngestActivity;
  /** Recorded gaps by state, pushes recovered from the archive, the last backfill. */
  gaps: GapStatus;
  enrichment: Backlog;
  /** Pushes by commits_state, the fetch backlog and rate, commits stored (ADR 0070). */
  commits: CommitsStatus;
  /** The pool's total (one credential: that credential); null with budgetError when unreadable. */
  budget: BudgetSnapshot | null;
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
  spent: BudgetSnapshot['spent'];
  allowance: BudgetSnapshot['allowance'];
}

function credentialStatus(b: BudgetSnapshot): CredentialStatus {
  return {
    label: b.credential,
    quota: b.quota,
    remaining: b.remaining,
    resetAt: b.resetAt,
    blocked: b.blockedUntil !== null,
    blockedUntil: b.blockedUntil,
    blockReason: b.blockReason,
    spent: b.spent,
    allowance: b.allowance,
  };
}

export type StatusDeps = Pick<Deps, 'db' | 'config' | 'clock'> & {
  github: Pick<Deps['github'], 'budget'>;
};

export async function readStatus(deps: StatusDeps): Promise<StatusReport> {
  const { db, config } = deps;
  const now = (deps.clock ?? systemClock).now();
  const report: StatusReport = {
    generatedAt: now,
    sources: await sourceStatuses(db, now),
    activity: await ingestActivity(db, now),
    gaps: await gapStatus(db),
    enrichment: await backlog(db, now, config.enrichment.ttlSeconds),
    commits: await commitsStatus(db, now),
    budget: null,
    credentials: [],
    queues: null,
    lastReconcile: null,
    webhooksEnabled: config.webhookSecret !== undefined,
  };
  try {
    const { credentials, ...total } = await deps.github.budget();
    report.budget = total;
    report.credentials = credentials.map(credentialStatus);
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
