import { performance } from 'node:perf_hooks';
import { sql } from 'kysely';
import { systemClock } from '../clock.ts';
import { redact } from '../enrichment/attempts.ts';
import { faultPoint } from '../fault.ts';
import { BudgetExhausted, GateTimeout, GitHubUnavailable, RateLimited } from '../github/errors.ts';
import { type CommitsClaim, claimNextPush, releasePush, stillOurs } from './claim.ts';
import { ZERO_SHA } from './compare.ts';
import { emptyFetchOutcomes } from './cycle.ts';
import { abandonFetchAttempt, openFetchAttempt } from './deaths.ts';
import { defaultTipAtPush } from './default-tip.ts';
import { type FetchDeps, type FetchOutcome, type FetchResult, fetchClaimed } from './fetch.ts';
import { DEFAULT_PROOF_LIMITS } from './graphql-proof.ts';
import { type Final, type ProveResult, proveAll, type RoundPush } from './graphql-rounds.ts';
import { markGoneByGraphQL } from './graphql-settled.ts';
import {
  batchHistory,
  chooseFirstRound,
  GRAPHQL_MAX_BATCH,
  GRAPHQL_MAX_REQUESTS,
  graphqlPointsLeft,
} from './graphql-sizing.ts';
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
 * Batches may run side by side (processes, or lanes of one cycle: ADR 0170): each claims
 * its pushes one claimNextPush at a time (SKIP LOCKED, a lease unique to the claim), so two
 * batches hold disjoint pushes; each write is under that lease, and commits and authors are
 * stored by idempotent upserts (ON CONFLICT) in key order, so batches that share commits
 * take their row locks in one order and wait for each other rather than deadlock.
 */

/**
 * Pushes one batch claims at most (a step's room). How many it takes within that — what is
 * due, what the points left pay for, what the lease leaves time to prove — and how deep its
 * first round reads are graphql-sizing.ts's (ADR 0183).
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
}

interface Planned {
  claim: CommitsClaim;
  push: RoundPush;
  /** The default branch's tip at push time is only the tip now (unproven). */
  tipNowOnly: boolean;
  /** A tip from our records that is proven if it is still the tip now. */
  candidate: string | null;
  /**
   * With tipNowOnly: the same head proven against each tip of the default branch the
   * records show around the push (ADR 0183); only what none of them reaches is kept.
   */
  around: RoundPush[];
}

const keyOf = (c: CommitsClaim) => `${c.repositoryId}|${c.ref}|${c.before}|${c.head}`;

/** A claim as a result names its push: the push's key and its repository's name. */
function keyed(claim: CommitsClaim) {
  const { repositoryId, ref, before, head } = claim;
  return { push: { repositoryId, ref, before, head }, repo: claim.fullName };
}

/** The opened attempt taken back, the lease kept: REST compare opens its own. */
async function reopen(deps: FetchDeps, claim: CommitsClaim): Promise<void> {
  await sql`UPDATE push_events SET commits_attempts = ${claim.attempts}, commits_fetch_started_at = NULL
    WHERE ${stillOurs(claim)}`.execute(deps.db);
}

async function plan(deps: FetchDeps, claim: CommitsClaim): Promise<Planned | 'rest' | 'none'> {
  if (ZERO_SHA.test(claim.head) || claim.ref.startsWith('refs/tags/')) return 'none';
  if (!claim.fullName) return 'rest';
  const base = {
    key: keyOf(claim),
    fullName: claim.fullName,
    repositoryId: claim.repositoryId,
    head: claim.head,
  };
  const exact = { tipNowOnly: false, candidate: null, around: [] };
  if (!ZERO_SHA.test(claim.before)) {
    const push: RoundPush = { ...base, base: claim.before, baseFrom: 'before' };
    return { claim, push, ...exact };
  }
  // A new ref of a repository whose profile is not fetched yet: its default branch is read
  // in the first round (no wait for enrichment, as REST's path must).
  if (!claim.defaultBranch) {
    const push: RoundPush = { ...base, base: null, baseFrom: 'new-ref', ref: claim.ref };
    return { claim, push, tipNowOnly: true, candidate: null, around: [] };
  }
  if (claim.ref === `refs/heads/${claim.defaultBranch}`) {
    const push: RoundPush = { ...base, base: null, baseFrom: 'first-push' };
    return { claim, push, ...exact };
  }
  const tip = await defaultTipAtPush(deps.db, claim, claim.defaultBranch);
  if (tip.proven) {
    const push: RoundPush = { ...base, base: tip.proven, baseFrom: 'default-tip' };
    return { claim, push, ...exact };
  }
  const push: RoundPush = { ...base, base: null, baseFrom: 'default-now' };
  const around = tip.around.map(
    (sha): RoundPush => ({
      ...base,
      key: `${base.key}|${sha}`,
      base: sha,
      baseFrom: 'default-around',
    }),
  );
  return { claim, push, tipNowOnly: true, candidate: tip.candidate, around };
}

