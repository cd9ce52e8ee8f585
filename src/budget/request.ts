import { parseRateLimit } from '../github/answer-headers.ts';
import { type AnswerReader, classify, type GitHubResponse } from '../github/classify.ts';
import { BudgetExhausted, GitHubAuthFailed, PoolRejected, RateLimited } from '../github/errors.ts';
import { sentStatement } from '../github/pacing.ts';
import type { RequestPurpose } from '../platform/db/columns.ts';
import { faultPoint } from '../platform/fault.ts';
import { authBlocks } from './auth-blocks.ts';
import { type ClientContext, encodePath } from './client-context.ts';
import type {
  ReserveMeta as ClientReserveMeta,
  GitHubRequest,
  PoolDecision,
  PoolRefusal,
} from './client-types.ts';
import { labelOf } from './graphql-key.ts';
import { releaseReservation, settleAndUnlock, unsendAndUnlock } from './ledger.ts';
import { clearAuthFailures } from './rate-limits.ts';
import { reserve } from './reserve.ts';
import { isBlock, type Sender, type Sent, type Unauthorized } from './send.ts';
import type { BudgetRefusal, Reservation } from './types.ts';
import type { BudgetPolicy } from './window.ts';

/**
 * The pool loop of REST requests (ADR 0050): reserve on the credential with the most of the
 * purpose's allowance left, send through its gate, settle; a 401 blocks that credential and
 * the same request goes to another, until one answers or none is left (PoolRejected).
 */

type ReserveMeta = ClientReserveMeta & { method?: string; points?: number };

export type Requester = ReturnType<typeof createRequester>;

/** A REST answer's reader: classify() and its x-ratelimit-* window. */
export function restReader<T>(
  path: string,
  id: number,
  credential: string,
  now: () => Date,
): AnswerReader<GitHubResponse<T>> {
  return {
    classify: (raw) => classify<T>(path, raw, id, credential, now()),
    rateLimit: (raw, at) => parseRateLimit(raw.headers, at),
  };
}

