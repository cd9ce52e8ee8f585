import type {
  ColumnType,
  Insertable,
  Generated as KyselyGenerated,
  Selectable,
  Updateable,
} from 'kysely';

/**
 * Kysely's view of the business schema (db/migrations). Keep in step with migrations;
 * each domain module owns its own table's interface here.
 */

type Timestamp = ColumnType<Date, Date | string | undefined, Date | string>;
type NullableTimestamp = ColumnType<
  Date | null,
  Date | string | null | undefined,
  Date | string | null
>;
/**
 * bigint columns arrive from pg as strings. GitHub ids are 64-bit: keep them as decimal
 * strings (never Number()); our own identities (source, run, request ids) are small and
 * may be parsed to numbers.
 */
type BigId = ColumnType<string, number | string | bigint, number | string | bigint>;
/**
 * Kysely's Generated, but unwrapping a ColumnType: Kysely's own Generated<BigId> nests one
 * ColumnType in another, so selects return the wrapper type and `where('id', '=', 5)` fails
 * to typecheck. The tuple stops `boolean` from distributing.
 */
type Generated<S> = [S] extends [ColumnType<infer Sel, infer Ins, infer Upd>]
  ? ColumnType<Sel, Ins | undefined, Upd>
  : KyselyGenerated<S>;

export const SOURCE_KINDS = ['public', 'repo', 'org', 'user'] as const;
export type SourceKind = (typeof SOURCE_KINDS)[number];
export type GithubMode = 'live' | 'fixture';
export const RUN_STATUSES = [
  'running',
  'completed',
  'not_modified',
  'failed',
  'interrupted',
] as const;
export type RunStatus = (typeof RUN_STATUSES)[number];
export const ENRICHMENT_STATES = ['pending', 'enriched', 'failed', 'gone'] as const;
export type EnrichmentState = (typeof ENRICHMENT_STATES)[number];
/**
 * Every enumeration below is one list, and the type is derived from it: a status page, a
 * metric or a chart that walks purposes, states or origins walks the list (or a
 * Record<…> keyed by the type, which the compiler holds complete), never its own copy.
 */
export const REQUEST_PURPOSES = ['poll', 'enrich', 'commits'] as const;
export type RequestPurpose = (typeof REQUEST_PURPOSES)[number];
export type RequestOutcome = 'reserved' | 'sent' | 'completed' | 'error' | 'abandoned';
/** How a push first arrived: polled, delivered by webhook, or read from a GH Archive file. */
export const PUSH_ORIGINS = ['poll', 'webhook', 'archive'] as const;
export type PushOrigin = (typeof PUSH_ORIGINS)[number];
export const GAP_STATES = ['open', 'filled', 'unavailable'] as const;
export type GapState = (typeof GAP_STATES)[number];
/**
 * 'missing': the mirror has no such hour (404/410). 'open': read while the mirror said the
 * hour was still open (ADR 0185): its lines are stored, and it is read again until final.
 */
export const BACKFILL_FILE_STATES = ['running', 'completed', 'failed', 'missing', 'open'] as const;
export type BackfillFileState = (typeof BACKFILL_FILE_STATES)[number];
/**
 * What is known of a push's commits (ADR 0070): pending (a targeted push waiting for the
 * fetcher), complete / partial (stored, all or some), none (deleted ref or tag: no commits),
 * skipped (nobody targets it), gone (GitHub no longer has them), failed (gave up),
 * unverified (stored as a mirror gave them, not yet proven by GitHub: ADR 0184).
 */
export const COMMITS_STATES = [
  'pending',
  'complete',
  'partial',
  'none',
  'skipped',
  'gone',
  'failed',
  'unverified',
] as const;
export type CommitsState = (typeof COMMITS_STATES)[number];
/**
 * Where a commit row's text came from (ADR 0184): GitHub's own answer (compare, GraphQL, a
 * polled event), a webhook delivery, an archive vouched for (GH Archive's own hours before
 * 2025-10-08, a file named on the command line), or a mirror (any other archive).
 */
