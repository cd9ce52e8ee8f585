import type { HeldRequest, PollSession } from '../budget/client-types.ts';
import type { Reservation } from '../budget/types.ts';
import type { Db } from '../platform/db/pool.ts';
import type { EventSource } from '../platform/db/schema.ts';

/**
 * The session a poll holds its source lock on (src/poll/poll-source.ts). Its requests go
 * through the budget's poll session on the same connection, which holds the gate of a request
 * in flight and writes its answer in the session's next transaction (ADR 0082).
 */
export interface SourceSession {
  /** Kysely on the lock's own connection. */
  db: Db;
  sourceId: number;
  /** The session took the source lock. */
  lockTaken: boolean;
  /** A finalize released it (at its commit, or it rolled back without it): do not unlock again. */
  handedOver: boolean;
  /** The poll's requests: reserved, sent and settled on this session. */
  requests: PollSession;
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
