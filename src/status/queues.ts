import { sql } from 'kysely';
import { ALL_QUEUES } from '../jobs/queue-names.ts';
import type { Db } from '../platform/db/pool.ts';

/**
 * Queue state read straight from pg-boss's tables in PGBOSS_SCHEMA: one read of committed
 * state, the same for every process (pg-boss's own getQueueStats is a per-process cache).
 * pg-boss is never written here.
 */

export const JOB_STATES = [
  'created',
  'retry',
  'active',
  'completed',
  'cancelled',
  'failed',
] as const;
export type JobState = (typeof JOB_STATES)[number];

export interface QueueStatus {
  name: string;
  jobs: Record<JobState, number>;
  /** Age of the oldest job waiting to start (created or retry, start_after passed); null if none. */
  oldestWaitingSeconds: number | null;
}

export interface LastReconcile {
  state: JobState;
  startedAt: Date | null;
  completedAt: Date | null;
  /** What the reconcile job returned (its report), when pg-boss kept it. */
  output: unknown;
}

function emptyCounts(): Record<JobState, number> {
  return Object.fromEntries(JOB_STATES.map((s) => [s, 0])) as Record<JobState, number>;
}

/** Job counts per state and the oldest waiting job, for the five queues (and any others pg-boss holds). */
export async function queueStatuses(db: Db, schema: string, now: Date): Promise<QueueStatus[]> {
  const job = sql.table(`${schema}.job`);
  const counts = await sql<{ name: string; state: JobState; n: string }>`
    SELECT name, state::text AS state, count(*) AS n FROM ${job} GROUP BY name, state`.execute(db);
  const waiting = await sql<{ name: string; oldest: Date }>`
    SELECT name, min(created_on) AS oldest FROM ${job}
    WHERE state IN ('created', 'retry') AND start_after <= ${now}
    GROUP BY name`.execute(db);
  const byName = new Map<string, QueueStatus>();
  const entry = (name: string) => {
    let q = byName.get(name);
    if (!q) {
      q = { name, jobs: emptyCounts(), oldestWaitingSeconds: null };
      byName.set(name, q);
    }
    return q;
  };
  for (const name of ALL_QUEUES) entry(name);
  for (const row of counts.rows) entry(row.name).jobs[row.state] = Number(row.n);
  for (const row of waiting.rows) {
    entry(row.name).oldestWaitingSeconds = Math.max(
      0,
      Math.round((now.getTime() - row.oldest.getTime()) / 1000),
    );
  }
  return [...byName.values()];
}

/** The most recent reconcile job that finished (or is running), with the report it returned. */
export async function lastReconcile(db: Db, schema: string): Promise<LastReconcile | null> {
  const r = await sql<{
    state: JobState;
    started_on: Date | null;
    completed_on: Date | null;
    output: unknown;
  }>`
    SELECT state::text AS state, started_on, completed_on, output FROM ${sql.table(`${schema}.job`)}
    WHERE name = 'reconcile' AND state IN ('active', 'completed', 'failed')
    ORDER BY coalesce(completed_on, started_on) DESC NULLS LAST
    LIMIT 1`.execute(db);
  const row = r.rows[0];
  if (!row) return null;
  return {
    state: row.state,
    startedAt: row.started_on,
    completedAt: row.completed_on,
    output: row.output,
  };
}
