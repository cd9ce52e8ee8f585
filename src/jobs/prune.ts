import { sql } from 'kysely';
import type { Db } from '../platform/db/pool.ts';

/**
 * Retention for the three append-only ledgers and the rejected events (RETENTION_DAYS, default
 * 30). Rows go in
 * batches, each its own short statement, so pruning a large backlog never holds a long
 * transaction or a lock a poll or a cycle would queue behind. Rows still in flight (a
 * `running` run, an open reservation, an unfinished attempt) are never pruned, whatever
 * their age: the reconciler settles them first. A rejected event goes when it has not been
 * seen for RETENTION_DAYS (one still being served stays, its seen_count moving; a
 * trigger keeps gpi_events_rejected_total from going down, migration 2026-11-30T1000).
 *
 * Each batch walks the primary key from the oldest id, which is also the oldest row, so it
 * stops after `batchSize` matches without scanning the table.
 *
 * The budget's per-minute counters (github_request_minutes, ADR 0083) keep 2 hours whatever
 * RETENTION_DAYS says: a budget window is at most 1 h + 1 min long, so no reader needs an
 * older minute; so do the pushes GraphQL settled per minute (commits_graphql_minutes, read
 * for the last hour). A ledger row deleted later than its minute changes no counter. The runs'
 * hourly rollups (ingestion_run_hours, ingestion_run_totals) keep 2 days the same way.
 */

/** How long the budget's per-minute counters are kept: twice the longest window, rounded up. */
export const MINUTE_COUNTERS_KEPT_MS = 2 * 3600_000;
/** How long the runs' hourly rollups are kept: twice the status window of 24 h. */
export const RUN_ROLLUPS_KEPT_MS = 48 * 3600_000;

export const PRUNE_BATCH_SIZE = 1000;

export const PRUNED_TABLES = [
  'ingestion_runs',
  'github_requests',
  'enrichment_attempts',
  'rejected_events',
] as const;
export type PrunedTable = (typeof PRUNED_TABLES)[number];

function batch(table: PrunedTable, cutoff: Date, limit: number) {
  switch (table) {
    case 'ingestion_runs':
      return sql`
        DELETE FROM ingestion_runs WHERE id IN (
          SELECT id FROM ingestion_runs
          WHERE started_at < ${cutoff} AND status <> 'running'
          ORDER BY id LIMIT ${limit})`;
    case 'github_requests':
      return sql`
        DELETE FROM github_requests WHERE id IN (
          SELECT id FROM github_requests
          WHERE reserved_at < ${cutoff} AND outcome NOT IN ('reserved', 'sent')
          ORDER BY id LIMIT ${limit})`;
    case 'enrichment_attempts':
      return sql`
        DELETE FROM enrichment_attempts WHERE id IN (
          SELECT id FROM enrichment_attempts
          WHERE started_at < ${cutoff} AND finished_at IS NOT NULL
          ORDER BY id LIMIT ${limit})`;
    case 'rejected_events':
      return sql`
        DELETE FROM rejected_events WHERE id IN (
          SELECT id FROM rejected_events
          WHERE last_seen_at < ${cutoff}
          ORDER BY id LIMIT ${limit})`;
  }
}

export interface PruneOptions {
  retentionDays: number;
  now?: Date;
  batchSize?: number;
  /** Checked between batches: a time-boxed job stops there and the next run carries on. */
  shouldStop?: () => boolean;
}

export interface PruneReport {
  cutoff: Date;
  deleted: Record<
    | PrunedTable
    | 'github_request_minutes'
    | 'commits_graphql_minutes'
    | 'ingestion_run_hours'
    | 'ingestion_run_totals',
    number
  >;
  /** False when shouldStop cut the pass short. */
  complete: boolean;
}

export async function pruneLedgers(db: Db, opts: PruneOptions): Promise<PruneReport> {
  const now = opts.now ?? new Date();
  const cutoff = new Date(now.getTime() - opts.retentionDays * 86_400_000);
  const limit = opts.batchSize ?? PRUNE_BATCH_SIZE;
  const deleted = {
    ingestion_runs: 0,
    github_requests: 0,
    enrichment_attempts: 0,
    rejected_events: 0,
    github_request_minutes: 0,
    commits_graphql_minutes: 0,
    ingestion_run_hours: 0,
    ingestion_run_totals: 0,
  };
  // First, in one short statement (a credential leaves 60 rows an hour), whatever the time box.
  const minutes = await sql`
    DELETE FROM github_request_minutes
    WHERE minute < ${new Date(now.getTime() - MINUTE_COUNTERS_KEPT_MS)}`.execute(db);
  deleted.github_request_minutes = Number(minutes.numAffectedRows ?? 0);
  const settled = await sql`
    DELETE FROM commits_graphql_minutes
    WHERE minute < ${new Date(now.getTime() - MINUTE_COUNTERS_KEPT_MS)}`.execute(db);
  deleted.commits_graphql_minutes = Number(settled.numAffectedRows ?? 0);
  // Then the rollups older than any status window (a source leaves 24 rows a day).
  const rollupsBefore = new Date(now.getTime() - RUN_ROLLUPS_KEPT_MS);
  for (const table of ['ingestion_run_hours', 'ingestion_run_totals'] as const) {
    const r = await sql`DELETE FROM ${sql.table(table)} WHERE hour < ${rollupsBefore}`.execute(db);
    deleted[table] = Number(r.numAffectedRows ?? 0);
  }
  for (const table of PRUNED_TABLES) {
    for (;;) {
      if (opts.shouldStop?.()) return { cutoff, deleted, complete: false };
      const r = await batch(table, cutoff, limit).execute(db);
      const n = Number(r.numAffectedRows ?? 0);
      deleted[table] += n;
      if (n < limit) break;
    }
  }
  return { cutoff, deleted, complete: true };
}
