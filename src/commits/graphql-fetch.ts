import { systemClock } from '../clock.ts';
import { redact } from '../enrichment/attempts.ts';
import { faultPoint } from '../fault.ts';
import {
  BudgetExhausted,
  GateTimeout,
  GitHubRequestFailed,
  GitHubUnavailable,
  MalformedResponse,
  RateLimited,
} from '../github/errors.ts';
import { graphqlQueryBoundMs } from '../github/graphql.ts';
import { type CommitsClaim, claimKey, claimNextPush, releasePush, renewClaims } from './claim.ts';
import { COMPARE_PAGE_MAX, COMPARE_UNPAGED_MAX, ZERO_SHA } from './compare.ts';
import { emptyFetchOutcomes } from './cycle.ts';
import { chargeDeaths, closeQueryAttempts, openQueryAttempts } from './deaths.ts';
import { defaultTipAtPush } from './default-tip.ts';
import { type FetchDeps, type FetchOutcome, type FetchResult, fetchClaimed } from './fetch.ts';
import { logResult } from './fetch-log.ts';
import { DEFAULT_PROOF_LIMITS } from './graphql-proof.ts';
import { type Final, MAX_QUERY_FAILURES, proveAll, type RoundPush } from './graphql-rounds.ts';
import { markGoneByGraphQL } from './graphql-settled.ts';
import { markFailedAttempt, markNone } from './state.ts';
import { storeFetched } from './store-fetched.ts';

/**
 * Commit fetching by GraphQL batches (ADR 0111): claim up to `maxPushes` due pushes (the
 * same fair, leased claim as REST), prove each one's commits in rounds of batched queries
 * on the credential's `#graphql` window (github.graphql()), store what is proven, and
 * give what GraphQL cannot prove to REST compare (fetchClaimed), the push's lease kept.
 * Every outcome goes through the same transitions as REST's (state.ts), so the ladder,
 * the deaths (ADR 0120) and the idempotent stores are the same.
 *
 * A batch holds its pushes for as long as it works on them (ADR 0182): before each query
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
 * Batches may run side by side (processes, or lanes of one cycle: ADR 0170): each claims
 * its pushes one claimNextPush at a time (SKIP LOCKED, a lease unique to the claim), so two
 * batches hold disjoint pushes; each write is under that lease, and commits and authors are
 * stored by idempotent upserts (ON CONFLICT) in key order, so batches that share commits
 * take their row locks in one order and wait for each other rather than deadlock.
 */

/** Pushes claimed for one batch: enough that the rounds pack into 1-point queries. */
export const GRAPHQL_BATCH_PUSHES = 150;
/** 149 requests round to 1 point (GitHub divides by 100 and rounds). */
export const GRAPHQL_MAX_REQUESTS = 149;
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

interface Planned {
  claim: CommitsClaim;
  push: RoundPush;
  /** The default branch's tip at push time is only the tip now (unproven). */
  tipNowOnly: boolean;
  /** A tip from our records that is proven if it is still the tip now. */
  candidate: string | null;
}

/** A push for REST compare, and why GraphQL's query about it failed (if one did). */
interface ForRest {
  claim: CommitsClaim;
  failure: string | null;
}

/** A claim as a result names its push: the push's key and its repository's name. */
function keyed(claim: CommitsClaim) {
  const { repositoryId, ref, before, head } = claim;
  return { push: { repositoryId, ref, before, head }, repo: claim.fullName };
}

