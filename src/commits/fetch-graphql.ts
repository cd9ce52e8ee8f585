import { graphqlQueryBoundMs } from '../budget/graphql.ts';
import {
  BudgetExhausted,
  GateTimeout,
  GitHubRequestFailed,
  GitHubUnavailable,
  MalformedResponse,
  RateLimited,
} from '../github/errors.ts';
import { systemClock } from '../platform/clock.ts';
import { faultPoint } from '../platform/fault.ts';
import { redact } from '../platform/redact.ts';
import { type CommitsClaim, claimKey, claimNextPush, releasePush, renewClaims } from './claim.ts';
import { COMPARE_PAGE_MAX, COMPARE_UNPAGED_MAX } from './compare.ts';
import { chargeDeaths, closeQueryAttempts, openQueryAttempts } from './deaths.ts';
import { fetchClaimed } from './fetch-rest.ts';
import { apply, chargeFailure, keyed, narrowed, type Planned, plan } from './graphql/batch-push.ts';
import { DEFAULT_PROOF_LIMITS } from './graphql/proof.ts';
import { MAX_QUERY_FAILURES, proveAll, type RoundPush } from './graphql/rounds.ts';
import {
  batchHistory,
  chooseFirstRound,
  GRAPHQL_MAX_BATCH,
  GRAPHQL_MAX_REQUESTS,
  graphqlPointsLeft,
} from './graphql/sizing.ts';
import {
  emptyFetchOutcomes,
  type FetchDeps,
  type FetchOutcome,
  type FetchResult,
  logResult,
} from './outcomes.ts';
import { markNone } from './state.ts';

/**
 * Commit fetching by GraphQL batches (ADR 0111): claim up to `maxPushes` due pushes (the
 * same fair, leased claim as REST), prove each one's commits in rounds of batched queries
 * on the credential's `#graphql` window (github.graphql()), store what is proven, and
 * give what GraphQL cannot prove to REST compare (fetchClaimed), the push's lease kept.
 * Every outcome goes through the same transitions as REST's (state.ts), so the ladder,
 * the deaths and the idempotent stores are the same.
 *
 * A batch holds its pushes for as long as it works on them: before each query
 * and each REST fallback it renews the leases of every push it still holds, for as long as
 * that step can take (its gate wait, pacing and answer deadline; never less than
 * ENRICH_LEASE_SECONDS), so no other fetcher takes a push it is still working on. A push is
 * in flight only while a query about it is (deaths.ts): a death is charged to the pushes of
 * the query that was out, never to the ones the batch merely held. A batch charges the
 * deaths its claims found before its first query; a suspect (a batch query about it died) is
 * asked alone.
 *
 * A query that gets no usable answer — a 5xx, a timeout, an answer over its cap, not JSON,
 * empty — is halved and asked again until the batch has seen MAX_QUERY_FAILURES of them; then
 * the breaker opens and every push GraphQL has not settled goes to REST compare. One whose
 * query failed and that REST cannot take either (the budget, the share, the gate, REST
 * failing as well: MAX_QUERY_FAILURES of its fallbacks in a row) is charged the failure as
 * its attempt on the ladder (1m, 4m, 16m …); one never asked is given back uncounted.
 *
 * Batches may run side by side (processes, or lanes of one cycle): each claims
 * its pushes one claimNextPush at a time (SKIP LOCKED, a lease unique to the claim), so two
 * batches hold disjoint pushes; each write is under that lease, and commits and authors are
 * stored by idempotent upserts (ON CONFLICT) in key order, so batches that share commits
 * take their row locks in one order and wait for each other rather than deadlock.
 */

/**
 * Pushes one batch claims at most (a step's room). How many it takes within that — what is
 * due, what the points left pay for — and how deep its first round reads are
 * graphql-sizing.ts's.
 */
export const GRAPHQL_BATCH_PUSHES = GRAPHQL_MAX_BATCH;