export const COMMIT_SOURCES = ['github', 'webhook', 'archive', 'mirror'] as const;
export type CommitSource = (typeof COMMIT_SOURCES)[number];
/**
 * Two pushes found claiming one event id (ADR 0122): `reused` (different eras: GitHub reused
 * the id, both keep it) or `disputed` (one era: one keeps it, the other is stored without).
 */
export const EVENT_ID_CLASH_KINDS = ['reused', 'disputed'] as const;
export type EventIdClashKind = (typeof EVENT_ID_CLASH_KINDS)[number];

export interface EventSourcesTable {
  id: Generated<BigId>;
  kind: SourceKind;
  target: string | null;
  mode: GithubMode;
  enabled: Generated<boolean>;
  etag: string | null;
  poll_interval_seconds: Generated<number>;
  next_poll_at: Generated<Timestamp>;
  consecutive_failures: Generated<number>;
  last_error: string | null;
  last_polled_at: NullableTimestamp;
  recent_event_ids: ColumnType<string[], string[] | undefined, string[]>;
  /**
   * The created_at of each recent_event_ids entry, same order (migration 2026-12-01T1400):
   * an id is matched only within its era. NULL (or missing) for a ring written before.
   */
  recent_event_at: ColumnType<(Date | null)[], (Date | null)[] | undefined, (Date | null)[]>;
  /** Expected quota-counted requests per poll: a weighted mean of recent polls (0 = all 304s). */
  poll_cost: Generated<number>;
  /** Conditional answers poll_cost learned from (0: it is the prior; migration 2026-12-01T1520). */
  poll_cost_samples: Generated<number>;
  /** Whether pushes this source targets get their commits (migration 2026-12-01T1000; no default). */
  commits_enabled: boolean;
  /**
   * Polls that died (run found `interrupted`) since the last completed one (migration
   * 2026-12-01T1410, ADR 0120): the second sets the source aside for a day.
   */
  poll_deaths: Generated<number>;
  created_at: Generated<Timestamp>;
  updated_at: Generated<Timestamp>;
}

export interface IngestionRunsTable {
  id: Generated<BigId>;
  source_id: BigId;
  status: Generated<RunStatus>;
  started_at: Generated<Timestamp>;
  finished_at: NullableTimestamp;
  pages_fetched: Generated<number>;
  events_seen: Generated<number>;
  events_created: Generated<number>;
  push_events_seen: Generated<number>;
  actors_created: Generated<number>;
  repositories_created: Generated<number>;
  requests_spent: Generated<number>;
  gap_detected: Generated<boolean>;
  /** Events set aside in rejected_events by this run (migration 2026-11-30T1000). */
  events_rejected: Generated<number>;
  error: string | null;
  job_id: string | null;
  worker: string | null;
}

/**
 * Runs with their outcome per source and UTC hour of started_at (migration 2026-12-02T0300,
 * ADR 0150): what the status surfaces sum for a source's last 24 hours. Written only by the
 * triggers on ingestion_runs; kept 2 days.
 */
export interface IngestionRunHoursTable {
  source_id: BigId;
  hour: Timestamp;
  runs: number;
  events: BigId;
  rejected: BigId;
  gaps: number;
}

/**
 * Pushes whose commits a GraphQL batch settled, per UTC minute, in 8 shards (repository_id
 * % 8) (migration 2026-12-02T0600, ADR 0171): "pushes a point" on the status surfaces.
 * Written in the push's settling transaction; kept 2 hours.
 */
export interface CommitsGraphqlMinutesTable {
  minute: Timestamp;
  shard: number;
  pushes: Generated<number>;
}

/** The same over every source by outcome, in 16 shards (source_id % 16) a row an hour. */
export interface IngestionRunTotalsTable {
  hour: Timestamp;
  shard: number;
  status: RunStatus;
  runs: number;
  gaps: number;
}

