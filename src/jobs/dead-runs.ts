import { sql } from 'kysely';
import { LockSpace, lockHeldSql } from '../platform/db/locks.ts';
import type { Db } from '../platform/db/pool.ts';
import { type DeadRun, interruptDeadRuns } from '../poll/poll-deaths.ts';

/** A run found dead, and what its death did to its source (src/poll/poll-deaths.ts). */
export type InterruptedRun = DeadRun;

/**
 * Marks `running` ingestion runs whose source lock nobody holds as `interrupted`, each a
 * failure and a death of its source (the second in a row sets it aside).
 *
 * A run row is only ever `running` while its poller holds the source's session advisory
 * lock (the row is opened after the lock is taken and finalized before it is released), and
 * that lock dies with the poller's session. So running + lock free means the poller is gone.
 * One statement, so a run that finalizes concurrently is re-checked against its committed
 * status and left alone. pg_locks is cluster-wide: the database filter keeps another
 * database's lock on the same source id from counting.
 */
export function interruptOrphanedRuns(db: Db, now: Date = new Date()): Promise<InterruptedRun[]> {
  return interruptDeadRuns(db, sql`NOT ${lockHeldSql(LockSpace.source, sql`r.source_id`)}`, now);
}
