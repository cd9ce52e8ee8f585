import type { ColumnType, Insertable, Selectable, Updateable } from 'kysely';
import type {
  BigId,
  CommitSource,
  CommitsState,
  EnrichmentState,
  EventIdClashKind,
  Generated,
  GithubMode,
  NullableTimestamp,
  ProfileJson,
  PushOrigin,
  RequestPurpose,
  RunStatus,
  SourceKind,
  Timestamp,
} from './columns.ts';
import type {
  ArchiveMirrorsTable,
  BackfillFilesTable,
  GapsTable,
  HourlyCoverageView,
} from './schema-archive.ts';
import type {
  GithubEndpointPaceTable,
  GithubRateLimitsTable,
  GithubRequestMinutesTable,
  GithubRequestsTable,
} from './schema-budget.ts';

/**
 * Kysely's view of the business schema (db/migrations). Keep in step with migrations;
 * each domain module owns its own table's interface here (the budget's in
 * schema-budget.ts, the archive's in schema-archive.ts; column types and enumerations in
 * columns.ts).
 */

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
   * 2026-12-01T1410): the second sets the source aside for a day.
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
  /** Events this run rejected (rejected_events) (migration 2026-11-30T1000). */
  events_rejected: Generated<number>;
  error: string | null;
  job_id: string | null;
  worker: string | null;
}

/**
 * Runs with their outcome per source and UTC hour of started_at (migration
 * 2026-12-02T0300): what the status surfaces sum for a source's last 24 hours. Written only
 * by the triggers on ingestion_runs; kept 2 days.
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
 * % 8) (migration 2026-12-02T0600): "pushes a point" on the status surfaces.
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

/**
 * One row a stored push, whichever month's partition of push_events holds it (migration
 * 2026-12-05T1100_push_events_by_month): the arbiter of "stored once" and of "one push per event id and era".
 */
export interface PushKeysTable {
  repository_id: BigId;
  /** push_key_digest(repository_id, ref, before, head). */
  digest: string;
  created_at: Timestamp;
  /** Unique with its era, event_id_era(created_at) (migration 2026-12-05T1430). */
  event_id: BigId | null;
}

export interface PushEventsTable {
  /**
   * GitHub event id; unique per era (push_keys' index push_events_event_id), NULL for a webhook-only
   * push and for the push that lost a dispute over its id (event_id_clashes says which).
   */
  id: BigId | null;
  /** NULL for a timeline-format archive push (its actor by login only, migration 2026-12-05T0310). */
  actor_id: BigId | null;
  repository_id: BigId;
  push_id: BigId | null;
  ref: string;
  head: string;
  before: string;
  created_at: Timestamp;
  /** What the columns do not hold of the event's payload; NULL when nothing (see payload_held). */
  payload: ColumnType<unknown | null, string | null, string | null>;
  /** Which payload keys the columns hold (bits: migration 2026-12-05T1100 PAYLOAD_HELD). */
  payload_held: Generated<number>;
  size: number | null;
  distinct_size: number | null;
  origin: Generated<PushOrigin>;
  source_id: BigId | null;
  run_id: BigId | null;
  ingested_at: Generated<Timestamp>;
  /** archive_mirrors.id the event id came from (archive pushes and ids filled from one). */
  mirror_id: number | null;
  // Commits (migration 2026-12-01T1000).
  /** How many commits the push has; NULL while unknown. */
  commit_count: number | null;
  commits_state: Generated<CommitsState>;
  commits_attempts: Generated<number>;
  /** When a pending push may be fetched; never NULL while pending (a CHECK says so). */
  commits_next_attempt_at: NullableTimestamp;
  commits_claimed_until: NullableTimestamp;
  commits_error: string | null;
  /** Set while a fetch attempt is open (migration 2026-12-01T1410); NULL once settled. */
  commits_fetch_started_at: NullableTimestamp;
  /** Fetches of this push alone that died mid-request: the second sets it aside (`failed`). */
  commits_deaths: Generated<number>;
  /**
   * Pushes the request in flight asks about (migration 2026-12-04T1030): 1 alone,
   * more for a GraphQL batch's query; NULL while none is in flight.
   */
  commits_fetch_group: number | null;
  /** Batch queries about this push (with others) that died mid-request: a suspect, asked alone. */
  commits_batch_deaths: Generated<number>;
  // The names the event carried (migration 2026-12-05T0200); NULL for a push stored earlier.
  actor_login: string | null;
  repo_name: string | null;
  org_id: BigId | null;
  org_login: string | null;
  /**
   * The push's commit list (migration 2026-12-05T1110; read it through push_commit_list or
   * the push_commits view): one character a position, `t`/`f` distinct or not, `?` unsaid,
   * `-` no commit there; NULL when no list is stored.
   */
  commit_flags: string | null;
  /** Position of the list's first entry; NULL when it is 0. */
  commit_first_position: number | null;
  /** The shas, 20 (or 32) bytes each, when all are lowercase hex of one length. */
  commit_shas: Buffer | null;
  /** The shas as given otherwise. */
  commit_sha_texts: string[] | null;
}

/** One commit of a repository; a mirror's text is rewritten by a better source's. */
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
  /** Where the row's text came from; NULL for a row written before 2026-12-04. */
  source: CommitSource | null;
}

/**
 * The commits of one push (keyed by push_events' natural key), position 0 = oldest: a view
 * of the list each push_events row holds; writes through it are for tests and hand edits.
 */
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

/** When the fetcher last served each repository (migration 2026-12-01T1010). */
export interface CommitFetchTurnsTable {
  repository_id: BigId;
  served_at: Timestamp;
}

/**
 * A background purpose told no while it waits for REST requests (migration
 * 2026-12-04T1020): kept until its next grant, so enrichment leaves commits their floor.
 */
export interface BudgetWaitsTable {
  purpose: Exclude<RequestPurpose, 'poll'>;
  since: Timestamp;
  refused_at: Timestamp;
}

/** One row per GitHub webhook delivery: the key that makes a redelivery a no-op. */
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
 * An event rejected instead of stored: one row per (source, event key), however
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

/** What shapes stored data, one configuration per database (platform/config/stored-settings.ts). */
export interface StoredSettingsTable {
  name: string;
  value: string;
  recorded_at: Generated<Date>;
  recorded_by: string;
  previous_value: string | null;
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

/** Two stored pushes contending for one event id: `kept` holds it; `other` too if reused. */
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
  push_keys: PushKeysTable;
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
