import { sql } from 'kysely';
import { GitHubAuthFailed } from '../github/errors.ts';
import { LockSpace } from '../platform/db/locks.ts';
import type { Db } from '../platform/db/pool.ts';
import { faultPoint } from '../platform/fault.ts';
import type { ClientContext } from './client-context.ts';
import type { HeldAnswer, PollSession, PollSessionOptions } from './client-types.ts';
import { GateTickets, WatchedGates } from './gate-tickets.ts';
import type { Held } from './held.ts';
import type { Requester } from './request.ts';

/**
 * A poll's requests, on the poll's own database session (ADR 0082): the one object polling
 * speaks to the budget through. It owns the request gates the session holds and the answer
 * still to write, so the poller never sees a gate's lock key, never unlocks one, and never
 * counts gates: it reserves in its transaction, sends, and lets the session's next
 * transaction settle. A held request's gate is a session lock taken in the transaction that
 * reserved it; its answer is written, and the gate released, by a later transaction of the
 * same session — a 304 thus costs two commits.
 */

/**
 * A pass of polls: how many of its polls may be at a request gate at once in this process,
 * one a credential (src/budget/gate-tickets.ts).
 */
export function pollPass(credentials: number): GateTickets {
  return new GateTickets(credentials);
}

export function createPollSession(
  ctx: ClientContext,
  held: Held,
  requester: Requester,
  db: Db,
  opts: PollSessionOptions,
): PollSession {
  const holder = { db, gates: new WatchedGates(opts.ticket ?? null) };
  let kept: HeldAnswer | null = null;

  async function settleKept(trx: Db, tolerant: boolean): Promise<unknown> {
    if (!kept) return null;
    const answer = kept;
    if (!tolerant) return (await held.settleHeld(holder, trx, answer)).error;
    let error: unknown = null;
    await sql`SAVEPOINT settle_pending`.execute(trx);
    try {
      ({ error } = await held.settleHeld(holder, trx, answer));
      await sql`RELEASE SAVEPOINT settle_pending`.execute(trx);
    } catch (err) {
      await sql`ROLLBACK TO SAVEPOINT settle_pending`.execute(trx);
      opts.logger.warn(
        { event: 'github.settle_failed', err, request_id: answer.held.reservation.id },
        `the answer to request ${answer.held.reservation.id} could not be written; it stays sent (counted) for the sweep`,
      );
    }
    kept = null;
    return error;
  }

  return {
    reserveAndHold: (trx, meta) => held.reserveHeld('poll', holder, trx, meta),
    watchGates: () => holder.gates.arm(),
    async send(req, h, keep) {
      if (!h) return requester.request(req);
      const answer = await held.sendHeld(h, req);
      const status = answer.response?.status;
      if (status !== undefined && keep(status)) {
        kept = answer;
        return answer.response!;
      }
      const { response, error } = await db
        .transaction()
        .execute((trx) => held.settleHeld(holder, trx, answer));
      faultPoint('github.after_settle');
      if (error instanceof GitHubAuthFailed && ctx.labels.length > 1) {
        // As request() does in a pool: that credential is blocked, the same page goes to another.
        return requester.request({ ...req, reservation: undefined, rejected: error });
      }
      if (error) throw error;
      return response!;
    },
    async settle(trx, o = {}) {
      const error = await settleKept(trx, o.tolerant ?? false);
      for (const key of holder.gates) {
        await sql`SELECT pg_advisory_unlock(${LockSpace.gate}, ${key})`.execute(trx);
        holder.gates.delete(key);
      }
      return error;
    },
    settled() {
      kept = null;
    },
    async release() {
      for (const key of holder.gates) {
        await sql`SELECT pg_advisory_unlock(${LockSpace.gate}, ${key})`.execute(db);
      }
      // Not one by one: the ticket goes back with the poll's end, not before it.
      holder.gates.clear();
    },
  };
}
