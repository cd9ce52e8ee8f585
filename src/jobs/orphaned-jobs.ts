import { sql } from 'kysely';
import type { PgBoss } from 'pg-boss';
import { LockSpace, lockHeldSql } from '../platform/db/locks.ts';
import type { Db } from '../platform/db/pool.ts';
import type { Logger } from '../platform/log.ts';
import { LIVENESS_APPLICATION_NAME } from './liveness.ts';
import { ALL_QUEUES, type QueueName } from './queue-names.ts';

/**
 * Jobs left `active` by a worker that died (ADR 0011). pg-boss keeps such a job active
 * until its heartbeat expires (30 s + a supervise interval of up to 60 s), and a stately
 * queue runs nothing else meanwhile: a crash loop stalled polling for minutes. We know
 * better and sooner: every running job's lock is held by its worker's liveness session
 * (src/jobs/liveness.ts), so an active job of our queues whose lock nobody holds is an
 * orphan, and it is failed through pg-boss's own API (`fail`, no retry: retryLimit 0) so
 * the queue's next job can run.
 *
 * One window is left: between pg-boss marking a job active and its handler taking the
 * lock (milliseconds). A job is only judged once it is older than that, by either rule:
 * - it started before the oldest live liveness session did (every live worker started
 *   after it, so its worker is dead) — this catches a crashed worker's job the moment its
 *   successor starts, with no waiting at all;
 * - or it started more than ORPHAN_GRACE_SECONDS ago (another worker, older than the job,
 *   is alive; the dead one's job waits out the grace).
 * Both are read on the database's clock (started_on, backend_start, now()). A live job
 * wrongly judged (a handler stalled past the grace before taking its lock) costs nothing
 * but a second concurrent job of its queue, which the domain locks make harmless.
 */

export const ORPHAN_GRACE_SECONDS = 5;

/** jobLockKey (int4Key: the first 4 bytes of sha256, signed) of `j.id`, in SQL. */
const jobLockKeySql = sql`('x' || left(encode(sha256(j.id::text::bytea), 'hex'), 8))::bit(32)::int`;

export interface OrphanedJob {
  id: string;
  queue: QueueName;
  startedOn: Date;
}

export interface OrphanSweep {
  /** Orphans this sweep failed. */
  failed: OrphanedJob[];
  /**
   * When the youngest unlocked active job (too young to judge yet) reaches the grace:
   * a worker that starts right after a crash sweeps again then, instead of a tick later.
   */
  recheckAt: Date | null;
}

interface Row {
  id: string;
  name: QueueName;
  started_on: Date;
  orphaned: boolean;
  judge_at: Date;
}

/** Active jobs of `queues` whose lock nobody holds, with the verdict (exported for tests). */
export async function unlockedActiveJobs(
  db: Db,
  pgbossSchema: string,
  queues: readonly QueueName[] = ALL_QUEUES,
  graceSeconds = ORPHAN_GRACE_SECONDS,
): Promise<Row[]> {
  const r = await sql<Row>`
    WITH live AS (
      SELECT min(backend_start) AS oldest FROM pg_stat_activity
      WHERE datname = current_database() AND application_name = ${LIVENESS_APPLICATION_NAME}
    )
    SELECT j.id::text AS id, j.name, j.started_on,
      (j.started_on < now() - make_interval(secs => ${graceSeconds})
        OR j.started_on < COALESCE((SELECT oldest FROM live), 'infinity')) AS orphaned,
      j.started_on + make_interval(secs => ${graceSeconds}) AS judge_at
    FROM ${sql.table(`${pgbossSchema}.job`)} j
    WHERE j.name = ANY(${[...queues]}::text[])
      AND j.state = 'active'
      AND NOT ${lockHeldSql(LockSpace.job, jobLockKeySql)}
    ORDER BY j.started_on`.execute(db);
  return r.rows;
}

export interface SweepDeps {
  db: Db;
  boss: Pick<PgBoss, 'fail'>;
  pgbossSchema: string;
  logger: Logger;
  /** Tests only: a shorter grace than ORPHAN_GRACE_SECONDS. */
  graceSeconds?: number;
}

/** Fails every orphaned job of our queues; logs `reconcile.job_orphaned` for each. */
export async function failOrphanedJobs(deps: SweepDeps): Promise<OrphanSweep> {
  const rows = await unlockedActiveJobs(
    deps.db,
    deps.pgbossSchema,
    ALL_QUEUES,
    deps.graceSeconds ?? ORPHAN_GRACE_SECONDS,
  );
  const failed: OrphanedJob[] = [];
  let recheckAt: Date | null = null;
  for (const row of rows) {
    if (!row.orphaned) {
      if (!recheckAt || row.judge_at < recheckAt) recheckAt = row.judge_at;
      continue;
    }
    // fail() only touches a job not yet completed: one its worker settled meanwhile stays.
    const res = (await deps.boss.fail(row.name, row.id, {
      message: 'orphaned: the worker running it ended (its liveness lock was released)',
    })) as { affected?: number } | undefined;
    if (res?.affected === 0) continue;
    const job = { id: row.id, queue: row.name, startedOn: row.started_on };
    failed.push(job);
    deps.logger.warn(
      {
        event: 'reconcile.job_orphaned',
        queue: row.name,
        orphan_job_id: row.id,
        started_on: row.started_on.toISOString(),
      },
      `${row.name} job ${row.id} was left active by a worker that ended; failed so the queue moves on`,
    );
  }
  return { failed, recheckAt };
}