interface EntityStateColumns {
  enrichment_state: Generated<EnrichmentState>;
  attempts: Generated<number>;
  next_attempt_at: Generated<Timestamp>;
  claimed_until: NullableTimestamp;
  claimed_by: string | null;
  enriched_at: NullableTimestamp;
  etag: string | null;
  last_error: string | null;
  first_seen_at: Generated<Timestamp>;
  updated_at: Generated<Timestamp>;
}

/** The raw GitHub answer, kept whole beside the columns pulled out of it. */
type ProfileJson = ColumnType<
  Record<string, unknown> | null,
  string | null | undefined,
  string | null
>;

export interface ActorsTable extends EntityStateColumns {
  id: BigId;
  login: string;
  // Profile (enrichment, migration 2026-11-29T0910): NULL until first enriched.
  name: string | null;
  company: string | null;
  blog: string | null;
  location: string | null;
  bio: string | null;
  type: string | null;
  public_repos: number | null;
  followers: number | null;
  following: number | null;
  github_created_at: NullableTimestamp;
  profile: ProfileJson;
}

export interface RepositoriesTable extends EntityStateColumns {
  id: BigId;
  full_name: string;
  // Profile (enrichment, migration 2026-11-29T0910): NULL until first enriched.
  description: string | null;
  language: string | null;
  stargazers: number | null;
  forks: number | null;
  default_branch: string | null;
  fork: boolean | null;
  archived: boolean | null;
  license: string | null;
  topics: string[] | null;
  pushed_at: NullableTimestamp;
  github_created_at: NullableTimestamp;
  profile: ProfileJson;
}

/**
 * How an enrichment attempt's row ends ('interrupted': its request never reached GitHub, its
 * lease was lost, or its process died). Not the runner's EnrichOutcome
 * (src/enrichment/runner.ts), which says what one call did: 'idle' and 'budget_exhausted'
 * are among its outcomes, 'interrupted' is not.
 */
export type EnrichmentAttemptOutcome =
  | 'enriched'
  | 'not_modified'
  | 'gone'
  | 'retry'
  | 'failed'
  | 'rate_limited'
  | 'interrupted';

/** One row per enrichment attempt (a request sent or about to be); outcome NULL while in flight. */
export interface EnrichmentAttemptsTable {
  id: Generated<BigId>;
  class: 'actor' | 'repository';
  entity_id: BigId;
  attempt: number;
  started_at: Generated<Timestamp>;
  finished_at: NullableTimestamp;
  outcome: EnrichmentAttemptOutcome | null;
  http_status: number | null;
  detail: string | null;
  request_id: BigId | null;
  job_id: string | null;
  worker: string | null;
}

export interface PushEventsTable {
  /**
   * GitHub event id; unique per era (index push_events_event_id), NULL for a webhook-only
   * push and for the push that lost a dispute over its id (event_id_clashes says which).
   */
  id: BigId | null;
  actor_id: BigId;
  repository_id: BigId;
  push_id: BigId | null;
  ref: string;
  head: string;
  before: string;
  created_at: Timestamp;
  payload: ColumnType<unknown, string, string>;
  size: number | null;
  distinct_size: number | null;
  origin: Generated<PushOrigin>;
  source_id: BigId | null;
  run_id: BigId | null;
  ingested_at: Generated<Timestamp>;
  /** archive_mirrors.id the event id came from (archive pushes and ids filled from one). */
  mirror_id: number | null;
  // Commits (migration 2026-12-01T1000, ADR 0070).
  /** How many commits the push has; NULL while unknown. */
  commit_count: number | null;
  commits_state: Generated<CommitsState>;
  commits_attempts: Generated<number>;
  /** When a pending push may be fetched; never NULL while pending (a CHECK says so). */
  commits_next_attempt_at: NullableTimestamp;
  commits_claimed_until: NullableTimestamp;
  commits_error: string | null;
  /** Set while a fetch attempt is open (migration 2026-12-01T1410, ADR 0120); NULL once settled. */
  commits_fetch_started_at: NullableTimestamp;
  /** Fetches of this push alone that died mid-request: the second sets it aside (`failed`). */
  commits_deaths: Generated<number>;
  /**
   * Pushes the request in flight asks about (migration 2026-12-04T1030, ADR 0182): 1 alone,
   * more for a GraphQL batch's query; NULL while none is in flight.
   */
  commits_fetch_group: number | null;
  /** Batch queries about this push (with others) that died mid-request: a suspect, asked alone. */
  commits_batch_deaths: Generated<number>;
}

