import type { EntityClass } from '../budget/types.ts';
import type { GitHubResponse } from '../github/classify.ts';
import {
  BudgetExhausted,
  describeRejected,
  GateTimeout,
  GitHubRequestFailed,
  PoolRejected,
  RateLimited,
} from '../github/errors.ts';
import { systemClock } from '../platform/clock.ts';
import { faultPoint } from '../platform/fault.ts';
import { redact } from '../platform/redact.ts';
import { jsonUnderPolicy } from '../store/commit-emails.ts';
import type { WorkDeps } from '../work/deps.ts';
import { ENTITY_TABLES } from '../work/entity.ts';
import { errorStatus, isTransientFailure } from '../work/leased-rows.ts';
import { shareRule } from '../work/split.ts';
import { fairShare } from '../work/split-classes.ts';
import { actorProfile } from './apply-actor.ts';
import { repositoryProfile } from './apply-repository.ts';
import { finishAttempt, openAttempt } from './attempts.ts';
import { type Claim, claimNext, releaseClaim } from './claim.ts';
import { ProfileInvalid } from './profile.ts';
import {
  ageOut,
  deferUntil,
  markEnriched,
  markFailedAttempt,
  markGone,
  markNotModified,
} from './state.ts';

/**
 * The enrichment runner: one entity per enrichOnce call, in five steps — age-out sweep,
 * claim (lease), reserve (fair share + budget), fetch (conditional), apply. Safe to run
 * in any number of processes at once; Postgres (SKIP LOCKED, the lease, the request
 * ledger) is the only coordinator. See ADR 0006.
 */

export type EnrichDeps = WorkDeps;

export type EnrichOutcome =
  | 'idle'
  | 'enriched'
  | 'not_modified'
  | 'gone'
  | 'retry'
  | 'failed'
  | 'rate_limited'
  | 'budget_exhausted';

export interface EnrichResult {
  outcome: EnrichOutcome;
  class: EntityClass;
  /** The entity worked on (absent when idle). */
  /** GitHub's id as a decimal string. */
  entityId?: string;
  /** Its login / full_name (the new one after a rename). */
  name?: string;
  /** HTTP status of the answer, when one came. */
  status?: number | null;
  /**
   * Why budget_exhausted: the GitHub layer said no, enrichment is past its floor while
   * commits wait for REST (share), the class used its half while the other class has work
   * (fair_share), the gate stayed busy, or every credential is blocked by GitHub's 401s
   * (`detail` names them).
   */
  reason?: 'budget' | 'share' | 'fair_share' | 'gate_timeout' | 'auth';
  /** When this entity (retry) or this class (rate_limited) may be tried again. */
  retryAt?: Date;
  detail?: string;
}

export interface EnrichOptions {
  jobId?: string | null;
  /** Already aborted → throws before touching anything. Never interrupts a claimed entity. */
  signal?: AbortSignal;
}

// Statuses that mean "GitHub no longer serves this": 451 is a repository blocked for
// legal reasons, which is as gone as a 404 for our purposes.
const GONE_STATUSES = new Set([404, 410, 451]);

// Failures of this one attempt that may heal: counted against the entity, retried on
// the backoff ladder, terminal after ENRICH_MAX_ATTEMPTS.
const isTransient = (err: unknown): err is Error => isTransientFailure(err, ProfileInvalid);

