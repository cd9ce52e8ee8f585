import { sql } from 'kysely';
import type { GithubMode, RunStatus, SourceKind } from '../platform/db/columns.ts';
import type { Db } from '../platform/db/pool.ts';
import { AppError } from '../platform/errors.ts';
import { runWindowStart, sourceWindowSql } from './run-hours.ts';

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
  /** Events rejected by this source's runs in the last 24 hours. */
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

/** How an operator groups sources at a glance. */
export const SOURCE_STATES = ['ok', 'new', 'failing', 'overdue', 'disabled'] as const;
export type SourceState = (typeof SOURCE_STATES)[number];
const KINDS: readonly SourceKind[] = ['public', 'repo', 'org', 'user'];

/** The most failing / most overdue, and the most recently polled: this many each. */
export const SOURCES_HIGHLIGHTED = 10;
export const SOURCES_PER_PAGE = 50;
export const SOURCES_PER_PAGE_MAX = 1000;

/** Which sources a report lists in full (the rest are counted): a page, maybe filtered. */
export interface SourceQuery {
  /** Sources a page (0: summaries only). */
  perPage: number;
  /** 1-based. */
  page: number;
  state: SourceState | null;
  kind: SourceKind | null;
}

export const DEFAULT_SOURCE_QUERY: SourceQuery = {
  perPage: SOURCES_PER_PAGE,
  page: 1,
  state: null,
  kind: null,
};

/** A bad `sources`, `page`, `state` or `kind` (web: 400; bin/status: exit 2). */
export class InvalidSourceQuery extends AppError {
  constructor(message: string) {
    super('INVALID_SOURCE_QUERY', message);
  }
}

function bounded(name: string, raw: string, min: number, max: number): number {
  const n = Number(raw);
  if (!/^\d{1,7}$/.test(raw) || n < min || n > max) {
    throw new InvalidSourceQuery(
      `${name} must be an integer from ${min} to ${max} (got "${raw.slice(0, 20)}")`,
    );
  }
  return n;
}

/** From `?sources=N&page=P&state=S&kind=K` or bin/status's flags of the same names. */
export function parseSourceQuery(get: (name: string) => string | null | undefined): SourceQuery {
  const q = { ...DEFAULT_SOURCE_QUERY };
  const perPage = get('sources');
  if (perPage != null) q.perPage = bounded('sources', perPage, 0, SOURCES_PER_PAGE_MAX);
  const page = get('page');
  if (page != null) q.page = bounded('page', page, 1, 1_000_000);
  const state = get('state');
  if (state != null) {
    if (!(SOURCE_STATES as readonly string[]).includes(state)) {
      throw new InvalidSourceQuery(
        `state must be one of ${SOURCE_STATES.join(', ')} (got "${state.slice(0, 20)}")`,
      );
    }
    q.state = state as SourceState;
  }
  const kind = get('kind');
  if (kind != null) {
    if (!(KINDS as readonly string[]).includes(kind)) {
      throw new InvalidSourceQuery(
        `kind must be one of ${KINDS.join(', ')} (got "${kind.slice(0, 20)}")`,
      );
    }
    q.kind = kind as SourceKind;
  }
  return q;
}

/** The sources at a glance: counts by state and kind, the worst and the latest in full. */
export interface SourceSummary {
  total: number;
  byState: Record<SourceState, number>;
  byKind: Record<SourceKind, number>;
  /** Enabled sources failing, most consecutive failures first. */
  mostFailing: SourceStatus[];
  /** Enabled sources not failing whose next poll is overdue, most overdue first. */
  mostOverdue: SourceStatus[];
  /** The most recently polled. */
  latest: SourceStatus[];
  /** A source is overdue when its next poll is more than this many seconds past. */
  overdueAfterSeconds: number;
}

export interface SourcePage {
  page: number;
  perPage: number;
  /** Sources matching state and kind. */
  total: number;
  pages: number;
  state: SourceState | null;
  kind: SourceKind | null;
}

/** A source's state, in SQL (parameters: the overdue cut-off). */
function stateSql(overdueBefore: Date) {
  return sql<SourceState>`CASE WHEN NOT s.enabled THEN 'disabled'
    WHEN s.consecutive_failures > 0 THEN 'failing'
    WHEN s.next_poll_at < ${overdueBefore} THEN 'overdue'
    WHEN s.last_polled_at IS NULL THEN 'new'
    ELSE 'ok' END`;
}

/**
 * The chosen sources (`chosen`: a query yielding event_sources rows and an `ord` column)
 * with their latest run (ingestion_runs_source_started, one row each) and the last 24
 * hours' runs, events and gaps (24 rollup rows each and the runs in flight: run-hours.ts),
 * for these rows only: a page, never the whole table, never every run.
 */
