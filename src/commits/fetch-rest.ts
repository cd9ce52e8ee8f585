import {
  BudgetExhausted,
  GateTimeout,
  GitHubRequestFailed,
  RateLimited,
} from '../github/errors.ts';
import { systemClock } from '../platform/clock.ts';
import { faultPoint } from '../platform/fault.ts';
import { redact } from '../platform/redact.ts';
import { errorStatus, isTransientFailure } from '../work/leased-rows.ts';
import { type CommitsClaim, claimNextPush, type PushKey } from './claim.ts';
import { CompareInvalid, ZERO_SHA } from './compare.ts';
import {
  type Ctx,
  fetchRange,
  GONE_STATUSES,
  Refused,
  type Sent,
  withoutTipsAround,
} from './compare-requests.ts';
import { abandonFetchAttempt, openFetchAttempt } from './deaths.ts';
import { defaultTipAtPush } from './default-tip.ts';
import { type FetchDeps, type FetchResult, logResult } from './outcomes.ts';
import {
  bumpRepository,
  deferPush,
  markFailedAttempt,
  markGone,
  markNone,
  refreshRepository,
} from './state.ts';
import { storeFetched } from './store-fetched.ts';

/**
 * The commits fetcher: one pending push per fetchOnce call — claim (lease, fair across
 * repositories), base (the push's `before`, or the default branch for a new branch),
 * reserve (the share, then the budget), compare, store. Safe to run in any number of
 * processes at once: Postgres (SKIP LOCKED, the lease, the ledger) is the coordinator,
 * and every write is idempotent (ON CONFLICT DO NOTHING), so a retry after a crash stores
 * nothing twice. See ADR 0071.
 */

export interface FetchClaimedOptions {
  /**
   * The push's GraphQL query failed (why): if REST cannot take it now either (the budget,
   * the share, the gate), that failure is its attempt on the ladder, not given back uncounted.
   */
  charge?: string;
}

/** commits_error of a push whose default-branch base answered 404 once (retried once). */
const DEFAULT_BRANCH_404 = 'the default branch answered 404';
/** A new branch waits this long for its repository's profile before it is tried again. */
export const WAIT_FOR_REPOSITORY_SECONDS = 60;

const isTransient = (err: unknown): err is Error => isTransientFailure(err, CompareInvalid);

/** The base of the comparison: the push's `before`, or for a new branch the default branch. */
async function baseOf(deps: FetchDeps, claim: CommitsClaim): Promise<string | FetchResult> {
  if (ZERO_SHA.test(claim.head) || claim.ref.startsWith('refs/tags/')) {
    // Store time makes these `none`; a row that is pending anyway still never costs a request.
    await markNone(deps.db, claim);
    return {
      outcome: 'none',
      push: keyOf(claim),
      repo: claim.fullName,
      requests: 0,
      commitCount: 0,
    };
  }
  if (!ZERO_SHA.test(claim.before)) return claim.before;
  if (claim.defaultBranch) return claim.defaultBranch;
  const now = (deps.clock ?? systemClock).now();
  const push = keyOf(claim);
  if (claim.repositoryState === 'gone') {
    const detail = 'the repository is gone: no default branch to compare a new branch with';
    await markGone(deps.db, claim, detail);
    return { outcome: 'gone', push, repo: claim.fullName, requests: 0, detail };
  }
  if (claim.repositoryState === 'failed' || claim.repositoryState === null) {
    const detail =
      claim.repositoryState === null
        ? 'no repository row: the default branch is unknown'
        : 'the repository profile could not be fetched: the default branch is unknown';
    const r = await markFailedAttempt(
      deps.db,
      claim,
      detail,
      now,
      deps.config.enrichment.maxAttempts,
    );
    return {
      outcome: r.terminal ? 'failed' : 'retry',
      push,
      repo: claim.fullName,
      requests: 0,
      detail,
      retryAt: r.terminal ? undefined : r.nextAttemptAt,
    };
  }
  await bumpRepository(deps.db, claim.repositoryId, now);
  const retryAt = new Date(now.getTime() + WAIT_FOR_REPOSITORY_SECONDS * 1000);
  const detail = "a new branch: waiting for the repository's default branch (enrichment)";
  await deferPush(deps.db, claim, retryAt, detail);
  return { outcome: 'waiting', push, repo: claim.fullName, requests: 0, retryAt, detail };
}

function keyOf(c: CommitsClaim): PushKey {
  return { repositoryId: c.repositoryId, ref: c.ref, before: c.before, head: c.head };
}

