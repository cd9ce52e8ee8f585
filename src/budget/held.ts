import { sql } from 'kysely';
import type { GitHubResponse } from '../github/classify.ts';
import type { Credential } from '../github/credentials.ts';
import { sentStatement } from '../github/pacing.ts';
import type { RequestPurpose } from '../platform/db/columns.ts';
import { int4Key, LockSpace } from '../platform/db/locks.ts';
import type { Db } from '../platform/db/pool.ts';
import { prepared } from '../platform/db/prepared.ts';
import { type ClientContext, encodePath } from './client-context.ts';
import type { GateHolder, HeldAnswer, HeldDecision, HeldRequest } from './client-types.ts';
import { settleAndUnlock, unsendAndUnlock } from './ledger.ts';
import { clearAuthFailures } from './rate-limits.ts';
import { type Requester, restReader } from './request.ts';
import { reserveIfFree } from './reserve.ts';
import { isBlock, type Sender, type Sent, type Unauthorized } from './send.ts';
import type { Reservation } from './types.ts';

/**
 * Held requests (ADR 0082): a poll reserves in its own transaction and takes the chosen
 * credential's gate on its session, marked sent with its pacing slot in that transaction;
 * the answer is settled, and the gate released, by a later transaction of the same session.
 */

/**
 * How many busy gates reserveHeld steps past before it keeps a reservation unheld: each try
 * costs a statement in the caller's transaction, a fallback two commits of the gate's own.
 */
const MAX_BUSY_RETRIES = 4;

/** What a held answer carries for settleHeld. */
interface HeldInternal {
  cred: Credential;
  outcome: Sent<unknown> | Unauthorized;
  purpose: RequestPurpose;
  jobId: string | null;
}

type Meta = { path: string; jobId?: string | null; runId?: number | null };