export async function enrichOnce(
  deps: EnrichDeps,
  cls: EntityClass,
  opts: EnrichOptions = {},
): Promise<EnrichResult> {
  const { db, github, config } = deps;
  const clock = deps.clock ?? systemClock;
  const jobId = opts.jobId ?? null;
  const log = jobId ? deps.logger.child({ job_id: jobId }) : deps.logger;
  opts.signal?.throwIfAborted();

  // 1. Age-out sweep.
  const { ttlSeconds, leaseSeconds, maxAttempts } = config.enrichment;
  await ageOut(db, cls, { now: clock.now(), ttlSeconds });

  // 2. Claim.
  const claim = await claimNext(db, cls, {
    now: clock.now(),
    leaseSeconds,
    workerId: deps.workerId,
  });
  if (!claim) return { outcome: 'idle', class: cls };
  faultPoint('enrich.after_claim');
  const base = { class: cls, entityId: claim.id, name: claim.name };

  // 3. Reserve: the share rule (enrichment's floor, this class's half) first, then the
  // GitHub layer's budget.
  const path = ENTITY_TABLES[cls].path(claim.name);
  const entity = { class: cls, id: claim.id };
  let reservation = null;
  let reason: EnrichResult['reason'] = 'fair_share';
  let refusal: string | undefined;
  try {
    const share = await fairShare(db, github, cls, {
      ...shareRule(config, github),
      now: clock.now(),
    });
    if (share.by === 'floor') reason = 'share';
    if (share.allowed) {
      reason = 'budget';
      const d = await github.tryReserve('enrich', { jobId, entity, path });
      if (d.ok) reservation = d.reservation;
      else if (d.rejected) {
        reason = 'auth';
        refusal = describeRejected(d.rejected);
      }
    }
  } catch (err) {
    await releaseClaim(db, claim);
    throw err;
  }
  if (!reservation) {
    await releaseClaim(db, claim);
    const fields = { event: 'enrichment.deferred', class: cls, entity_id: claim.id, reason };
    if (refusal) log.warn(fields, refusal);
    else log.debug(fields, 'budget says no');
    return { ...base, outcome: 'budget_exhausted', reason, detail: refusal };
  }
  faultPoint('enrich.after_reserve');

  // 4. Fetch, conditionally when we hold an etag.
  const attemptId = await openAttempt(db, claim, { now: clock.now(), jobId });
  let response: GitHubResponse;
  try {
    response = await github.request({
      purpose: 'enrich',
      path,
      etag: claim.etag,
      reservation,
      entity,
      jobId,
    });
  } catch (err) {
    return settleError(deps, claim, attemptId, err, { maxAttempts, log });
  }
  faultPoint('enrich.after_response');

  // 5. Apply.
  const result = await applyResponse(deps, claim, attemptId, path, response, maxAttempts);
  faultPoint('enrich.after_apply');
  logResult(log, result);
  return result;
}

async function applyResponse(
  deps: EnrichDeps,
  claim: Claim,
  attemptId: number,
  path: string,
  response: GitHubResponse,
  maxAttempts: number,
): Promise<EnrichResult> {
  const now = (deps.clock ?? systemClock).now();
  const base = {
    class: claim.class,
    entityId: claim.id,
    name: claim.name,
    status: response.status,
  };
  const finish = { httpStatus: response.status, requestId: response.requestId, now };
  return deps.db.transaction().execute(async (trx) => {
    let outcome: EnrichResult['outcome'];
    let applied: boolean;
    let detail: string | undefined;
    let name = claim.name;
    let retryAt: Date | undefined;
    if (response.status === 304) {
      outcome = 'not_modified';
      applied = await markNotModified(trx, claim, response.etag, now);
    } else if (GONE_STATUSES.has(response.status)) {
      outcome = 'gone';
      detail = `GitHub answered ${response.status} for ${path}`;
      applied = await markGone(trx, claim, detail, now);
    } else {
      let profile: ReturnType<typeof actorProfile> | undefined;
      try {
        if (response.status !== 200)
          throw new GitHubRequestFailed(path, response.status, 'unexpected status');
        // A profile's public email, or an address in a bio or a description, is held to
        // COMMIT_EMAILS like every other address the store keeps.
        const body = jsonUnderPolicy(response.data, deps.config.commits.emails);
        profile =
          claim.class === 'actor' ? actorProfile(body, path) : repositoryProfile(body, path);
        if (profile.id !== claim.id) {
          // The login/name now belongs to another account (renamed, then taken). Not ours
          // to store; ingestion will bring the entity's new name and a retry will find it.
          throw new ProfileInvalid(path, `it now belongs to id ${profile.id}, not ${claim.id}`);
        }
      } catch (err) {
        if (!isTransient(err)) throw err;
        profile = undefined;
        detail = redact(err.message);
      }
      if (profile) {
        outcome = 'enriched';
        name = String(profile.columns[ENTITY_TABLES[claim.class].nameColumn]);
        applied = await markEnriched(trx, claim, profile.columns, response.etag, now);
      } else {
        const r = await markFailedAttempt(trx, claim, detail!, now, maxAttempts);
        outcome = r.terminal ? 'failed' : 'retry';
        applied = r.applied;
        retryAt = r.terminal ? undefined : r.nextAttemptAt;
      }
    }
    if (!applied) {
      // Our lease ran out mid-request and the row has moved on: record, change nothing.
      detail = `lease lost before the answer was applied (${response.status})`;
      await finishAttempt(trx, attemptId, { ...finish, outcome: 'interrupted', detail });
      return { ...base, outcome: 'retry', detail };
    }
    await finishAttempt(trx, attemptId, { ...finish, outcome, detail });
    return { ...base, name, outcome, detail, retryAt };
  });
}