export interface FetchOptions {
  jobId?: string | null;
  signal?: AbortSignal;
}

export async function fetchOnce(deps: FetchDeps, opts: FetchOptions = {}): Promise<FetchResult> {
  const { db, config } = deps;
  const clock = deps.clock ?? systemClock;
  const jobId = opts.jobId ?? null;
  const log = jobId ? deps.logger.child({ job_id: jobId }) : deps.logger;
  opts.signal?.throwIfAborted();

  const claim = await claimNextPush(db, {
    now: clock.now(),
    leaseSeconds: config.enrichment.leaseSeconds,
  });
  if (!claim) return { outcome: 'idle', requests: 0 };
  faultPoint('commits.after_claim');
  return fetchClaimed(deps, claim, jobId, log);
}

/** The REST compare of one claimed push (also the GraphQL batches' fallback). */
export async function fetchClaimed(
  deps: FetchDeps,
  claim: CommitsClaim,
  jobId: string | null,
  log: FetchDeps['logger'],
  opts: FetchClaimedOptions = {},
): Promise<FetchResult> {
  const { db, config } = deps;
  const clock = deps.clock ?? systemClock;
  const push = keyOf(claim);

  let base = await baseOf(deps, claim);
  if (typeof base !== 'string') {
    logResult(log, base);
    return base;
  }
  // A new branch: the default branch's tip at push time when the stored pushes prove it,
  // else the branch by name (its tip now), whose answer is never trusted to be the whole
  // set: `partial`, count unknown, and narrowed to what none of the tips the records show
  // around the push reaches.
  let tipNowOnly = false;
  let tipsAround: string[] = [];
  if (ZERO_SHA.test(claim.before) && base === claim.defaultBranch) {
    const tip = await defaultTipAtPush(db, claim, claim.defaultBranch);
    if (tip.proven) base = tip.proven;
    else {
      tipNowOnly = true;
      tipsAround = tip.around;
    }
  }

  // The attempt counted before any request: a process that dies mid-request has
  // backed the push off, and the second death sets it aside.
  const opened = await openFetchAttempt(db, claim, {
    now: clock.now(),
    maxAttempts: config.enrichment.maxAttempts,
  });
  if (opened.kind !== 'opened') {
    const result: FetchResult =
      opened.kind === 'set_aside'
        ? { outcome: 'failed', push, repo: claim.fullName, requests: 0, detail: opened.reason }
        : { outcome: 'retry', push, repo: claim.fullName, requests: 0, detail: 'lease lost' };
    logResult(log, result);
    return result;
  }

  const ctx: Ctx = { deps, claim, jobId, base, requests: 0, requestId: null, status: null };
  let sent: Sent | null;
  try {
    sent = await fetchRange(ctx);
    if (sent && tipsAround.length > 0) sent = await withoutTipsAround(ctx, sent, tipsAround);
  } catch (err) {
    return settleError(ctx, err, log, opts);
  }
  const now = clock.now();
  const common = {
    push,
    repo: claim.fullName,
    requests: ctx.requests,
    status: ctx.status,
    requestId: ctx.requestId,
  };
  if (!sent) {
    const detail = `GitHub answered ${ctx.status} for the comparison ${ctx.base}...${claim.head}`;
    if (tipNowOnly && !claim.lastError?.startsWith(DEFAULT_BRANCH_404)) {
      // The default branch may have been renamed: the profile is fetched again and the
      // push tried once more against the new name, before a second 404 makes it gone.
      await refreshRepository(db, claim.repositoryId, now);
      const retryAt = new Date(now.getTime() + WAIT_FOR_REPOSITORY_SECONDS * 1000);
      await deferPush(db, claim, retryAt, `${DEFAULT_BRANCH_404}: ${detail}`);
      const result: FetchResult = { ...common, outcome: 'waiting', retryAt, detail };
      logResult(log, result);
      return result;
    }
    const applied = await markGone(db, claim, detail);
    const result: FetchResult = applied
      ? { ...common, outcome: 'gone', detail }
      : { ...common, outcome: 'retry', detail: 'lease lost before the answer was applied' };
    logResult(log, result);
    return result;
  }
  const stored = await storeFetched(db, claim, sent.answer, {
    firstPosition: sent.firstPosition,
    emails: config.commits.emails,
    now,
    countUnknown: tipNowOnly,
  });
  faultPoint('commits.after_store');
  const result: FetchResult = stored.applied
    ? {
        ...common,
        outcome: stored.state,
        commitCount: tipNowOnly ? undefined : sent.answer.totalCommits,
        stored: sent.answer.commits.length,
        newActors: stored.newActors,
      }
    : { ...common, outcome: 'retry', detail: 'lease lost before the answer was applied' };
  logResult(log, result);
  return result;
}