/** One commit of a repository; a mirror's text is rewritten by a better source's (ADR 0184). */
export interface CommitsTable {
  repository_id: BigId;
  sha: string;
  author_name: string | null;
  /** Per COMMIT_EMAILS: 'sha256:<hex>' (hash), as given (keep) or NULL (drop). */
  author_email: string | null;
  author_id: BigId | null;
  author_login: string | null;
  committer_name: string | null;
  committer_email: string | null;
  committer_id: BigId | null;
  committed_at: NullableTimestamp;
  message: string | null;
  authored_at: NullableTimestamp;
  parents: string[] | null;
  first_seen_at: Generated<Timestamp>;
  /** Where the row's text came from (ADR 0184); NULL for a row written before 2026-12-04. */
  source: CommitSource | null;
}

/** The commits of one push (keyed by push_events' natural key), position 0 = oldest. */
export interface PushCommitsTable {
  repository_id: BigId;
  ref: string;
  before: string;
  head: string;
  position: number;
  sha: string;
  /** NULL when the source does not say. */
  distinct: boolean | null;
}

/** When the fetcher last served each repository (migration 2026-12-01T1010, ADR 0071). */
export interface CommitFetchTurnsTable {
  repository_id: BigId;
  served_at: Timestamp;
}

/**
 * A background purpose told no while it waits for REST requests (migration 2026-12-04T1020,
 * ADR 0181): kept until its next grant, so enrichment leaves commits their floor.
 */
export interface BudgetWaitsTable {
  purpose: Exclude<RequestPurpose, 'poll'>;
  since: Timestamp;
  refused_at: Timestamp;
}

export interface GithubRequestsTable {
  id: Generated<BigId>;
  credential: string;
  purpose: RequestPurpose;
  method: Generated<string>;
  path: string;
  outcome: Generated<RequestOutcome>;
  status: number | null;
  counted: boolean | null;
  reserved_at: Generated<Timestamp>;
  sent_at: NullableTimestamp;
  finished_at: NullableTimestamp;
  duration_ms: number | null;
  rate_limit_limit: number | null;
  rate_limit_remaining: number | null;
  rate_limit_reset: NullableTimestamp;
  error: string | null;
  job_id: string | null;
  run_id: BigId | null;
  entity_class: string | null;
  entity_id: BigId | null;
  /**
   * GraphQL points this row spends (migration 2026-12-02T0100, ADR 0114): the estimate when
   * reserved, the answer's rateLimit.cost once settled. NULL is 1: every REST row.
   */
  points: number | null;
}

export interface GithubRateLimitsTable {
  credential: string;
  quota: number;
  remaining: number;
  reset_at: Timestamp;
  blocked_until: NullableTimestamp;
  /** Why blocked_until is set: a 403/429 from GitHub, or a 401 (the auth ladder). */
  block_reason: BlockReason | null;
  /** 401s in a row; the first answer that is not a 401 resets it. */
  auth_failures: Generated<number>;
  /** When the current run of 401s began (null when auth_failures is 0). */
  auth_failed_since: NullableTimestamp;
  /** What GitHub said with the latest 401 (bounded, never a token). */
  auth_error: string | null;
  observed_at: Generated<Timestamp>;
}

/** When a credential may next send to an endpoint (route template): GitHub's secondary limit. */
export interface GithubEndpointPaceTable {
  credential: string;
  endpoint: string;
  next_at: Timestamp;
}

/**
 * The ledger's spending rows (SPENDS_QUOTA) reserved in one UTC minute, per purpose: what the
 * budget window sums (ADR 0083). Written only by the triggers on github_requests; kept 2 h.
 */