async function statusesOf(
  db: Db,
  now: Date,
  chosen: ReturnType<typeof sql>,
): Promise<SourceStatus[]> {
  const since = runWindowStart(now);
  const r = await sql<SourceRow>`
    SELECT s.id, s.kind, s.target, s.mode, s.enabled, s.poll_interval_seconds, s.next_poll_at,
           s.consecutive_failures, s.last_error,
           last.id AS run_id, last.status AS run_status, last.started_at AS run_started_at,
           last.finished_at AS run_finished_at, last.events_created AS run_events_created,
           last.error AS run_error,
           day.runs AS runs_24h, day.events AS events_24h, day.rejected AS rejected_24h,
           day.gaps AS gaps_24h
    FROM (${chosen}) s
    LEFT JOIN LATERAL (
      SELECT id, status, started_at, finished_at, events_created, error
      FROM ingestion_runs WHERE source_id = s.id ORDER BY started_at DESC LIMIT 1
    ) last ON true
    ${sourceWindowSql(since)}
    ORDER BY s.ord`.execute(db);
  return r.rows.map(toStatus);
}

function toStatus(row: SourceRow): SourceStatus {
  return {
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
  };
}

/** Counts by state and kind (one scan of event_sources), the worst and the latest. */
export async function sourceSummary(
  db: Db,
  now: Date,
  overdueAfterSeconds: number,
): Promise<SourceSummary> {
  const overdueBefore = new Date(now.getTime() - overdueAfterSeconds * 1000);
  const counts = await sql<{ state: SourceState; kind: SourceKind; n: string }>`
    SELECT ${stateSql(overdueBefore)} AS state, s.kind, count(*) AS n
    FROM event_sources s GROUP BY 1, 2`.execute(db);
  const byState = Object.fromEntries(SOURCE_STATES.map((k) => [k, 0])) as Record<
    SourceState,
    number
  >;
  const byKind = Object.fromEntries(KINDS.map((k) => [k, 0])) as Record<SourceKind, number>;
  let total = 0;
  for (const row of counts.rows) {
    const n = Number(row.n);
    byState[row.state] += n;
    byKind[row.kind] += n;
    total += n;
  }
  const mostFailing = await statusesOf(
    db,
    now,
    sql`SELECT s.*, row_number() OVER (ORDER BY s.consecutive_failures DESC, s.next_poll_at, s.id) AS ord
        FROM event_sources s WHERE s.enabled AND s.consecutive_failures > 0
        ORDER BY s.consecutive_failures DESC, s.next_poll_at, s.id LIMIT ${SOURCES_HIGHLIGHTED}`,
  );
  const mostOverdue = await statusesOf(
    db,
    now,
    sql`SELECT s.*, row_number() OVER (ORDER BY s.next_poll_at, s.id) AS ord
        FROM event_sources s
        WHERE s.enabled AND s.consecutive_failures = 0 AND s.next_poll_at < ${overdueBefore}
        ORDER BY s.next_poll_at, s.id LIMIT ${SOURCES_HIGHLIGHTED}`,
  );
  const latest = await statusesOf(
    db,
    now,
    sql`SELECT s.*, row_number() OVER (ORDER BY s.last_polled_at DESC, s.id) AS ord
        FROM event_sources s WHERE s.last_polled_at IS NOT NULL
        ORDER BY s.last_polled_at DESC, s.id LIMIT ${SOURCES_HIGHLIGHTED}`,
  );
  return { total, byState, byKind, mostFailing, mostOverdue, latest, overdueAfterSeconds };
}

/** One page of the sources matching the query's state and kind, in id order. */
export async function sourcePage(
  db: Db,
  now: Date,
  q: SourceQuery,
  overdueAfterSeconds: number,
): Promise<{ page: SourcePage; sources: SourceStatus[] }> {
  const overdueBefore = new Date(now.getTime() - overdueAfterSeconds * 1000);
  const where = sql`(${q.state}::text IS NULL OR ${stateSql(overdueBefore)} = ${q.state})
    AND (${q.kind}::text IS NULL OR s.kind = ${q.kind})`;
  const n = await sql<{ n: string }>`
    SELECT count(*) AS n FROM event_sources s WHERE ${where}`.execute(db);
  const total = Number(n.rows[0]!.n);
  const sources =
    q.perPage === 0
      ? []
      : await statusesOf(
          db,
          now,
          sql`SELECT s.*, s.id AS ord FROM event_sources s WHERE ${where}
              ORDER BY s.id LIMIT ${q.perPage} OFFSET ${(q.page - 1) * q.perPage}`,
        );
  return {
    page: {
      page: q.page,
      perPage: q.perPage,
      total,
      pages: q.perPage === 0 ? 0 : Math.ceil(total / q.perPage),
      state: q.state,
      kind: q.kind,
    },
    sources,
  };
}

/** "repo octocat/Hello-World", "public". */
export function sourceLabel(s: Pick<SourceStatus, 'kind' | 'target'>): string {
  return s.target === null ? s.kind : `${s.kind} ${s.target}`;
}
