import { type FetchDeps, type FetchOutcome, fetchOnce } from './fetch.ts';
import { fetchGraphQLBatch, GRAPHQL_BATCH_PUSHES } from './graphql-fetch.ts';

/**
 * One fetch-commits cycle (ADR 0071, ADR 0111): GraphQL batches when COMMITS_TRANSPORT is
 * graphql and the pool has a credential (what GraphQL cannot prove goes to REST inside a
 * batch), else one REST compare a push — until nothing is due, the budget or a rate limit
 * says stop, the cap, or the caller stops it.
 */

export interface CommitsCycleOptions {
  jobId?: string | null;
  maxPushes?: number;
  shouldStop?: () => boolean;
  signal?: AbortSignal;
}

export interface CommitsCycleSummary {
  processed: number;
  requests: number;
  /** Commit authors new to `actors`: the job hints an enrich-actor cycle for them. */
  newActors: number;
  outcomes: Record<FetchOutcome, number>;
  stoppedBy: 'idle' | 'budget_exhausted' | 'rate_limited' | 'cap' | 'stopped';
  retryAt?: Date;
  /** GraphQL points and queries the batches spent (ADR 0111). */
  points?: number;
  queries?: number;
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

/** One cycle (the fetch-commits job): fetchOnce until idle, told no, rate-limited, the cap, or stop. */
export async function fetchCycle(
  deps: FetchDeps,
  opts: CommitsCycleOptions = {},
): Promise<CommitsCycleSummary> {
  const summary: CommitsCycleSummary = {
    processed: 0,
    requests: 0,
    newActors: 0,
    outcomes: emptyFetchOutcomes(),
    stoppedBy: 'idle',
  };
  const cap = opts.maxPushes ?? Number.POSITIVE_INFINITY;
  for (;;) {
    if (summary.processed >= cap) {
      summary.stoppedBy = 'cap';
      break;
    }
    if (opts.shouldStop?.() || opts.signal?.aborted) {
      summary.stoppedBy = 'stopped';
      break;
    }
    if (deps.config.commits.transport === 'graphql' && deps.github.graphqlEnabled) {
      // Batches of pushes by GraphQL (ADR 0111); what it cannot prove goes to REST inside.
      const room = Math.min(GRAPHQL_BATCH_PUSHES, cap - summary.processed);
      const b = await fetchGraphQLBatch(deps, { jobId: opts.jobId, maxPushes: room });
      for (const [k, n] of Object.entries(b.outcomes)) summary.outcomes[k as FetchOutcome] += n;
      summary.requests += b.requests;
      summary.newActors += b.newActors;
      summary.points = (summary.points ?? 0) + b.points;
      summary.queries = (summary.queries ?? 0) + b.queries;
      summary.processed += b.claimed;
      if (b.stoppedBy) {
        summary.stoppedBy = b.stoppedBy;
        summary.retryAt = b.retryAt;
        break;
      }
      continue;
    }
    const r = await fetchOnce(deps, { jobId: opts.jobId, signal: opts.signal });
    summary.outcomes[r.outcome] += 1;
    summary.requests += r.requests;
    summary.newActors += r.newActors ?? 0;
    if (r.outcome === 'idle' || r.outcome === 'budget_exhausted') {
      summary.stoppedBy = r.outcome;
      summary.retryAt = r.retryAt;
      break;
    }
    summary.processed += 1;
    if (r.outcome === 'rate_limited') {
      summary.stoppedBy = 'rate_limited';
      summary.retryAt = r.retryAt;
      break;
    }
  }
  return summary;
}