async function plan(deps: FetchDeps, claim: CommitsClaim): Promise<Planned | 'rest' | 'none'> {
  if (ZERO_SHA.test(claim.head) || claim.ref.startsWith('refs/tags/')) return 'none';
  if (!claim.fullName) return 'rest';
  const base = {
    key: claimKey(claim),
    fullName: claim.fullName,
    repositoryId: claim.repositoryId,
    head: claim.head,
    // A batch query about it died before: asked alone, so a second death is its own.
    alone: claim.deaths + claim.batchDeaths > 0,
  };
  if (!ZERO_SHA.test(claim.before)) {
    const push: RoundPush = { ...base, base: claim.before, baseFrom: 'before' };
    return { claim, push, tipNowOnly: false, candidate: null };
  }
  // A new ref: REST's path knows how to wait for a profile, and what a gone one means.
  if (!claim.defaultBranch) return 'rest';
  if (claim.ref === `refs/heads/${claim.defaultBranch}`) {
    const push: RoundPush = { ...base, base: null, baseFrom: 'first-push' };
    return { claim, push, tipNowOnly: false, candidate: null };
  }
  const tip = await defaultTipAtPush(deps.db, claim, claim.defaultBranch);
  if (tip?.proven) {
    const push: RoundPush = { ...base, base: tip.sha, baseFrom: 'default-tip' };
    return { claim, push, tipNowOnly: false, candidate: null };
  }
  const push: RoundPush = { ...base, base: null, baseFrom: 'default-now' };
  return { claim, push, tipNowOnly: true, candidate: tip?.sha ?? null };
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
  const claims: CommitsClaim[] = [];
  // The first claim's lease lapses first: every renewal is timed from it.
  let leasedUntil = clock.now().getTime() + config.enrichment.leaseSeconds * 1000;
  for (let i = 0; i < (opts.maxPushes ?? GRAPHQL_BATCH_PUSHES); i++) {
    const c = await claimNextPush(db, {
      now: clock.now(),
      leaseSeconds: config.enrichment.leaseSeconds,
    });
    if (!c) break;
    claims.push(c);
  }
  summary.claimed = claims.length;
  if (claims.length === 0) {
    summary.stoppedBy = 'idle';
    return summary;
  }
  for (const c of claims) held.set(claimKey(c), c);

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

  // Deaths the claims found (a request in flight when the last fetcher stopped): charged
  // before any request of this batch, each to the pushes that request was about.
  const died = await chargeDeaths(
    db,
    claims.filter((c) => c.diedInFlight),
    { maxAttempts: config.enrichment.maxAttempts },
  );
  const planned: Planned[] = [];
  const rest: ForRest[] = [];
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

  const byKey = new Map(planned.map((p) => [p.push.key, p.claim]));
  const proved = await proveAll(
    planned.map((p) => p.push),
    async (q, keys) => {
      const asked = keys.map((k) => byKey.get(k)!);
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
      isQueryFailure,
      beforeQuery: () => keepLeases('query'),
    },
  );
  faultPoint('commits.after_response');
  summary.queries = proved.queries;
  summary.points = proved.points;
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
    const v = proved.verdicts.get(p.push.key)!;
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

/** GraphQL failed on the push and REST could not be asked: that failure is its attempt. */
async function chargeFailure(
  deps: FetchDeps,
  claim: CommitsClaim,
  failure: string,
  log: FetchDeps['logger'],
): Promise<FetchResult> {
  const now = (deps.clock ?? systemClock).now();
  const r = await markFailedAttempt(
    deps.db,
    claim,
    failure,
    now,
    deps.config.enrichment.maxAttempts,
  );
  const result: FetchResult = {
    ...keyed(claim),
    outcome: r.terminal && r.applied ? 'failed' : 'retry',
    requests: 0,
    detail: r.applied ? failure : 'lease lost before the failure was recorded',
    retryAt: r.terminal ? undefined : r.nextAttemptAt,
    transient: true,
  };
  logResult(log, result);
  return result;
}

async function apply(
  deps: FetchDeps,
  p: Planned,
  v: Final,
  base: string | null,
  log: FetchDeps['logger'],
): Promise<FetchResult | 'rest'> {
  const { db, config } = deps;
  const now = (deps.clock ?? systemClock).now();
  const { claim } = p;
  const common = { ...keyed(claim), requests: 0 };
  if (v.kind === 'fallback' || v.kind === 'unanswered') return 'rest';
  if (v.kind === 'lost') return { ...common, outcome: 'retry', detail: 'lease lost' };
  if (v.kind === 'unfinished') {
    // Not the push's fault (a rate limit, the budget): no attempt counted, the claim given back.
    await releasePush(db, claim);
    return { ...common, outcome: 'budget_exhausted', reason: 'budget' };
  }
  if (v.kind === 'gone') {
    const ok = await markGoneByGraphQL(db, claim, v.reason, now);
    return { ...common, outcome: ok ? 'gone' : 'retry', detail: v.reason };
  }
  if (v.kind === 'invalid') {
    const detail = redact(`GraphQL answer refused: ${v.reason}`);
    const r = await markFailedAttempt(db, claim, detail, now, config.enrichment.maxAttempts);
    log.warn(
      {
        event: 'commits.failed',
        repo: claim.fullName,
        head: claim.head,
        detail,
        will_retry: !r.terminal,
      },
      `commits of ${claim.fullName} ${claim.ref}: ${detail}`,
    );
    return { ...common, outcome: r.terminal && r.applied ? 'failed' : 'retry', detail };
  }
  // Proven. Against the default branch's tip NOW (not proven to be its tip at push time),
  // what the proof gives is only what the branch has beyond main today: `partial`, count
  // unknown — and never `complete` with 0 commits (a branch merged before the fetch).
  const countUnknown = p.tipNowOnly && !(p.candidate !== null && p.candidate === base);
  const stored = await storeFetched(
    db,
    claim,
    { totalCommits: v.total, commits: v.commits },
    {
      firstPosition: v.firstPosition,
      emails: config.commits.emails,
      now,
      countUnknown,
      byGraphQL: true,
    },
  );
  faultPoint('commits.after_store');
  if (!stored.applied)
    return { ...common, outcome: 'retry', detail: 'lease lost before the answer was applied' };
  log.info(
    {
      event: 'commits.fetched',
      repo: claim.fullName,
      repository_id: claim.repositoryId,
      ref: claim.ref,
      before: claim.before,
      head: claim.head,
      count: countUnknown ? null : v.total,
      stored: v.commits.length,
      state: stored.state,
      transport: 'graphql',
      proof: v.how,
    },
    `commits of ${claim.fullName} ${claim.ref}: ${stored.state} (${v.commits.length}/${countUnknown ? '?' : v.total}, ${v.how})`,
  );
  return {
    ...common,
    outcome: stored.state,
    commitCount: countUnknown ? undefined : v.total,
    stored: v.commits.length,
    newActors: stored.newActors,
  };
}