/**
 * A GraphQL step's room in a cycle of `lanes` under a cap of `cap` pushes (none: the
 * worker's): the cap shared between the lanes, so each has a batch in flight, never one lane
 * holding every ticket while the others wait.
 */
export function graphqlStepMax(cap: number | undefined, lanes: number): number {
  if (cap === undefined) return GRAPHQL_BATCH_PUSHES;
  return Math.max(1, Math.min(GRAPHQL_BATCH_PUSHES, Math.ceil(cap / Math.max(1, lanes))));
}
/** Time a step's lease keeps beyond its worst case: the statements around the request. */
const LEASE_MARGIN_SECONDS = 30;

export interface GraphQLBatchSummary {
  claimed: number;
  outcomes: Record<FetchOutcome, number>;
  /** REST compare requests of the fallbacks. */
  requests: number;
  queries: number;
  points: number;
  fallbacks: number;
  newActors: number;
  stoppedBy: 'idle' | 'rate_limited' | 'budget_exhausted' | null;
  retryAt?: Date;
  /** Whole GraphQL queries that failed (5xx, timeout, over the cap, malformed). */
  queryFailures: number;
}

/** A push for REST compare, and why GraphQL's query about it failed (if one did). */
interface ForRest {
  claim: CommitsClaim;
  failure: string | null;
}

/** A whole query's failure, the ladder's kind: GitHub gave no usable answer. */
function isQueryFailure(err: unknown): boolean {
  return (
    err instanceof GitHubUnavailable ||
    err instanceof MalformedResponse ||
    err instanceof GitHubRequestFailed
  );
}

/** How long a batch must hold its pushes for one step: a query, or one push's REST compare. */
function stepSeconds(deps: FetchDeps, step: 'query' | 'rest'): number {
  const g = deps.config.github;
  if (step === 'query') return Math.ceil(graphqlQueryBoundMs(g, 1) / 1000) + LEASE_MARGIN_SECONDS;
  // One request, or pages of 100 from the oldest past 250 commits; each waits for its gate.
  const cap = deps.config.commits.maxPerPush;
  const requests = cap <= COMPARE_UNPAGED_MAX ? 1 : Math.ceil(cap / COMPARE_PAGE_MAX);
  const one = g.gateWaitSeconds + (g.connectTimeoutMs + g.responseTimeoutMs) / 1000 + 1;
  return Math.ceil(requests * one) + LEASE_MARGIN_SECONDS;
}

