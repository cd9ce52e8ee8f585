import { type CycleStop, oneEntityReport, runFetchCycle } from '../work/cycle.ts';
import { fetchLanes, type LaneDeps } from '../work/lanes.ts';
import { fetchGraphQLBatch, graphqlStepMax } from './fetch-graphql.ts';
import { fetchOnce } from './fetch-rest.ts';
import type { FetchDeps, FetchOutcome, FetchResult } from './outcomes.ts';
import { emptyFetchOutcomes } from './outcomes.ts';

/**
 * One fetch-commits cycle (ADR 0071): the shared fetch loop
 * (src/work/cycle.ts) with commits' two transports as its step — GraphQL batches when
 * COMMITS_TRANSPORT is graphql and the pool has a credential (what GraphQL cannot prove goes
 * to REST inside a batch), else one REST compare a push — until nothing is due, the budget
 * or a rate limit says stop, the cap, or the caller stops it.
 *
 * Lanes: the in-flight plan's GraphQL fetchers for batches, its REST fetchers for compare.
 * Concurrent steps in one process are as safe as two workers: claimNextPush locks its pick
 * FOR UPDATE SKIP LOCKED and writes a lease unique to the claim (claim.ts), so two lanes
 * never hold one push, and a batch's pushes are its own for every write (stillOurs);
 * storing is an idempotent upsert (ON CONFLICT) in key order (store.ts), so two steps
 * writing the same commits or authors take their row locks in one order and wait, not
 * deadlock.
 */

export interface CommitsCycleOptions {
  jobId?: string | null;
  /** Pushes the cycle works on at most (bin/commits --limit; the worker's REST cycles). */
  maxPushes?: number;
  /** Aborted → the cycle stops between steps, never mid-request (a stop, the job's time). */
  signal?: AbortSignal;
  /** Each push's result as it is settled (bin/commits prints a line a push). */
  onResult?: (r: FetchResult) => void | Promise<void>;
}

export interface CommitsCycleSummary {
  processed: number;
  requests: number;
  /** Commit authors new to `actors`: the job hints an enrich-actor cycle for them. */
  newActors: number;
  /** Steps by outcome, every lane's: `idle` and `budget_exhausted` up to one a lane. */
  outcomes: Record<FetchOutcome, number>;
  stoppedBy: CycleStop;
  retryAt?: Date;
  /** GraphQL points and queries the batches spent. */
  points?: number;
  queries?: number;
}

/** Whether a cycle fetches by GraphQL batches: COMMITS_TRANSPORT=graphql and a credential. */
export function commitsByGraphQL(deps: Pick<FetchDeps, 'config' | 'github'>): boolean {
  return deps.config.commits.transport === 'graphql' && deps.github.graphqlEnabled;
}

/** One cycle (the fetch-commits job): fetchOnce until idle, told no, rate-limited, the cap, or stop. */
export async function fetchCycle(
  deps: FetchDeps & LaneDeps,
  opts: CommitsCycleOptions = {},
): Promise<CommitsCycleSummary> {
  const summary: CommitsCycleSummary = {
    processed: 0,
    requests: 0,
    newActors: 0,
    outcomes: emptyFetchOutcomes(),
    stoppedBy: 'idle',
  };
  const graphql = commitsByGraphQL(deps);
  const loop = { cap: opts.maxPushes, signal: opts.signal };
  const graphqlLanes = graphql ? fetchLanes(deps, 'graphql', 'commits') : 1;
  const run = graphql
    ? await runFetchCycle({
        ...loop,
        lanes: graphqlLanes,
        stepMax: graphqlStepMax(opts.maxPushes, graphqlLanes),
        // Batches of pushes by GraphQL; what it cannot prove goes to REST inside.
        step: async (capacity) => {
          const b = await fetchGraphQLBatch(deps, {
            jobId: opts.jobId,
            maxPushes: capacity,
            onResult: opts.onResult,
          });
          for (const [k, n] of Object.entries(b.outcomes)) summary.outcomes[k as FetchOutcome] += n;
          summary.requests += b.requests;
          summary.newActors += b.newActors;
          summary.points = (summary.points ?? 0) + b.points;
          summary.queries = (summary.queries ?? 0) + b.queries;
          return { taken: b.claimed, stop: b.stoppedBy ?? undefined, retryAt: b.retryAt };
        },
      })
    : await runFetchCycle({
        ...loop,
        lanes: fetchLanes(deps, 'rest', 'commits'),
        step: async () => {
          const r = await fetchOnce(deps, { jobId: opts.jobId });
          await opts.onResult?.(r);
          summary.outcomes[r.outcome] += 1;
          summary.requests += r.requests;
          summary.newActors += r.newActors ?? 0;
          return oneEntityReport(r.outcome, r.retryAt);
        },
      });
  summary.processed = run.processed;
  summary.stoppedBy = run.stoppedBy;
  if (run.retryAt) summary.retryAt = run.retryAt;
  return summary;
}