/**
 * A new branch's verdict against the tip now, narrowed by its verdicts against the tips
 * around its push (ADR 0183): a commit stays only if every one of them proves it the
 * head's and not the tip's. Any other verdict of theirs decides the push (a transport stop,
 * a lying answer, one for REST), but a tip GitHub no longer has leaves nothing proven.
 */
function narrowed(p: Planned, proved: ProveResult): Final {
  const v = proved.verdicts.get(p.push.key)!;
  if (p.around.length === 0 || v.kind !== 'proven') return v;
  let kept = v.commits;
  for (const other of p.around) {
    const w = proved.verdicts.get(other.key)!;
    if (w.kind === 'proven') {
      const reached = new Set(w.commits.map((c) => c.sha));
      kept = kept.filter((c) => reached.has(c.sha));
    } else if (w.kind === 'fallback' && proved.evidence.get(other.key)?.baseMissing) kept = [];
    else return w;
  }
  if (kept.length === v.commits.length) return v;
  return { ...v, commits: kept, total: kept.length, firstPosition: 0 };
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
  };
  const count = async (r: FetchResult) => {
    summary.outcomes[r.outcome] += 1;
    summary.requests += r.requests;
    summary.newActors += r.newActors ?? 0;
    if (r.outcome === 'rate_limited' || r.outcome === 'budget_exhausted') {
      summary.stoppedBy = r.outcome;
      summary.retryAt = r.retryAt;
    }
    await opts.onResult?.(r);
  };
  const planned: Planned[] = [];
  const rest: CommitsClaim[] = [];
  const size = batchHistory.batchSize({
    room: opts.maxPushes ?? GRAPHQL_BATCH_PUSHES,
    pointsLeft: graphqlPointsLeft(await github.budget()),
    leaseSeconds: config.enrichment.leaseSeconds,
  });
  /**
   * Claims up to `n` more due pushes and plans each: a tag or a deletion is settled at once,
   * one only REST's path can take is kept for it, the others are opened for proving (what
   * it returns). Called for the batch, then before each round while the batch is under its
   * size: pushes due meanwhile join the rounds still running.
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
    const from = planned.length;
    for (const claim of claims) {
      const p = await plan(deps, claim);
      if (p === 'none') {
        await markNone(db, claim);
        await count({ ...keyed(claim), outcome: 'none', requests: 0 });
      } else if (p === 'rest') rest.push(claim);
      else {
        const opened = await openFetchAttempt(db, claim, {
          now: clock.now(),
          maxAttempts: config.enrichment.maxAttempts,
        });
        if (opened.kind === 'opened') planned.push(p);
        else
          await count({
            ...keyed(claim),
            outcome: opened.kind === 'set_aside' ? 'failed' : 'retry',
            requests: 0,
          });
      }
    }
    return planned.slice(from).flatMap((p) => [p.push, ...p.around]);
  };
  const pushes = await take(size);
  if (summary.claimed === 0) {
    summary.stoppedBy = 'idle';
    return summary;
  }

  const started = performance.now();
  const proved = await proveAll(
    pushes,
    async (q) => {
      const a = await github.graphql({
        purpose: 'commits',
        query: q.query,
        variables: q.variables,
        points: q.points,
        jobId,
      });
      return { data: a.data as Record<string, unknown> | null, errors: a.errors };
    },
    {
      limits: { ...DEFAULT_PROOF_LIMITS, cap: config.commits.maxPerPush },
      maxRequests: GRAPHQL_MAX_REQUESTS,
      firstRound: chooseFirstRound(pushes.length, batchHistory.sizes),
      isSplittable: (err) => err instanceof GitHubUnavailable,
      more: () => take(size - summary.claimed),
    },
  );
  faultPoint('commits.after_response');
  summary.queries = proved.queries;
  summary.points = proved.points;
  // What the batch settled teaches the next one its first round and its size.
  batchHistory.record({
    settled: [...proved.verdicts.values()].flatMap((v) => (v.kind === 'proven' ? [v.total] : [])),
    queries: proved.queries,
    seconds: (performance.now() - started) / 1000,
  });

  for (const p of planned) {
    const v = narrowed(p, proved);
    const r = await apply(deps, p, v, proved.evidence.get(p.push.key)?.base ?? null, log);
    if (r === 'rest') {
      summary.fallbacks += 1;
      await reopen(deps, p.claim);
      rest.push(p.claim);
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
    for (const claim of rest) await releasePush(db, claim);
    throw stop;
  }

  for (const claim of rest) {
    if (summary.stoppedBy) {
      await releasePush(db, claim);
      continue;
    }
    await count(await fetchClaimed(deps, claim, jobId, log));
  }
  return summary;
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
  if (v.kind === 'fallback') return 'rest';
  if (v.kind === 'unfinished') {
    // Not the push's fault (a rate limit, the budget): no attempt counted.
    await abandonFetchAttempt(db, claim, now);
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
  const countUnknown =
    p.tipNowOnly && v.how !== 'first-push' && !(p.candidate !== null && p.candidate === base);
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
