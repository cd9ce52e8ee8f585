import { sql } from 'kysely';
import { LockSpace } from '../db/locks.ts';
import type { Db } from '../db/pool.ts';
import type { EventSource } from '../db/schema.ts';
import type { GateHolder, HeldAnswer, HeldRequest, Reservation } from '../github/types.ts';
import type { IngestionDeps } from './run-summary.ts';

/**
 * The session a poll holds its source lock on (src/ingestion/poll-source.ts); it also holds
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
): Promise<unknown> {
  let error: unknown = null;
  if (lock.unsettled) {
    ({ error } = await deps.github.settleHeld(lock, trx, lock.unsettled));
  }
  for (const key of lock.gates) {
    await sql`SELECT pg_advisory_unlock(${LockSpace.gate}, ${key})`.execute(trx);
    lock.gates.delete(key);
  }
  return error;
}

/** A run as its opening transaction left it (src/ingestion/poll-source.ts). */
export interface Opened {
  source: EventSource;
  firstPage: Reservation;
  /** Page 1 held: its gate taken and its sent mark written in the opening transaction. */
  firstHeld: HeldRequest | null;
  runId: number;
  startedAt: Date;
}
