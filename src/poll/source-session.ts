import { sql } from 'kysely';
import type { GateHolder, HeldAnswer, HeldRequest } from '../budget/client-types.ts';
import type { Reservation } from '../budget/types.ts';
import { LockSpace } from '../platform/db/locks.ts';
import type { Db } from '../platform/db/pool.ts';
import type { EventSource } from '../platform/db/schema.ts';
import type { IngestionDeps } from './run-summary.ts';

/**
 * The session a poll holds its source lock on (src/poll/poll-source.ts); it also holds
 * the gate of its request in flight, when that request was held (ADR 0082).
 */
export interface SourceSession extends GateHolder {
  /** Kysely on the lock's own connection. */
  db: Db;
  sourceId: number;
  /** The session took the source lock. */
  held: boolean;
  /** A finalize released it (at its commit, or it rolled back without it): do not unlock again. */
  handedOver: boolean;
  /** A held request's answer not written yet: the next transaction of this session writes it. */
  unsettled: HeldAnswer | null;
}

/**
 * In a transaction of the poll's session: write the answer still to settle (its gate goes
 * with it), and release any other gate the session still holds — one a rolled-back
 * transaction took for a request it never made. Returns the settled answer's error, if any.
 */
export async function settlePending(
  deps: IngestionDeps,
  lock: SourceSession,
  trx: Db,
  /**
   * A failing run's last transaction: an answer that cannot be written (the database refuses
   * it) is left `sent` for the sweep, in a savepoint, so the failure itself still commits —
   * else every later poll would retry the same write and never record the run.
   */
  tolerant = false,
): Promise<unknown> {
  let error: unknown = null;
  if (lock.unsettled) {
    const answer = lock.unsettled;
    if (tolerant) {
      await sql`SAVEPOINT settle_pending`.execute(trx);
      try {
        ({ error } = await deps.github.settleHeld(lock, trx, answer));
        await sql`RELEASE SAVEPOINT settle_pending`.execute(trx);
      } catch (err) {
        await sql`ROLLBACK TO SAVEPOINT settle_pending`.execute(trx);
        deps.logger.warn(
          { event: 'github.settle_failed', err, request_id: answer.held.reservation.id },
          `the answer to request ${answer.held.reservation.id} could not be written; it stays sent (counted) for the sweep`,
        );
      }
      lock.unsettled = null;
    } else {
      ({ error } = await deps.github.settleHeld(lock, trx, answer));
    }
  }
  for (const key of lock.gates) {
    await sql`SELECT pg_advisory_unlock(${LockSpace.gate}, ${key})`.execute(trx);
    lock.gates.delete(key);
  }
  return error;
}

/** A run as its opening transaction left it (src/poll/poll-source.ts). */
export interface Opened {
  source: EventSource;
  firstPage: Reservation;
  /** Page 1 held: its gate taken and its sent mark written in the opening transaction. */
  firstHeld: HeldRequest | null;
  runId: number;
  startedAt: Date;
}