export interface GithubRequestMinutesTable {
  credential: string;
  minute: Timestamp;
  poll: Generated<number>;
  enrich: Generated<number>;
  commits: Generated<number>;
}

export const BLOCK_REASONS = ['rate_limit', 'auth'] as const;
export type BlockReason = (typeof BLOCK_REASONS)[number];

/** One row per GitHub webhook delivery (ADR 0008): the key that makes a redelivery a no-op. */
export interface WebhookDeliveriesTable {
  delivery_id: string;
  event: string;
  action: string | null;
  /** 'push:created' | 'push:known' | 'ping' | 'ignored:<event>' | 'rejected:<reason>' */
  routing: string;
  payload_sha256: string;
  hook_id: BigId | null;
  repository_id: BigId | null;
  repository_full_name: string | null;
  received_at: Generated<Timestamp>;
  /** Why a 'rejected:<reason>' delivery was not stored (migration 2026-11-30T1000). */
  detail: string | null;
  redeliveries: Generated<number>;
  /** Redeliveries whose body hash differed from the first delivery's. */
  redelivery_mismatches: Generated<number>;
  last_redelivered_at: NullableTimestamp;
}

/**
 * An event set aside instead of stored (ADR 0020): one row per (source, event key), however
 * often it is read again (seen_count, last_seen_at). source_id / run_id are NULL for events
 * read outside a source's run.
 */
export interface RejectedEventsTable {
  id: Generated<BigId>;
  source_id: BigId | null;
  run_id: BigId | null;
  last_run_id: BigId | null;
  /** The event id as given (text; NULL when it had none). */
  event_id: string | null;
  /** The dedupe key: the canonical id, or 'sha256:<hex>' of the event. */
  event_key: string;
  event_type: string | null;
  reason: string;
  message: string;
  raw: ColumnType<unknown, string, string>;
  /** false: raw is a sanitised copy (the event held what jsonb cannot). */
  raw_exact: boolean;
  first_seen_at: Generated<Timestamp>;
  last_seen_at: Generated<Timestamp>;
  seen_count: Generated<number>;
}

/** A window a run could not read (ADR 0004) and how filling it from the archive went (ADR 0041). */
export interface GapsTable {
  id: Generated<BigId>;
  source_id: BigId;
  run_id: BigId | null;
  from_at: Timestamp;
  to_at: Timestamp;
  state: Generated<GapState>;
  events_recovered: Generated<number>;
  filled_at: NullableTimestamp;
  attempts: Generated<number>;
  last_error: string | null;
  next_attempt_at: Generated<Timestamp>;
  created_at: Generated<Timestamp>;
  updated_at: Generated<Timestamp>;
  /** Set while a fill attempt is open; found set under the gap's lock: that fill died. */
  fill_started_at: NullableTimestamp;
  /** Fill attempts whose process died mid-fill; the second makes the gap unavailable. */
  fill_deaths: Generated<number>;
  /** The archive hour the open attempt is reading (or last read). */
  fill_hour: string | null;
}

/** The checkpoint of one file import (bin/backfill or a gap fill): resume point and counters. */
export interface BackfillFilesTable {
  id: Generated<BigId>;
  file: string;
  scope: string;
  source_id: BigId | null;
  gap_id: BigId | null;
  state: Generated<BackfillFileState>;
  lines_done: Generated<BigId>;
  events_seen: Generated<BigId>;
  pushes_seen: Generated<BigId>;
  pushes_kept: Generated<BigId>;
  pushes_created: Generated<BigId>;
  malformed: Generated<BigId>;
  bytes: BigId | null;
  attempts: Generated<number>;
  error: string | null;
  worker: string | null;
  started_at: Generated<Timestamp>;
  updated_at: Generated<Timestamp>;
  finished_at: NullableTimestamp;
  /** Imports of this file whose process died mid-file; after two it is not retried unforced. */
  deaths: Generated<number>;
  /** The mirror (GHARCHIVE_URL entry) an archive hour was read from; '' before mirrors. */
  mirror: Generated<string>;
  /** The archive hour read (NULL for a local file). */
  hour: NullableTimestamp;
  /** The created_at range of the pushes this import writes: its hours are open until it completes. */
  writes_from: NullableTimestamp;
  writes_to: NullableTimestamp;
}