export async function fetchGraphQLBatch(
  deps: FetchDeps,
  opts: {
    jobId?: string | null;
    maxPushes?: number;
    /** Each claimed push's result as it is settled (bin/commits prints a line a push). */
    onResult?: (r: FetchResult) => void | Promise<void>;
  } = {},
): Promise<GraphQLBatchSummary> {
  const { db, config, github } = deps;
  const clock = deps.clock ?? systemClock;
  const jobId = opts.jobId ?? null;
  const log = jobId ? deps.logger.child({ job_id: jobId }) : deps.logger;
  const summary: GraphQLBatchSummary = {
    claimed: 0,
    outcomes: emptyFetchOutcomes(),
    requests: 0,
    queries: 0,
    points: 0,
    fallbacks: 0,
    newActors: 0,
    stoppedBy: null,
    queryFailures: 0,
  };
  /** The claims this batch still holds (not yet settled or given back), by claimKey. */
  const held = new Map<string, CommitsClaim>();
  const count = async (r: FetchResult) => {
    if (r.push) held.delete(claimKey(r.push));
    summary.outcomes[r.outcome] += 1;
    summary.requests += r.requests;
    summary.newActors += r.newActors ?? 0;
    if (r.outcome === 'rate_limited' || r.outcome === 'budget_exhausted') {
      summary.stoppedBy = r.outcome;
      summary.retryAt = r.retryAt;
    }
    await opts.onResult?.(r);
  };
  const giveBack = async (claim: CommitsClaim) => {
    held.delete(claimKey(claim));
    await releasePush(db, claim);
  };
  const planned: Planned[] = [];
  const rest: ForRest[] = [];
  /** The claim each pushed asked about is (a new branch's proofs against other tips too). */
  const byKey = new Map<string, CommitsClaim>();
  // The first claim's lease lapses first: every renewal is timed from it.
  let leasedUntil = clock.now().getTime() + config.enrichment.leaseSeconds * 1000;
  const size = batchHistory.batchSize({
    room: opts.maxPushes ?? GRAPHQL_BATCH_PUSHES,
    pointsLeft: graphqlPointsLeft(await github.budget()),
  });
  /**
   * Claims up to `n` more due pushes and plans each: a death a claim found is charged first,
   * a tag or a deletion is settled at once, one only REST's path can take is kept for it, the
   * others are returned to prove. Called for the batch, then before each round while the
   * batch is under its size: pushes due meanwhile join the rounds still running.
   */
  const take = async (n: number): Promise<RoundPush[]> => {
    const claims: CommitsClaim[] = [];
    for (let i = 0; i < n; i++) {
      const c = await claimNextPush(db, {
        now: clock.now(),
        leaseSeconds: config.enrichment.leaseSeconds,
      });
      if (!c) break;
      claims.push(c);
    }
    summary.claimed += claims.length;
    for (const c of claims) held.set(claimKey(c), c);

    // Deaths the claims found (a request in flight when the last fetcher stopped): charged
    // before any request of this batch, each to the pushes that request was about.
    const died = await chargeDeaths(
      db,
      claims.filter((c) => c.diedInFlight),
      { maxAttempts: config.enrichment.maxAttempts },
    );
    const from = planned.length;
    for (const claim of claims) {
      if (claim.diedInFlight) {
        const d = died.get(claimKey(claim));
        if (!d) {
          await count({ ...keyed(claim), outcome: 'retry', requests: 0, detail: 'lease lost' });
          continue;
        }
        if (d.kind === 'set_aside') {
          const r: FetchResult = {
            ...keyed(claim),
            outcome: 'failed',
            requests: 0,
            detail: d.reason,
          };
          logResult(log, r);
          await count(r);
          continue;
        }
        claim.deaths = d.deaths;
        claim.batchDeaths = d.batchDeaths;
      }
      const p = await plan(deps, claim);
      if (p === 'none') {
        await markNone(db, claim);
        await count({ ...keyed(claim), outcome: 'none', requests: 0 });
      } else if (p === 'rest') rest.push({ claim, failure: null });
      else planned.push(p);
    }
    const pushes = planned.slice(from).flatMap((p) => [p.push, ...p.around]);
    for (const p of planned.slice(from)) {
      byKey.set(p.push.key, p.claim);
      for (const a of p.around) byKey.set(a.key, p.claim);
    }
    return pushes;
  };
  const pushes = await take(size);
  if (summary.claimed === 0) {
    summary.stoppedBy = 'idle';
    return summary;
  }

  // Leases: renewed for all the batch still holds whenever the next step could outlast them.
  const keepLeases = async (step: 'query' | 'rest'): Promise<Set<string>> => {
    const need = stepSeconds(deps, step);
    const now = clock.now();
    if (now.getTime() + need * 1000 <= leasedUntil) return new Set();
    const seconds = Math.max(config.enrichment.leaseSeconds, 2 * need);
    const lost = await renewClaims(db, [...held.values()], { now, seconds });
    leasedUntil = now.getTime() + seconds * 1000;
    for (const c of lost) held.delete(claimKey(c));
    return new Set(lost.map(claimKey));
  };

  const proved = await proveAll(
    pushes,
    async (q, keys) => {
      const asked = [...new Set(keys.map((k) => byKey.get(k)!))];
      try {
        const a = await github.graphql({
          purpose: 'commits',
          query: q.query,
          variables: q.variables,
          points: q.points,
          jobId,
          // In flight from the moment it is marked sent: a death now is these pushes'.
          beforeSend: async () => {
            await openQueryAttempts(db, asked, clock.now());
          },
        });
        return { data: a.data as Record<string, unknown> | null, errors: a.errors };
      } finally {
        await closeQueryAttempts(db, asked, clock.now());
      }
    },
    {
      limits: { ...DEFAULT_PROOF_LIMITS, cap: config.commits.maxPerPush },
      maxRequests: GRAPHQL_MAX_REQUESTS,
      firstRound: chooseFirstRound(pushes.length, batchHistory.sizes),
      isQueryFailure,
      // A claim lost its lease: its push (and a new branch's proofs against other tips).
      beforeQuery: async (keys) => {
        const lost = await keepLeases('query');
        return new Set(keys.filter((k) => lost.has(claimKey(byKey.get(k)!))));
      },
      more: () => take(size - summary.claimed),
    },
  );
  faultPoint('commits.after_response');
  summary.queries = proved.queries;
  summary.points = proved.points;
  // What the batch settled teaches the next one its first round.
  batchHistory.record(
    [...proved.verdicts.values()].flatMap((v) => (v.kind === 'proven' ? [v.total] : [])),
  );
  summary.queryFailures = proved.queryFailures;
  if (proved.queryFailures > 0) {
    const last = proved.lastQueryFailure as Error;
    log.warn(
      {
        event: 'commits.graphql_failed',
        queries: proved.queries,
        failures: proved.queryFailures,
        breaker_open: proved.queryFailures >= MAX_QUERY_FAILURES,
        error: redact(last?.message ?? String(last)),
      },
      `GraphQL failed ${proved.queryFailures} of ${proved.queries} queries of a batch${proved.queryFailures >= MAX_QUERY_FAILURES ? ': the rest of the batch goes to REST compare' : ''}`,
    );
  }

  if (planned.length > 0) await keepLeases('rest');
  for (const p of planned) {
    const v = narrowed(p, proved);
    const r = await apply(deps, p, v, proved.evidence.get(p.push.key)?.base ?? null, log);
    if (r === 'rest') {
      summary.fallbacks += 1;
      rest.push({
        claim: p.claim,
        failure: v.kind === 'unanswered' && v.failed ? redact(v.reason) : null,
      });
    } else await count(r);
  }
  const stop = proved.stoppedBy;
  if (stop instanceof RateLimited) {
    summary.stoppedBy = 'rate_limited';
    summary.retryAt = stop.retryAt;
  } else if (stop instanceof BudgetExhausted || stop instanceof GateTimeout) {
    summary.stoppedBy = 'budget_exhausted';
  } else if (stop) {
    // Not a budget event (bad credentials, a bug): the claims go back untouched, and the
    // error stops the cycle loudly.
    for (const { claim } of rest) await giveBack(claim);
    throw stop;
  }

  // REST compare for what GraphQL did not settle. REST failing as well (a few in a row) or
  // refusing (the budget) ends the fallbacks: a push GraphQL failed on is charged that
  // failure (the ladder), one it never failed on goes back uncounted.
  let restFailures = 0;
  const leaseLost = (claim: CommitsClaim) =>
    count({ ...keyed(claim), outcome: 'retry', requests: 0, detail: 'lease lost' });
  for (const { claim, failure } of rest) {
    if (!held.has(claimKey(claim))) {
      await leaseLost(claim);
      continue;
    }
    if (summary.stoppedBy || restFailures >= MAX_QUERY_FAILURES) {
      if (failure) await count(await chargeFailure(deps, claim, failure, log));
      else await giveBack(claim);
      continue;
    }
    const lost = await keepLeases('rest');
    if (lost.has(claimKey(claim))) {
      await leaseLost(claim);
      continue;
    }
    const r = await fetchClaimed(deps, claim, jobId, log, failure ? { charge: failure } : {});
    restFailures = r.transient && !r.reason ? restFailures + 1 : 0;
    await count(r);
    if (r.reason && !summary.stoppedBy) {
      summary.stoppedBy = 'budget_exhausted';
      summary.retryAt = r.retryAt;
    }
  }
  return summary;
}
