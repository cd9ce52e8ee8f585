import { type Kysely, sql } from 'kysely';

// Frozen: poison is set aside, not fatal (issue 10, ADR 0020). Never import application code here.

export async function up(db: Kysely<unknown>): Promise<void> {
  // Events that could not be mapped or stored, set aside once per (source, event). The key
  // is the event id as GitHub gave it when it is a valid id, else a hash of the event
  // ('sha256:<hex>'): bounded either way, so the unique index can hold every key.
  // source_id / run_id are NULL for events read outside a source's run (an archive file):
  // the unique index folds NULL into 0 rather than using NULLS NOT DISTINCT, so the same
  // rule holds on every Postgres the project runs on.
  await sql`
    CREATE TABLE rejected_events (
      id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      source_id bigint REFERENCES event_sources (id) ON DELETE CASCADE,
      run_id bigint,
      last_run_id bigint,
      event_id text,
      event_key text NOT NULL CHECK (length(event_key) <= 100),
      event_type text,
      reason text NOT NULL CHECK (reason ~ '^[a-z_]{1,40}$'),
      message text NOT NULL,
      raw jsonb NOT NULL,
      raw_exact boolean NOT NULL,
      first_seen_at timestamptz NOT NULL DEFAULT now(),
      last_seen_at timestamptz NOT NULL DEFAULT now(),
      seen_count integer NOT NULL DEFAULT 1
    )`.execute(db);
  await sql`
    CREATE UNIQUE INDEX rejected_events_once ON rejected_events (coalesce(source_id, 0), event_key)`.execute(
    db,
  );
  await sql`CREATE INDEX rejected_events_first_seen ON rejected_events (first_seen_at)`.execute(db);

  await sql`ALTER TABLE ingestion_runs ADD COLUMN events_rejected integer NOT NULL DEFAULT 0`.execute(
    db,
  );

  // A signed delivery that cannot be stored is recorded as routing 'rejected:<reason>' with
  // the reason's message in detail; redeliveries of a recorded delivery are counted, and
  // those whose body differs from the first (payload_sha256) counted apart.
  await sql`
    ALTER TABLE webhook_deliveries
      ADD COLUMN detail text,
      ADD COLUMN redeliveries integer NOT NULL DEFAULT 0,
      ADD COLUMN redelivery_mismatches integer NOT NULL DEFAULT 0,
      ADD COLUMN last_redelivered_at timestamptz`.execute(db);

  // gpi_events_rejected_total counts rows; deleting old ones must not make it go down
  // (the same tally as migration 2026-11-29T0920 keeps for the pruned ledgers).
  await sql
    .raw(`
      CREATE FUNCTION tally_deleted_rejected_events() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        INSERT INTO metric_tallies (metric, labels, n)
        SELECT 'gpi_events_rejected_total', jsonb_build_object('reason', reason), count(*)
        FROM gone GROUP BY reason
        ON CONFLICT (metric, labels) DO UPDATE SET n = metric_tallies.n + excluded.n;
        RETURN NULL;
      END $$`)
    .execute(db);
  await sql
    .raw(`
      CREATE TRIGGER tally_deleted_rejected_events AFTER DELETE ON rejected_events
      REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION tally_deleted_rejected_events()`)
    .execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP TABLE IF EXISTS rejected_events`.execute(db);
  await sql`DROP FUNCTION IF EXISTS tally_deleted_rejected_events()`.execute(db);
  await sql`ALTER TABLE ingestion_runs DROP COLUMN IF EXISTS events_rejected`.execute(db);
  await sql`
    ALTER TABLE webhook_deliveries
      DROP COLUMN IF EXISTS detail,
      DROP COLUMN IF EXISTS redeliveries,
      DROP COLUMN IF EXISTS redelivery_mismatches,
      DROP COLUMN IF EXISTS last_redelivered_at`.execute(db);
}
