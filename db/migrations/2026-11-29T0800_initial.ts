import { type Kysely, sql } from 'kysely';

// Frozen: the schema as of the foundation issue. Never import application code here.

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    CREATE TABLE event_sources (
      id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      kind text NOT NULL CHECK (kind IN ('public', 'repo', 'org', 'user')),
      target text,
      mode text NOT NULL CHECK (mode IN ('live', 'fixture')),
      enabled boolean NOT NULL DEFAULT true,
      etag text,
      poll_interval_seconds integer NOT NULL DEFAULT 60,
      next_poll_at timestamptz NOT NULL DEFAULT now(),
      consecutive_failures integer NOT NULL DEFAULT 0,
      last_error text,
      last_polled_at timestamptz,
      recent_event_ids bigint[] NOT NULL DEFAULT '{}',
      created_at timestamptz NOT NULL DEFAULT now(),
      updated_at timestamptz NOT NULL DEFAULT now(),
      CONSTRAINT event_sources_target_shape CHECK ((kind = 'public') = (target IS NULL)),
      CONSTRAINT event_sources_unique UNIQUE NULLS NOT DISTINCT (kind, target, mode)
    )`.execute(db);
  // The tick's pre-filter: enabled sources of one mode whose next_poll_at has arrived.
  await sql`CREATE INDEX event_sources_due ON event_sources (mode, next_poll_at) WHERE enabled`.execute(
    db,
  );

  await sql`
    CREATE TABLE ingestion_runs (
      id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      source_id bigint NOT NULL REFERENCES event_sources (id) ON DELETE CASCADE,
      status text NOT NULL DEFAULT 'running'
        CHECK (status IN ('running', 'completed', 'not_modified', 'failed', 'interrupted')),
      started_at timestamptz NOT NULL DEFAULT now(),
      finished_at timestamptz,
      pages_fetched integer NOT NULL DEFAULT 0,
      events_seen integer NOT NULL DEFAULT 0,
      events_created integer NOT NULL DEFAULT 0,
      push_events_seen integer NOT NULL DEFAULT 0,
      actors_created integer NOT NULL DEFAULT 0,
      repositories_created integer NOT NULL DEFAULT 0,
      requests_spent integer NOT NULL DEFAULT 0,
      gap_detected boolean NOT NULL DEFAULT false,
      error text,
      job_id text,
      worker text
    )`.execute(db);
  await sql`CREATE INDEX ingestion_runs_source_started ON ingestion_runs (source_id, started_at DESC)`.execute(
    db,
  );
  await sql`CREATE INDEX ingestion_runs_running ON ingestion_runs (source_id) WHERE status = 'running'`.execute(
    db,
  );
  await sql`CREATE INDEX ingestion_runs_started ON ingestion_runs (started_at)`.execute(db);

  for (const [table, nameColumn] of [
    ['actors', 'login'],
    ['repositories', 'full_name'],
  ] as const) {
    await sql`
      CREATE TABLE ${sql.table(table)} (
        id bigint PRIMARY KEY,
        ${sql.ref(nameColumn)} text NOT NULL,
        enrichment_state text NOT NULL DEFAULT 'pending'
          CHECK (enrichment_state IN ('pending', 'enriched', 'failed', 'gone')),
        attempts integer NOT NULL DEFAULT 0,
        next_attempt_at timestamptz NOT NULL DEFAULT now(),
        claimed_until timestamptz,
        claimed_by text,
        enriched_at timestamptz,
        etag text,
        last_error text,
        first_seen_at timestamptz NOT NULL DEFAULT now(),
        updated_at timestamptz NOT NULL DEFAULT now()
      )`.execute(db);
    // Claim and reconcile: due pending rows, oldest first.
    await sql`
      CREATE INDEX ${sql.id(`${table}_pending`)} ON ${sql.table(table)} (next_attempt_at, first_seen_at)
      WHERE enrichment_state = 'pending'`.execute(db);
  }

  await sql`
    CREATE TABLE push_events (
      id bigint UNIQUE,
      actor_id bigint NOT NULL,
      repository_id bigint NOT NULL,
      push_id bigint,
      ref text NOT NULL,
      head text NOT NULL,
      before text NOT NULL,
      created_at timestamptz NOT NULL,
      payload jsonb NOT NULL,
      size integer,
      distinct_size integer,
      origin text NOT NULL DEFAULT 'poll' CHECK (origin IN ('poll', 'webhook')),
      source_id bigint REFERENCES event_sources (id) ON DELETE SET NULL,
      run_id bigint,
      ingested_at timestamptz NOT NULL DEFAULT now(),
      -- One push is one row whichever way it arrived (poll or webhook): ADR 0008.
      CONSTRAINT push_events_natural_key PRIMARY KEY (repository_id, ref, before, head)
    )`.execute(db);
  await sql`CREATE INDEX push_events_created_at ON push_events USING brin (created_at)`.execute(db);

  await sql`
    CREATE TABLE github_requests (
      id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      credential text NOT NULL,
      purpose text NOT NULL CHECK (purpose IN ('poll', 'enrich')),
      method text NOT NULL DEFAULT 'GET',
      path text NOT NULL,
      outcome text NOT NULL DEFAULT 'reserved'
        CHECK (outcome IN ('reserved', 'sent', 'completed', 'error', 'abandoned')),
      status integer,
      counted boolean,
      reserved_at timestamptz NOT NULL DEFAULT now(),
      sent_at timestamptz,
      finished_at timestamptz,
      duration_ms integer,
      rate_limit_limit integer,
      rate_limit_remaining integer,
      rate_limit_reset timestamptz,
      error text,
      job_id text,
      run_id bigint,
      entity_class text,
      entity_id bigint
    )`.execute(db);
  // Budget: requests reserved per credential and purpose in the last hour.
  await sql`CREATE INDEX github_requests_budget ON github_requests (credential, reserved_at, purpose)`.execute(
    db,
  );
  await sql`CREATE INDEX github_requests_open ON github_requests (reserved_at) WHERE outcome IN ('reserved', 'sent')`.execute(
    db,
  );

  await sql`
    CREATE TABLE github_rate_limits (
      credential text PRIMARY KEY,
      quota integer NOT NULL,
      remaining integer NOT NULL,
      reset_at timestamptz NOT NULL,
      blocked_until timestamptz,
      observed_at timestamptz NOT NULL DEFAULT now()
    )`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  for (const t of [
    'github_rate_limits',
    'github_requests',
    'push_events',
    'repositories',
    'actors',
    'ingestion_runs',
    'event_sources',
  ]) {
    await sql`DROP TABLE IF EXISTS ${sql.table(t)}`.execute(db);
  }
}