export function createHeld(ctx: ClientContext, sender: Sender, requester: Requester) {
  const { clock, pool, byLabel, policy } = ctx;

  /**
   * Reserve in `trx` and hold the chosen credential's gate. When that gate is busy (another
   * poll chose the same credential from the same snapshot), another credential is tried, up to
   * MAX_BUSY_RETRIES times, never waiting for a budget lock (this transaction already holds
   * one: waiting could deadlock with another doing the same). The one held wins and the
   * reservations it replaced are taken back in the same transaction; none held, the first is
   * kept unheld, for request() to send through the gate as usual.
   */
  async function reserveHeld(
    purpose: RequestPurpose,
    holder: GateHolder,
    trx: Db,
    meta: Meta,
  ): Promise<HeldDecision> {
    const path = encodePath(meta.path);
    const row = { path, jobId: meta.jobId, runId: meta.runId };
    const first = await requester.tryReserve(purpose, { ...row, trx });
    if (!first.ok) return first;
    const held = await hold(holder, trx, first.reservation, meta);
    if (held || pool.length === 1) return { ok: true, reservation: first.reservation, held };
    const busy = new Set<string>([first.reservation.credential]);
    const tried: Reservation[] = [];
    const takeBack = (rs: Reservation[]) =>
      rs.length === 0
        ? Promise.resolve()
        : sql`DELETE FROM github_requests WHERE id = ANY(${rs.map((r) => String(r.id))}::bigint[])
            AND outcome = 'reserved'`.execute(trx);
    while (busy.size < Math.min(MAX_BUSY_RETRIES + 1, pool.length)) {
      const d = await reserveIfFree(trx, policy, purpose, { ...row, now: clock.now() }, busy);
      if (!d?.ok) break;
      const next = await hold(holder, trx, d.reservation, meta);
      if (next) {
        await takeBack([first.reservation, ...tried]);
        return { ok: true, reservation: d.reservation, held: next };
      }
      tried.push(d.reservation);
      busy.add(d.reservation.credential);
    }
    await takeBack(tried);
    return { ok: true, reservation: first.reservation, held: null };
  }

  async function hold(
    holder: GateHolder,
    trx: Db,
    reservation: Reservation,
    meta: Meta,
  ): Promise<HeldRequest | null> {
    if (!byLabel.has(reservation.credential)) return null;
    const path = encodePath(meta.path);
    const gateKey = int4Key(reservation.credential);
    // A session holds one gate at a time: advisory locks are re-entrant, so a second take of
    // the same one would "succeed" and put two requests in flight.
    if (holder.gates.size > 0) {
      throw new Error(`a request gate is already held by this session (${[...holder.gates]})`);
    }
    // Recorded before the try: should the statement fail after taking it, the holder still
    // knows to release it.
    holder.gates.add(gateKey);
    // Prepared: a poll's opening transaction plans it once a session (src/platform/db/prepared.ts).
    const r = await prepared(
      sentStatement(
        sql`locked AS (SELECT 1 AS l WHERE pg_try_advisory_lock(${LockSpace.gate}, ${gateKey}))`,
        reservation.id,
        {
          credential: reservation.credential,
          path,
          method: 'GET',
          now: clock.now(),
          spacingMs: ctx.spacing,
          jobId: meta.jobId,
          runId: meta.runId,
        },
      ),
    ).execute(trx);
    if (r.rows.length === 0) {
      holder.gates.delete(gateKey);
      return null;
    }
    const slot = r.rows[0]!.slot;
    if (!slot) throw new Error(`github_requests ${reservation.id} is not an open reservation`);
    return { reservation, path, slot: new Date(slot), gateKey };
  }

  async function sendHeld<T>(
    held: HeldRequest,
    req: { etag?: string | null; jobId?: string | null },
  ): Promise<HeldAnswer<T>> {
    const cred = byLabel.get(held.reservation.credential)!;
    const id = held.reservation.id;
    const out = { method: 'GET' as const, path: held.path, etag: req.etag ?? null };
    const reader = restReader<T>(held.path, id, cred.label, () => clock.now());
    const outcome = await sender.sendOnce(cred, out, held.slot, reader);
    const internal: HeldInternal = {
      cred,
      outcome: outcome as Sent<unknown> | Unauthorized,
      purpose: held.reservation.purpose,
      jobId: req.jobId ?? null,
    };
    if ('unauthorized' in outcome)
      return { held, response: null, error: outcome.unauthorized, internal };
    return {
      held,
      response: outcome.error ? null : outcome.result!,
      error: outcome.error,
      internal,
    };
  }

  async function settleHeld<T>(
    holder: GateHolder,
    trx: Db,
    answer: HeldAnswer<T>,
  ): Promise<{ response: GitHubResponse<T>; error: null } | { response: null; error: unknown }> {
    const { held } = answer;
    const { cred, outcome, purpose, jobId } = answer.internal as HeldInternal;
    const id = held.reservation.id;
    const credential = cred.label;
    const path = held.path;
    const unlock = sql`pg_advisory_unlock(${LockSpace.gate}, ${held.gateKey})`;
    const released = () => holder.gates.delete(held.gateKey);
    if ('unauthorized' in outcome) {
      await unsendAndUnlock(
        id,
        (outcome.unauthorized as Error).message,
        clock.now(),
        unlock,
      ).execute(trx);
      released();
      const error = await sender.authorizationFailed(cred, credential, path, outcome.unauthorized);
      return { response: null, error };
    }
    const { settlement, accepted, rateLimit } = outcome;
    let error = outcome.error;
    if (isBlock(error)) {
      error = await sender.writeBlock(trx, cred, credential, id, path, outcome);
      await sql`SELECT ${unlock}`.execute(trx);
    } else {
      // Prepared: the finalize plans it once a session (src/platform/db/prepared.ts).
      await prepared(settleAndUnlock(trx, id, settlement, credential, accepted, unlock)).execute(
        trx,
      );
      if (accepted && !rateLimit) await clearAuthFailures(trx, credential);
    }
    released();
    sender.logRequest({ purpose, jobId }, 'GET', path, id, credential, outcome, error);
    return error
      ? { response: null, error }
      : { response: outcome.result as GitHubResponse<T>, error: null };
  }

  return { reserveHeld, sendHeld, settleHeld };
}

/** The held-request protocol, as poll-session.ts drives it. */
export type Held = ReturnType<typeof createHeld>;
