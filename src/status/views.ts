import { sql } from 'kysely';
import type { Db } from '../platform/db/pool.ts';

/**
 * SQL views for people at a `psql` prompt (docs/schema.md "Views for psql"). They are not a
 * migration because queue_overview reads the pg-boss schema, whose name is configurable
 * (PGBOSS_SCHEMA) and which exists only once bin/setup has installed pg-boss; so setup
 * (re)creates all three after the queue install. Drop-and-create in one transaction:
 * CREATE OR REPLACE cannot remove or reorder a view's columns.
 */

export const VIEW_NAMES = ['ingest_overview', 'enrichment_backlog', 'queue_overview'] as const;

const ingestOverview = sql`
  CREATE VIEW ingest_overview AS
  SELECT s.id AS source_id,
         s.kind,
         s.target,
         s.mode,
         s.enabled,
         last.status AS last_status,
         last.started_at AS last_run_at,
         last.events_created AS last_events_created,
         s.next_poll_at,
         s.poll_interval_seconds,
         s.consecutive_failures,
         day.runs AS runs_24h,
         day.events AS events_24h,
         day.gaps AS gaps_24h,
         s.last_error,
         day.rejected AS rejected_24h
  FROM event_sources s
  LEFT JOIN LATERAL (
    SELECT status, started_at, events_created FROM ingestion_runs
    WHERE source_id = s.id ORDER BY started_at DESC LIMIT 1
  ) last ON true
  CROSS JOIN LATERAL (
    SELECT date_trunc('hour', now(), 'UTC') - interval '23 hours' AS since
  ) w
  -- The last 24 hours as the status page counts them (src/status/run-hours.ts): the current
  -- UTC hour and the 23 before it, from the hourly rollups plus the runs in flight.
  CROSS JOIN LATERAL (
    SELECT h.runs + l.runs AS runs, h.events + l.events AS events, h.gaps + l.gaps AS gaps,
           h.rejected + l.rejected AS rejected
    FROM (
      SELECT coalesce(sum(runs), 0) AS runs, coalesce(sum(events), 0) AS events,
             coalesce(sum(gaps), 0) AS gaps, coalesce(sum(rejected), 0) AS rejected
      FROM ingestion_run_hours WHERE source_id = s.id AND hour >= w.since
    ) h, (
      SELECT count(*) AS runs, coalesce(sum(events_created), 0) AS events,
             count(*) FILTER (WHERE gap_detected) AS gaps, coalesce(sum(events_rejected), 0) AS rejected
      FROM ingestion_runs WHERE source_id = s.id AND status = 'running' AND started_at >= w.since
    ) l
  ) day`;

const enrichmentBacklog = sql`
  CREATE VIEW enrichment_backlog AS
  SELECT class, state, count(*) AS entities,
         count(*) FILTER (WHERE state = 'pending' AND next_attempt_at <= now()
                            AND (claimed_until IS NULL OR claimed_until <= now())) AS due_now,
         count(*) FILTER (WHERE claimed_until > now()) AS claimed,
         min(next_attempt_at) FILTER (WHERE state = 'pending') AS next_attempt_at
  FROM (
    SELECT 'actor' AS class, enrichment_state AS state, next_attempt_at, claimed_until FROM actors
    UNION ALL
    SELECT 'repository', enrichment_state, next_attempt_at, claimed_until FROM repositories
  ) e
  GROUP BY class, state`;

function queueOverview(pgbossSchema: string) {
  return sql`
    CREATE VIEW queue_overview AS
    SELECT q.name AS queue,
           q.policy,
           count(j.id) FILTER (WHERE j.state = 'created') AS created,
           count(j.id) FILTER (WHERE j.state = 'retry') AS retry,
           count(j.id) FILTER (WHERE j.state = 'active') AS active,
           count(j.id) FILTER (WHERE j.state = 'completed') AS completed,
           count(j.id) FILTER (WHERE j.state = 'failed') AS failed,
           count(j.id) FILTER (WHERE j.state = 'cancelled') AS cancelled,
           now() - min(j.created_on) FILTER (WHERE j.state IN ('created', 'retry')
                                               AND j.start_after <= now()) AS oldest_waiting,
           max(j.completed_on) AS last_completed_at
    FROM ${sql.table(`${pgbossSchema}.queue`)} q
    LEFT JOIN ${sql.table(`${pgbossSchema}.job`)} j ON j.name = q.name
    GROUP BY q.name, q.policy`;
}

/** (Re)creates the three views. Idempotent; bin/setup calls it after installing pg-boss. */
export async function installViews(db: Db, pgbossSchema: string): Promise<void> {
  await db.transaction().execute(async (trx) => {
    for (const name of VIEW_NAMES) await sql`DROP VIEW IF EXISTS ${sql.table(name)}`.execute(trx);
    await ingestOverview.execute(trx);
    await enrichmentBacklog.execute(trx);
    await queueOverview(pgbossSchema).execute(trx);
  });
}
