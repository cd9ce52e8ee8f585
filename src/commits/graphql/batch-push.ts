import { systemClock } from '../../platform/clock.ts';
import { faultPoint } from '../../platform/fault.ts';
import { redact } from '../../platform/redact.ts';
import { type CommitsClaim, claimKey, releasePush } from '../claim.ts';
import { ZERO_SHA } from '../compare.ts';
import { defaultTipAtPush } from '../default-tip.ts';
import { type FetchDeps, type FetchResult, logResult } from '../outcomes.ts';
import { markFailedAttempt } from '../state.ts';
import { storeFetched } from '../store-fetched.ts';
import type { Final, ProveResult, RoundPush } from './rounds.ts';
import { markGoneByGraphQL } from './settled.ts';

/**
 * One push of a GraphQL batch (ADR 0111): what it needs before its proof (its base, the tips
 * that bound it) and what its verdict writes: its commits, gone, or a failed attempt.
 */

export interface Planned {
  claim: CommitsClaim;
  push: RoundPush;
  /** The default branch's tip at push time is only the tip now (unproven). */
  tipNowOnly: boolean;
  /** A tip from our records that is proven if it is still the tip now. */
  candidate: string | null;
  /**
   * With tipNowOnly: the same head proven against each tip of the default branch the
   * records show around the push; only what none of them reaches is kept.
   */
  around: RoundPush[];
}

/** A claim as a result names its push: the push's key and its repository's name. */
export function keyed(claim: CommitsClaim) {
  const { repositoryId, ref, before, head } = claim;
  return { push: { repositoryId, ref, before, head }, repo: claim.fullName };
}

export async function plan(
  deps: FetchDeps,
  claim: CommitsClaim,
): Promise<Planned | 'rest' | 'none'> {
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
 * around its push: a commit stays only if every one of them proves it the
 * head's and not the tip's. Any other verdict of theirs decides the push (a transport stop,
 * a lying answer, one for REST), but a tip GitHub no longer has leaves nothing proven.
 */
export function narrowed(p: Planned, proved: ProveResult): Final {
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

/** GraphQL failed on the push and REST could not be asked: that failure is its attempt. */
export async function chargeFailure(
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

export async function apply(
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
