import type { WorkDeps } from '../work/deps.ts';
import type { PushKey } from './claim.ts';

/**
 * What a commits fetch says it did, shared by the REST fetcher (fetch-rest.ts), the GraphQL
 * batches (fetch-graphql.ts) and the cycle that chooses between them (cycle.ts). A leaf: it
 * imports no fetcher, so the three import it and each other in one direction only
 * (fetch-rest → fetch-graphql → cycle).
 */

export type FetchDeps = WorkDeps;

export type FetchOutcome =
  | 'idle'
  | 'complete'
  | 'partial'
  | 'gone'
  /** A deleted ref or a tag that was pending anyway: no commits, no request. */
  | 'none'
  | 'retry'
  | 'failed'
  /** A new branch whose repository has no default branch yet: its enrichment was made due. */
  | 'waiting'
  | 'rate_limited'
  | 'budget_exhausted';

export interface FetchResult {
  outcome: FetchOutcome;
  push?: PushKey;
  repo?: string | null;
  /** The push's true number of commits (total_commits), when an answer said it. */
  commitCount?: number;
  /** push_commits rows the answer gave (may be fewer than commitCount: partial). */
  stored?: number;
  /** Commit authors and committers new to `actors` (pending enrichment). */
  newActors?: number;
  /** Requests sent for this push (a paged fetch sends several). */
  requests: number;
  status?: number | null;
  /** The ledger row of the last request. */
  requestId?: number | null;
  /**
   * Why budget_exhausted: the budget said no, commits used their share, or the gate stayed
   * busy; on a charged `retry` or `failed` (FetchClaimedOptions.charge), why REST did not ask.
   */
  reason?: 'budget' | 'share' | 'gate_timeout';
  retryAt?: Date;
  detail?: string;
  /** A 5xx, timeout, malformed or refused answer: GitHub did not give a usable one. */
  transient?: boolean;
}

export function emptyFetchOutcomes(): Record<FetchOutcome, number> {
  return {
    idle: 0,
    complete: 0,
    partial: 0,
    gone: 0,
    none: 0,
    retry: 0,
    failed: 0,
    waiting: 0,
    rate_limited: 0,
    budget_exhausted: 0,
  };
}

/** `log` is already bound to the job (job_id), when a job runs this. */
export function logResult(log: FetchDeps['logger'], r: FetchResult): void {
  const fields = {
    repo: r.repo ?? null,
    repository_id: r.push?.repositoryId,
    ref: r.push?.ref,
    before: r.push?.before,
    head: r.push?.head,
    count: r.commitCount ?? null,
    stored: r.stored ?? null,
    state: r.outcome,
    status: r.status ?? null,
    request_id: r.requestId ?? null,
    requests: r.requests,
  };
  const what = `${r.repo ?? r.push?.repositoryId} ${r.push?.ref} ${r.push?.before.slice(0, 7)}...${r.push?.head.slice(0, 7)}`;
  if (r.outcome === 'retry' || r.outcome === 'failed') {
    log.warn(
      {
        event: 'commits.failed',
        ...fields,
        will_retry: r.outcome === 'retry',
        retry_at: r.retryAt,
        detail: r.detail,
      },
      `commits of ${what}: ${r.detail}`,
    );
  } else {
    log.info(
      { event: 'commits.fetched', ...fields, detail: r.detail },
      `commits of ${what}: ${r.outcome}${r.commitCount === undefined ? '' : ` (${r.stored}/${r.commitCount})`}`,
    );
  }
}
