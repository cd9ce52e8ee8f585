import { sql } from 'kysely';
import { LockSpace, lockHeldSql } from '../db/locks.ts';
import type { Db } from '../db/pool.ts';

export interface InterruptedRun {
  runId: number;
  sourceId: number;
}

export const INTERRUPTED_ERROR =
  'interrupted: the process running it ended before the run finished (its source lock was released)';

/**
 * Marks `running` ingestion runs whose source lock nobody holds as `interrupted`.
 *
 * A run row is only ever `running` while its poller holds the source's session advisory
 * lock (the row is opened after the lock is taken and finalized before it is released), and
 * that lock dies with the poller's session. So running + lock free means the poller is gone.
 * One statement, so a run that finalizes concurrently is re-checked against its committed
 * status and left alone. pg_locks is cluster-wide: the database filter keeps another
 * database's lock on the same source id from counting.
 */
export async function interruptOrphanedRuns(
  db: Db,
  now: Date = new Date(),
): Promise<InterruptedRun[]> {
  const r = await sql<{ id: string; source_id: string }>`
    UPDATE ingestion_runs AS r
    SET status = 'interrupted', finished_at = ${now}, error = ${INTERRUPTED_ERROR}
    WHERE r.status = 'running'
      AND NOT ${lockHeldSql(LockSpace.source, sql`r.source_id`)}
    RETURNING r.id, r.source_id`.execute(db);
  return r.rows.map((row) => ({ runId: Number(row.id), sourceId: Number(row.source_id) }));
}