async function settleError(
  ctx: Ctx,
  err: unknown,
  log: FetchDeps['logger'],
  opts: FetchClaimedOptions,
): Promise<FetchResult> {
  const { deps, claim } = ctx;
  const { db } = deps;
  const now = (deps.clock ?? systemClock).now();
  const base = {
    push: keyOf(claim),
    repo: claim.fullName,
    requests: ctx.requests,
    requestId: ctx.requestId,
  };
  const notSent =
    err instanceof Refused
      ? err.reason
      : err instanceof GateTimeout
        ? 'gate_timeout'
        : err instanceof BudgetExhausted
          ? 'budget'
          : null;
  if (notSent && opts.charge) {
    // REST cannot take it now, and GraphQL failed on it: that failure is its attempt.
    const r = await markFailedAttempt(
      db,
      claim,
      opts.charge,
      now,
      deps.config.enrichment.maxAttempts,
    );
    const result: FetchResult = {
      ...base,
      outcome: r.terminal && r.applied ? 'failed' : 'retry',
      reason: notSent,
      detail: opts.charge,
      retryAt: r.terminal ? undefined : r.nextAttemptAt,
      transient: true,
    };
    logResult(log, result);
    return result;
  }
  if (err instanceof Refused) {
    await abandonFetchAttempt(db, claim, now);
    log.debug(
      { event: 'commits.deferred', repository_id: claim.repositoryId, reason: err.reason },
      'budget says no',
    );
    return { ...base, outcome: 'budget_exhausted', reason: err.reason, retryAt: err.retryAt };
  }
  // The error's own status, else the answer's: a 200 whose body is unusable logs 200, not null.
  const status = errorStatus(err) ?? ctx.status;
  const message = redact((err as Error)?.message ?? String(err));

  if (err instanceof RateLimited) {
    // A budget event, never data: no attempt counted, and the cycle stops.
    await deferPush(db, claim, err.retryAt);
    log.warn(
      {
        event: 'commits.deferred',
        repository_id: claim.repositoryId,
        status: err.status,
        retry_at: err.retryAt,
      },
      'rate limited: commit fetching waits for the reset',
    );
    return { ...base, outcome: 'rate_limited', status: err.status, retryAt: err.retryAt };
  }
  if (err instanceof GitHubRequestFailed && GONE_STATUSES.has(err.status)) {
    const applied = await markGone(db, claim, message);
    const result: FetchResult = { ...base, outcome: applied ? 'gone' : 'retry', status };
    logResult(log, { ...result, detail: message });
    return { ...result, detail: message };
  }
  if (err instanceof GitHubRequestFailed && err.status === 422) {
    // GitHub cannot compare the two (no common history, or a ref it does not know): the
    // same question gets the same answer, so asking again would only spend the budget.
    const r = await markFailedAttempt(db, claim, message, now, 1);
    const result: FetchResult = {
      ...base,
      outcome: r.applied ? 'failed' : 'retry',
      status,
      detail: message,
    };
    logResult(log, result);
    return result;
  }
  if (isTransient(err)) {
    const max = deps.config.enrichment.maxAttempts;
    const r = await markFailedAttempt(db, claim, message, now, max);
    const result: FetchResult = {
      ...base,
      outcome: r.terminal && r.applied ? 'failed' : 'retry',
      status,
      detail: message,
      retryAt: r.terminal ? undefined : r.nextAttemptAt,
      transient: true,
    };
    logResult(log, result);
    return result;
  }
  // Nothing reached GitHub (gate busy, budget closed under us) or the failure is not the
  // push's (bad credentials, a bug): give the claim back, its opened attempt undone.
  await abandonFetchAttempt(db, claim, now);
  if (err instanceof GateTimeout || err instanceof BudgetExhausted) {
    return {
      ...base,
      outcome: 'budget_exhausted',
      reason: err instanceof GateTimeout ? 'gate_timeout' : 'budget',
    };
  }
  log.error(
    { event: 'commits.failed', repository_id: claim.repositoryId, ref: claim.ref, err },
    `commits of a push to ${claim.fullName ?? claim.repositoryId} stopped by an error`,
  );
  throw err;
}