/** View hourly_coverage (and hourly_coverage_between(since, until)): one row per UTC hour. */
export interface HourlyCoverageView {
  hour: Timestamp;
  pushes: BigId;
  poll: BigId;
  webhook: BigId;
  archive: BigId;
  gaps_open: BigId;
  mirrors_read: BigId;
}

/** What shapes stored data, one configuration per database (ADR 0125, src/platform/config/stored-settings.ts). */
export interface StoredSettingsTable {
  name: string;
  value: string;
  recorded_at: Generated<Date>;
  recorded_by: string;
  previous_value: string | null;
}

/** GHARCHIVE_URL entries pushes were read from ('' = a local file), migration 2026-12-01T1400. */
export interface ArchiveMirrorsTable {
  id: Generated<number>;
  url: string;
  first_seen_at: Generated<Timestamp>;
}

/** One side of an event id clash: the push, where it came from. */
interface ClashSide {
  repository_id: BigId;
  ref: string;
  before: string;
  head: string;
  created_at: Timestamp;
  origin: PushOrigin;
  mirror: string | null;
}
type Side<S extends 'kept' | 'other'> = { [K in keyof ClashSide as `${S}_${K}`]: ClashSide[K] };

/** Two stored pushes claiming one event id (ADR 0122): `kept` holds it; `other` too if reused. */
export type EventIdClashesTable = Side<'kept'> &
  Side<'other'> & {
    id: Generated<BigId>;
    event_id: BigId;
    kind: EventIdClashKind;
    /** md5 of both natural keys in key order: a pair is recorded once. */
    pair: string;
    detected_at: Generated<Timestamp>;
  };

export interface Database {
  stored_settings: StoredSettingsTable;
  archive_mirrors: ArchiveMirrorsTable;
  event_id_clashes: EventIdClashesTable;
  gaps: GapsTable;
  backfill_files: BackfillFilesTable;
  hourly_coverage: HourlyCoverageView;
  event_sources: EventSourcesTable;
  ingestion_runs: IngestionRunsTable;
  ingestion_run_hours: IngestionRunHoursTable;
  ingestion_run_totals: IngestionRunTotalsTable;
  actors: ActorsTable;
  repositories: RepositoriesTable;
  push_events: PushEventsTable;
  commits: CommitsTable;
  push_commits: PushCommitsTable;
  commit_fetch_turns: CommitFetchTurnsTable;
  commits_graphql_minutes: CommitsGraphqlMinutesTable;
  github_requests: GithubRequestsTable;
  budget_waits: BudgetWaitsTable;
  github_rate_limits: GithubRateLimitsTable;
  github_endpoint_pace: GithubEndpointPaceTable;
  github_request_minutes: GithubRequestMinutesTable;
  enrichment_attempts: EnrichmentAttemptsTable;
  webhook_deliveries: WebhookDeliveriesTable;
  rejected_events: RejectedEventsTable;
}

export type EventSource = Selectable<EventSourcesTable>;
export type NewEventSource = Insertable<EventSourcesTable>;
export type EventSourceUpdate = Updateable<EventSourcesTable>;
export type IngestionRun = Selectable<IngestionRunsTable>;
export type Actor = Selectable<ActorsTable>;
export type Repository = Selectable<RepositoriesTable>;
export type EnrichmentAttempt = Selectable<EnrichmentAttemptsTable>;
export type PushEvent = Selectable<PushEventsTable>;
export type Commit = Selectable<CommitsTable>;
export type PushCommit = Selectable<PushCommitsTable>;
export type GithubRequest = Selectable<GithubRequestsTable>;
export type WebhookDelivery = Selectable<WebhookDeliveriesTable>;
export type Gap = Selectable<GapsTable>;
export type BackfillFile = Selectable<BackfillFilesTable>;
export type RejectedEventRow = Selectable<RejectedEventsTable>;
