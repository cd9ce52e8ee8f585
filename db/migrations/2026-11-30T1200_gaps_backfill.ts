import { type Kysely, sql } from 'kysely';

// Frozen: gap records and archive backfill (issue 12, ADRs 0040/0041). Never import
// application code here.

export async function up(db: Kysely<unknown>): Promise<void> {
  // A push can now first arrive from a GH Archive hour file. Every existing row is 'poll'
  // or 'webhook', a subset of the new rule, so the widened check is added NOT VALID:
  // validating it would scan the whole table under an exclusive lock for nothing.
  await sql`ALTER TABLE push_events DROP CONSTRAINT push_events_origin_check`.execute(db);
  await sql`
    ALTER TABLE push_events ADD CONSTRAINT push_events_origin_check
      CHECK (origin IN ('poll', 'webhook', 'archive')) NOT VALID`.execute(db);

  // One row per run that overflowed its feed's window (ADR 0004): events created between
  // from_at (the newest the source held before) and to_at (the oldest the run read) may be
  // missing. The background fill reads the archive's hours around the window and stores
  // the source's pushes in it; the row records how that went.
  await sql`
    CREATE TABLE gaps (
      id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      source_id bigint NOT NULL REFERENCES event_sources (id) ON DELETE CASCADE,
      -- Runs are pruned after RETENTION_DAYS; the gap outlives its run.
      run_id bigint UNIQUE REFERENCES ingestion_runs (id) ON DELETE SET NULL,
      from_at timestamptz NOT NULL,
      to_at timestamptz NOT NULL,
      state text NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'filled', 'unavailable')),
      events_recovered integer NOT NULL DEFAULT 0,
      filled_at timestamptz,
      attempts integer NOT NULL DEFAULT 0,
      last_error text,
      -- When the background fill may try again (archive hours unpublished, backoff).
      next_attempt_at timestamptz NOT NULL DEFAULT now(),
      created_at timestamptz NOT NULL DEFAULT now(),
      updated_at timestamptz NOT NULL DEFAULT now(),
      CONSTRAINT gaps_window CHECK (from_at <= to_at)
    )`.execute(db);
  // The fill's "anything due?" probe every tick: open gaps by when they may be tried.
  await sql`CREATE INDEX gaps_due ON gaps (next_attempt_at) WHERE state = 'open'`.execute(db);
  await sql`CREATE INDEX gaps_source ON gaps (source_id, created_at)`.execute(db);

  // The checkpoint of every file import (bin/backfill, the background fill): how many
  // lines are committed, advanced in the same transaction as the rows they produced, so
  // a killed import resumes after its last committed chunk and its counters count each
  // line once. One row per (file, scope): the same hour kept for two gaps is two imports.
  await sql`
    CREATE TABLE backfill_files (
      id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      -- 'YYYY-MM-DD-H' for an archive hour, else the absolute path of a local file.
      file text NOT NULL,
      -- What the import keeps: 'all', 'source:<id>' or 'gap:<id>'.
      scope text NOT NULL,
      source_id bigint REFERENCES event_sources (id) ON DELETE SET NULL,
      gap_id bigint REFERENCES gaps (id) ON DELETE CASCADE,
      state text NOT NULL DEFAULT 'running' CHECK (state IN ('running', 'completed', 'failed')),
      lines_done bigint NOT NULL DEFAULT 0,
      events_seen bigint NOT NULL DEFAULT 0,
      pushes_seen bigint NOT NULL DEFAULT 0,
      pushes_kept bigint NOT NULL DEFAULT 0,
      pushes_created bigint NOT NULL DEFAULT 0,
      malformed bigint NOT NULL DEFAULT 0,
      -- Size of the source when the checkpoint was written: a changed file starts over.
      bytes bigint,
      attempts integer NOT NULL DEFAULT 0,
      error text,
      worker text,
      started_at timestamptz NOT NULL DEFAULT now(),
      updated_at timestamptz NOT NULL DEFAULT now(),
      finished_at timestamptz,
      CONSTRAINT backfill_files_unique UNIQUE (file, scope)
    )`.execute(db);
  await sql`CREATE INDEX backfill_files_gap ON backfill_files (gap_id) WHERE gap_id IS NOT NULL`.execute(
    db,
  );
  await sql`CREATE INDEX backfill_files_updated ON backfill_files (updated_at)`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP TABLE IF EXISTS backfill_files`.execute(db);
  await sql`DROP TABLE IF EXISTS gaps`.execute(db);
  await sql`ALTER TABLE push_events DROP CONSTRAINT push_events_origin_check`.execute(db);
  await sql`
    ALTER TABLE push_events ADD CONSTRAINT push_events_origin_check
      CHECK (origin IN ('poll', 'webhook')) NOT VALID`.execute(db);
}
