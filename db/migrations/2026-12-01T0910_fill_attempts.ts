import { type Kysely, sql } from 'kysely';

// Frozen: fills that back off before they work, deaths counted, gaps split by a bounded
// window (issue 17 items 2 and 3, ADR 0061). Never import application code here.

export async function up(db: Kysely<unknown>): Promise<void> {
  // An attempt is opened (attempts + 1, backoff committed, fill_started_at set) before the
  // first byte is read, and closed when it settles. A fill that finds the previous attempt
  // still open, under the gap's lock, knows its process died mid-fill: fill_deaths counts
  // those, and the second makes the gap 'unavailable'.
  await sql`ALTER TABLE gaps ADD COLUMN fill_started_at timestamptz`.execute(db);
  await sql`ALTER TABLE gaps ADD COLUMN fill_deaths integer NOT NULL DEFAULT 0`.execute(db);
  // The archive hour the open attempt is reading: what a death's reason names.
  await sql`ALTER TABLE gaps ADD COLUMN fill_hour text`.execute(db);
  // A window longer than the bound is recorded as several gaps of the same run.
  await sql`ALTER TABLE gaps DROP CONSTRAINT gaps_run_id_key`.execute(db);
  await sql`CREATE INDEX gaps_run ON gaps (run_id)`.execute(db);
  // The same for a file import: a checkpoint found 'running' by the next importer (which
  // holds the file's lock, so nobody else does) was left by a process that died.
  await sql`ALTER TABLE backfill_files ADD COLUMN deaths integer NOT NULL DEFAULT 0`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE backfill_files DROP COLUMN deaths`.execute(db);
  await sql`DROP INDEX gaps_run`.execute(db);
  await sql`ALTER TABLE gaps ADD CONSTRAINT gaps_run_id_key UNIQUE (run_id)`.execute(db);
  await sql`ALTER TABLE gaps DROP COLUMN fill_hour`.execute(db);
  await sql`ALTER TABLE gaps DROP COLUMN fill_deaths`.execute(db);
  await sql`ALTER TABLE gaps DROP COLUMN fill_started_at`.execute(db);
}