async function settleError(
  deps: EnrichDeps,
  claim: Claim,
  attemptId: number,
  err: unknown,
  ctx: { maxAttempts: number; log: EnrichDeps['logger'] },
): Promise<EnrichResult> {
  const { db } = deps;
  const now = (deps.clock ?? systemClock).now();
  const base = { class: claim.class, entityId: claim.id, name: claim.name };
  const status = errorStatus(err);
  const message = redact((err as Error)?.message ?? String(err));

  if (err instanceof RateLimited) {
    // A budget event, never data: no penalty for the entity, and the cycle stops.
    await db.transaction().execute(async (trx) => {
      await deferUntil(trx, claim, err.retryAt, now);
      await finishAttempt(trx, attemptId, {
        outcome: 'rate_limited',
        httpStatus: err.status,
        detail: message,
        now,
      });
    });
    ctx.log.warn(
      {
        event: 'enrichment.deferred',
        class: claim.class,
        entity_id: claim.id,
        status: err.status,
        retry_at: err.retryAt,
      },
      'rate limited: enrichment waits for the reset',
    );
    return {
      ...base,
      outcome: 'rate_limited',
      status: err.status,
      retryAt: err.retryAt,
      detail: message,
    };
  }

  if (err instanceof GitHubRequestFailed && GONE_STATUSES.has(err.status)) {
    // 451 (blocked for legal reasons) arrives as an error from the client: still gone.
    await db.transaction().execute(async (trx) => {
      const applied = await markGone(trx, claim, message, now);
      await finishAttempt(trx, attemptId, {
        outcome: applied ? 'gone' : 'interrupted',
        httpStatus: status,
        detail: message,
        now,
      });
    });
    const result = { ...base, outcome: 'gone' as const, status, detail: message };
    logResult(ctx.log, result);
    return result;
  }

  if (isTransient(err)) {
    const result = await db.transaction().execute(async (trx) => {
      const r = await markFailedAttempt(trx, claim, message, now, ctx.maxAttempts);
      const outcome = r.terminal ? ('failed' as const) : ('retry' as const);
      await finishAttempt(trx, attemptId, {
        outcome: r.applied ? outcome : 'interrupted',
        httpStatus: status,
        detail: message,
        now,
      });
      return {
        ...base,
        outcome,
        status,
        detail: message,
        retryAt: r.terminal ? undefined : r.nextAttemptAt,
      };
    });
    logResult(ctx.log, result);
    return result;
  }

  // Nothing reached GitHub (gate busy, budget closed under us) or the failure is not the
  // entity's (bad credentials, a bug): give the claim back untouched and close the
  // attempt as interrupted. Gate and budget stop the cycle quietly; the rest propagate.
  await releaseClaim(db, claim);
  await finishAttempt(db, attemptId, {
    outcome: 'interrupted',
    httpStatus: status,
    detail: message,
    now,
  });
  if (err instanceof GateTimeout || err instanceof BudgetExhausted) {
    return {
      ...base,
      outcome: 'budget_exhausted',
      reason: err instanceof GateTimeout ? 'gate_timeout' : 'budget',
    };
  }
  if (err instanceof PoolRejected) {
    // Every credential of the pool is blocked by a 401: no request can go out until the
    // first block ends, so the cycle stops here, saying which credentials and until when.
    ctx.log.warn(
      { event: 'enrichment.deferred', class: claim.class, entity_id: claim.id, reason: 'auth' },
      err.message,
    );
    // Its message holds credential labels only, never a secret (redact would mangle them).
    return { ...base, outcome: 'budget_exhausted', reason: 'auth', status, detail: err.message };
  }
  ctx.log.error(
    { event: 'enrichment.failed', class: claim.class, entity_id: claim.id, err },
    `enrichment of ${claim.class} ${claim.id} stopped by an error`,
  );
  throw err;
}

/** `log` is already bound to the job (job_id), when a job runs this. */
function logResult(log: EnrichDeps['logger'], r: EnrichResult): void {
  const fields = {
    class: r.class,
    entity_id: r.entityId,
    outcome: r.outcome,
    status: r.status ?? null,
  };
  if (r.outcome === 'retry' || r.outcome === 'failed') {
    log.warn(
      {
        event: 'enrichment.failed',
        ...fields,
        will_retry: r.outcome === 'retry',
        retry_at: r.retryAt,
        detail: r.detail,
      },
      `${r.class} ${r.entityId}: ${r.detail}`,
    );
  } else {
    log.info({ event: 'enrichment.completed', ...fields }, `${r.class} ${r.entityId} ${r.outcome}`);
  }
}
