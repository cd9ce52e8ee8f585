import { sql } from 'kysely';
import type { Db } from '../platform/db/pool.ts';
import type { QueueName } from './queue-names.ts';

/** The pg-boss states in which a job will still run (or is running). */
export const LIVE_STATES = ['created', 'retry', 'active'] as const;

/**
 * Live jobs per queue, read from pg-boss's job table directly. pg-boss's own counts
 * (getQueues / getQueueStats) are served from a cache refreshed about once a minute, which
 * would hide a truncated or drained queue from the reconciler for a tick; this is one
 * indexed read of committed state, the same question docs/operations.md's `psql` recipe asks.
 */
export async function liveJobCounts(
  db: Db,
  pgbossSchema: string,
  queues: readonly QueueName[],
): Promise<Record<string, number>> {
  const r = await sql<{ name: string; n: number }>`
    SELECT name, count(*)::int AS n
    FROM ${sql.table(`${pgbossSchema}.job`)}
    WHERE name = ANY(${[...queues]}::text[])
      AND state = ANY(${[...LIVE_STATES]}::${sql.table(`${pgbossSchema}.job_state`)}[])
    GROUP BY name`.execute(db);
  const out: Record<string, number> = Object.fromEntries(queues.map((q) => [q, 0]));
  for (const row of r.rows) out[row.name] = row.n;
  return out;
}
