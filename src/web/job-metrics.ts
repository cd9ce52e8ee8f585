import { sql } from 'kysely';
import type { Metric } from 'prom-client';
import type { Db } from '../platform/db/pool.ts';

/**
 * pg-boss's job durations on /metrics: a histogram per queue, read from its tables at scrape time.
 */

/**
 * GET /metrics. Every gpi_* value is read from Postgres at scrape time, so whichever web
 * replica Prometheus scrapes, it sees the work of every worker on every machine — an
 * in-process counter would only count what this process did. Counters over the pruned
 * ledgers add metric_tallies (what retention deleted, migration 2026-11-29T0920), so they
 * never go down. Each scrape builds a fresh registry: two concurrent scrapes cannot mix.
 */

export type Labels = Record<string, string>;

/** Seconds; pg-boss jobs run from well under a second (reconcile) to minutes (cycles, polls). */
export const JOB_DURATION_BUCKETS = [0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900];

/**
 * gpi_job_duration_seconds as a Prometheus histogram computed in SQL from the jobs pg-boss
 * still retains (completed and failed). prom-client's Histogram can only observe values in
 * this process, so this is a hand-made metric in prom-client's own Metric shape.
 */
export async function jobDurationHistogram(db: Db, schema: string): Promise<Metric> {
  const bucketColumns = JOB_DURATION_BUCKETS.map(
    (le, i) => sql`count(*) FILTER (WHERE d <= ${le}) AS ${sql.ref(`b${i}`)}`,
  );
  const r = await sql<Record<string, string> & { queue: string; n: string; total: number }>`
    SELECT name AS queue, count(*) AS n, coalesce(sum(d), 0)::float8 AS total, ${sql.join(bucketColumns)}
    FROM (
      SELECT name, extract(epoch FROM completed_on - started_on)::float8 AS d
      FROM ${sql.table(`${schema}.job`)}
      WHERE state IN ('completed', 'failed') AND started_on IS NOT NULL AND completed_on IS NOT NULL
    ) j GROUP BY name`.execute(db);
  const name = 'gpi_job_duration_seconds';
  const values: { metricName: string; labels: Labels; value: number }[] = [];
  for (const row of r.rows) {
    JOB_DURATION_BUCKETS.forEach((le, i) => {
      values.push({
        metricName: `${name}_bucket`,
        labels: { queue: row.queue, le: String(le) },
        value: Number(row[`b${i}`]),
      });
    });
    values.push({
      metricName: `${name}_bucket`,
      labels: { queue: row.queue, le: '+Inf' },
      value: Number(row.n),
    });
    values.push({ metricName: `${name}_sum`, labels: { queue: row.queue }, value: row.total });
    values.push({
      metricName: `${name}_count`,
      labels: { queue: row.queue },
      value: Number(row.n),
    });
  }
  const snapshot = {
    name,
    help: 'Run time of finished pg-boss jobs (completed or failed) still retained, by queue',
    type: 'histogram' as const,
    aggregator: 'sum' as const,
    values,
  };
  return { ...snapshot, get: async () => snapshot } as unknown as Metric;
}
