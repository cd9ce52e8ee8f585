import { sql } from 'kysely';
import type { Db } from '../db/pool.ts';
import type { GithubMode, RunStatus, SourceKind } from '../db/schema.ts';

/** One source as an operator sees it: where it is, how its last run went, when it polls next. */
export interface SourceStatus {
  id: number;
  kind: SourceKind;
  target: string | null;
  mode: GithubMode;
  enabled: boolean;
  pollIntervalSeconds: number;
  nextPollAt: Date;
  consecutiveFailures: number;
  lastError: string | null;
  lastRun: {
    id: number;
    status: RunStatus;
    startedAt: Date;
    finishedAt: Date | null;
    eventsCreated: number;
    error: string | null;
  } | null;
  runsLast24h: number;
  eventsCreatedLast24h: number;
  /** Events set aside by this source's runs in the last 24 hours. */
  rejectedLast24h: number;
  gapsLast24h: number;
}

interface SourceRow {
  id: string;
  kind: SourceKind;
  target: string | null;
  mode: GithubMode;
  enabled: boolean;
  poll_interval_seconds: number;
  next_poll_at: Date;
  consecutive_failures: number;
  last_error: string | null;
  run_id: string | null;
  run_status: RunStatus | null;
  run_started_at: Date | null;
  run_finished_at: Date | null;
  run_events_created: number | null;
  run_error: string | null;
  runs_24h: string;
  events_24h: string;
  rejected_24h: string;
  gaps_24h: string;
}

/**
 * Every source with its latest run and the last 24 hours' runs, events and gaps. Both
 * lateral subqueries walk ingestion_runs_source_started (source_id, started_at DESC).
 */
export async function sourceStatuses(db: Db, now: Date): Promise<SourceStatus[]> {
  const since = new Date(now.getTime() - 86_400_000);
  const r = await sql<SourceRow>`
    SELECT s.id, s.kind, s.target, s.mode, s.enabled, s.poll_interval_seconds, s.next_poll_at,
           s.consecutive_failures, s.last_error,
           last.id AS run_id, last.status AS run_status, last.started_at AS run_started_at,
           last.finished_at AS run_finished_at, last.events_created AS run_events_created,
           last.error AS run_error,
           day.runs AS runs_24h, day.events AS events_24h, day.rejected AS rejected_24h,
           day.gaps AS gaps_24h
    FROM event_sources s
    LEFT JOIN LATERAL (
      SELECT id, status, started_at, finished_at, events_created, error
      FROM ingestion_runs WHERE source_id = s.id ORDER BY started_at DESC LIMIT 1
    ) last ON true
    CROSS JOIN LATERAL (
      SELECT count(*) AS runs, coalesce(sum(events_created), 0) AS events,
             coalesce(sum(events_rejected), 0) AS rejected,
             count(*) FILTER (WHERE gap_detected) AS gaps
      FROM ingestion_runs WHERE source_id = s.id AND started_at > ${since}
    ) day
    ORDER BY s.id`.execute(db);
  return r.rows.map((row) => ({
    id: Number(row.id),
    kind: row.kind,
    target: row.target,
    mode: row.mode,
    enabled: row.enabled,
    pollIntervalSeconds: row.poll_interval_seconds,
    nextPollAt: row.next_poll_at,
    consecutiveFailures: row.consecutive_failures,
    lastError: row.last_error,
    lastRun:
      row.run_id === null
        ? null
        : {
            id: Number(row.run_id),
            status: row.run_status!,
            startedAt: row.run_started_at!,
            finishedAt: row.run_finished_at,
            eventsCreated: row.run_events_created ?? 0,
            error: row.run_error,
          },
    runsLast24h: Number(row.runs_24h),
    eventsCreatedLast24h: Number(row.events_24h),
    rejectedLast24h: Number(row.rejected_24h),
    gapsLast24h: Number(row.gaps_24h),
  }));
}

/** "repo octocat/Hello-World", "public". */
export function sourceLabel(s: Pick<SourceStatus, 'kind' | 'target'>): string {
  return s.target === null ? s.kind : `${s.kind} ${s.target}`;
}
