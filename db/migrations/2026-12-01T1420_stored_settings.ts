import { type Kysely, sql } from 'kysely';

// Frozen: one configuration per database for what shapes stored data (issue 27 item 7,
// ADR 0125). Never import application code here.

export async function up(db: Kysely<unknown>): Promise<void> {
  // The value of each setting that decides what stored rows look like (COMMIT_EMAILS,
  // COMMITS_MAX_PER_PUSH), as the first bin/setup (or writing process) found it. A process
  // whose environment says otherwise refuses to start; bin/setup --reconfigure changes it.
  // Empty after this migration: the next bin/setup records its own values.
  await sql`
    CREATE TABLE stored_settings (
      name text PRIMARY KEY CHECK (name ~ '^[A-Z][A-Z0-9_]{0,63}$'),
      value text NOT NULL CHECK (length(value) <= 200),
      recorded_at timestamptz NOT NULL DEFAULT now(),
      -- Who wrote it: "bin/setup on host:pid", "bin/setup --reconfigure on …", "worker on …".
      recorded_by text NOT NULL CHECK (length(recorded_by) <= 300),
      -- The value before the last --reconfigure (NULL: never changed), so mixed rows can be dated.
      previous_value text CHECK (length(previous_value) <= 200)
    )`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP TABLE IF EXISTS stored_settings`.execute(db);
}