export function createRequester(ctx: ClientContext, sender: Sender) {
  const { db, logger, clock, pool, byLabel } = ctx;

  async function reserveOn(policy: BudgetPolicy, purpose: RequestPurpose, meta: ReserveMeta = {}) {
    return reserve(
      meta.trx ?? db,
      policy,
      purpose,
      {
        path: meta.path ? encodePath(meta.path) : undefined,
        method: meta.method,
        jobId: meta.jobId,
        runId: meta.runId,
        entity: meta.entity,
        points: meta.points,
        now: clock.now(),
      },
      meta.trx !== undefined,
    );
  }

  /**
   * A refusal of the whole pool, with every credential's auth block when a 401 blocks each
   * one (so the caller can say which, since when and until when). Blocks are named by label.
   */
  async function explain(policy: BudgetPolicy, d: BudgetRefusal): Promise<PoolRefusal> {
    if (d.reason !== 'blocked' || d.blockReason !== 'auth') return d;
    const keys = policy.credentials.map((c) => c.label);
    const blocks = await authBlocks(db, keys, clock.now());
    if (blocks.length !== keys.length) return d;
    return { ...d, rejected: blocks.map((b) => ({ ...b, credential: labelOf(b.credential) })) };
  }

  async function tryReserveOn(
    policy: BudgetPolicy,
    purpose: RequestPurpose,
    meta?: ReserveMeta,
  ): Promise<PoolDecision> {
    const d = await reserveOn(policy, purpose, meta);
    return d.ok ? d : explain(policy, d);
  }

  /** A credential GitHub rejected (401) for this request; the request goes to another. */
  function logRejected(req: { jobId?: string | null }, path: string, err: GitHubAuthFailed) {
    (req.jobId ? logger.child({ job_id: req.jobId }) : logger).warn(
      {
        event: 'github.credential_rejected',
        credential: err.credential,
        path,
        retry_at: err.retryAt?.toISOString() ?? null,
      },
      `GitHub rejected ${err.credential} (401) on ${path}; it is blocked until ${err.retryAt?.toISOString()}, trying another credential`,
    );
  }

  /**
   * One logical request on the pool. A 401 blocks the credential that got it (the auth
   * ladder) and the same request goes to another credential on a new reservation (the
   * ledger keeps the rejected row and the new one), until one answers or none is left:
   * then PoolRejected names every credential's block. One credential: its 401 stands.
   * `send` sends on a reservation; `reservation` is one made earlier.
   */
  async function onPool<R>(
    policy: BudgetPolicy,
    purpose: RequestPurpose,
    req: { jobId?: string | null; rejected?: GitHubAuthFailed },
    path: string,
    meta: ReserveMeta,
    send: (reservation: Reservation) => Promise<R>,
    reservation?: Reservation,
  ): Promise<R> {
    const size = policy.credentials.length;
    // A held request's 401 (settled by its caller) is this request's first rejection.
    if (req.rejected) logRejected(req, path, req.rejected);
    for (let tried = req.rejected ? 1 : 0; ; tried++) {
      if (!reservation) {
        const d = await tryReserveOn(policy, purpose, meta);
        if (!d.ok) {
          if (tried > 0 && d.rejected) throw new PoolRejected(path, d.rejected);
          throw new BudgetExhausted(purpose, d.retryAt, d.reason, d.blockReason, d.rejected);
        }
        reservation = d.reservation;
      }
      try {
        return await send(reservation);
      } catch (err) {
        if (!(err instanceof GitHubAuthFailed) || size === 1 || tried >= size) throw err;
        logRejected(req, path, err);
        reservation = undefined;
      }
    }
  }

  async function request<T>(req: GitHubRequest): Promise<GitHubResponse<T>> {
    const path = encodePath(req.path);
    return onPool(
      ctx.policy,
      req.purpose,
      req,
      path,
      { ...req, path },
      (r) => requestOn<T>(req, path, r),
      req.reservation,
    );
  }

  async function requestOn<T>(
    req: GitHubRequest,
    path: string,
    reservation: Reservation,
  ): Promise<GitHubResponse<T>> {
    const id = reservation.id;
    const cred = byLabel.get(reservation.credential);
    const giveBack = (reason: string) =>
      releaseReservation(db, id, reason, clock.now()).catch(() => {});
    if (!cred) {
      await giveBack('reserved on a credential this process does not hold');
      throw new Error(`reservation ${id} is for ${reservation.credential}, not in this pool`);
    }
    const credential = cred.label;
    const sentAt = { credential, path, method: 'GET', jobId: req.jobId, runId: req.runId };
    const reader = restReader<T>(path, id, credential, () => clock.now());
    type Outcome = Sent<GitHubResponse<T>> | Unauthorized;
    let outcome: Outcome;
    try {
      outcome = await ctx.gateFor(credential).run<Outcome>(
        async (entered) => {
          const slot = (entered[0]?.slot as Date | null | undefined) ?? null;
          if (!slot) {
            throw new Error(
              `github_requests ${id} is not an open reservation (already used, released or swept)`,
            );
          }
          const out = { method: 'GET' as const, path, etag: req.etag ?? null };
          return sender.sendOnce(cred, out, slot, reader);
        },
        {
          // Marked sent (and its pacing slot taken) in the lock's own statement.
          enter: (locked) =>
            sentStatement(locked, id, { ...sentAt, now: clock.now(), spacingMs: ctx.spacing }),
          // The usual answer is settled in the unlock's statement; a block (403/429, 401)
          // is written with its settle in a transaction after it.
          leave: (o, unlock) => {
            if ('unauthorized' in o) {
              const reason = (o.unauthorized as Error).message;
              return unsendAndUnlock(id, reason, clock.now(), unlock);
            }
            if (o.error instanceof RateLimited || o.error instanceof GitHubAuthFailed) return null;
            return settleAndUnlock(db, id, o.settlement, credential, o.accepted, unlock);
          },
        },
      );
    } catch (err) {
      // Nothing was sent (gate timeout, or the ledger refused): give the reservation back.
      await giveBack((err as Error).message);
      throw err;
    }
    faultPoint('github.after_settle');
    if ('unauthorized' in outcome) {
      // No token, so nothing was sent: the reservation went back unspent.
      throw await sender.authorizationFailed(cred, credential, path, outcome.unauthorized);
    }
    const { rateLimit, result, accepted } = outcome;
    let { error } = outcome;
    if (isBlock(error)) {
      // Settled with the block, in a transaction after the gate's unlock.
      error = await db
        .transaction()
        .execute((trx) =>
          sender.writeBlock(trx, cred, credential, id, path, outcome as Sent<unknown>),
        );
    } else if (accepted && !rateLimit) {
      // Settled with the unlock; an accepted answer without x-ratelimit-* (fixtures, some
      // proxies) still clears the auth ladder.
      await clearAuthFailures(db, credential);
    }

    sender.logRequest(req, 'GET', path, id, credential, outcome as Sent<unknown>, error);
    if (error) throw error;
    return result!;
  }

  return {
    reserveOn,
    tryReserve: (purpose: RequestPurpose, meta?: ReserveMeta) =>
      tryReserveOn(ctx.policy, purpose, meta),
    tryReserveOn,
    onPool,
    request,
    poolSize: () => pool.length,
  };
}
