import { type Kysely, sql } from 'kysely';

// Frozen: several archive mirrors and hourly coverage (issue 20, ADR 0090). Never import
// application code here.

export async function up(db: Kysely<unknown>): Promise<void> {
  // An hour is imported once per mirror: the checkpoint, the "a second import adds
  // nothing" rule and the per-mirror record ("imported, missing, pushes added") are one
  // row per (file, scope, mirror). Rows written before this migration read '' (the one
  // mirror of the time). `hour` is the archive hour an import read (NULL for a local file).
  await sql`ALTER TABLE backfill_files ADD COLUMN mirror text NOT NULL DEFAULT ''`.execute(db);
  await sql`ALTER TABLE backfill_files ADD COLUMN hour timestamptz`.execute(db);
  await sql`
    UPDATE backfill_files
    SET hour = to_timestamp(file, 'YYYY-MM-DD-HH24')::timestamp AT TIME ZONE 'UTC'
    WHERE file ~ '^\d{4}-\d{2}-\d{2}-\d{1,2}$'`.execute(db);
  await sql`ALTER TABLE backfill_files DROP CONSTRAINT backfill_files_unique`.execute(db);
  await sql`
    ALTER TABLE backfill_files ADD CONSTRAINT backfill_files_unique UNIQUE (file, scope, mirror)`.execute(
    db,
  );
  // 'missing': the mirror answered that it does not have the hour (404/410).
  await sql`ALTER TABLE backfill_files DROP CONSTRAINT backfill_files_state_check`.execute(db);
  await sql`
    ALTER TABLE backfill_files ADD CONSTRAINT backfill_files_state_check
      CHECK (state IN ('running', 'completed', 'failed', 'missing'))`.execute(db);
  await sql`CREATE INDEX backfill_files_hour ON backfill_files (hour) WHERE hour IS NOT NULL`.execute(
    db,
  );

  // Coverage per UTC hour: every stored push once, by the origin it first arrived from
  // (push_events.origin never changes after the insert), the gaps open in that hour and the
  // mirrors whose file of that hour was read. A function over a time range, so the status
  // page's "last 48 hours" reads the BRIN index on created_at; the view is the whole range.
  await sql`
    CREATE FUNCTION hourly_coverage_between(since timestamptz, until timestamptz)
    RETURNS TABLE (hour timestamptz, pushes bigint, poll bigint, webhook bigint, archive bigint,
                   gaps_open bigint, mirrors_read bigint)
    LANGUAGE sql STABLE AS $$
      WITH p AS (
        SELECT date_trunc('hour', created_at, 'UTC') AS hour,
               count(*) AS pushes,
               count(*) FILTER (WHERE origin = 'poll') AS poll,
               count(*) FILTER (WHERE origin = 'webhook') AS webhook,
               count(*) FILTER (WHERE origin = 'archive') AS archive
        FROM push_events
        WHERE created_at >= since AND created_at < until
        GROUP BY 1
      ), g AS (
        SELECT h AS hour, count(*) AS gaps_open
        FROM gaps,
             generate_series(date_trunc('hour', greatest(gaps.from_at, since), 'UTC'),
                             least(gaps.to_at, until), interval '1 hour') AS h
        WHERE gaps.state = 'open' AND gaps.to_at >= since AND gaps.from_at < until
        GROUP BY 1
      ), m AS (
        SELECT b.hour, count(DISTINCT b.mirror) AS mirrors_read
        FROM backfill_files b
        WHERE b.state = 'completed' AND b.hour >= since AND b.hour < until
        GROUP BY 1
      )
      SELECT hour, coalesce(p.pushes, 0), coalesce(p.poll, 0), coalesce(p.webhook, 0),
             coalesce(p.archive, 0), coalesce(g.gaps_open, 0), coalesce(m.mirrors_read, 0)
      FROM p FULL JOIN g USING (hour) FULL JOIN m USING (hour)
      ORDER BY hour
    $$`.execute(db);
  await sql`
    CREATE VIEW hourly_coverage AS
      SELECT * FROM hourly_coverage_between('-infinity', 'infinity')`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP VIEW IF EXISTS hourly_coverage`.execute(db);
  await sql`DROP FUNCTION IF EXISTS hourly_coverage_between(timestamptz, timestamptz)`.execute(db);
  await sql`DROP INDEX IF EXISTS backfill_files_hour`.execute(db);
  await sql`DELETE FROM backfill_files WHERE mirror <> '' OR state = 'missing'`.execute(db);
  await sql`ALTER TABLE backfill_files DROP CONSTRAINT backfill_files_state_check`.execute(db);
  await sql`
    ALTER TABLE backfill_files ADD CONSTRAINT backfill_files_state_check
      CHECK (state IN ('running', 'completed', 'failed'))`.execute(db);
  await sql`ALTER TABLE backfill_files DROP CONSTRAINT backfill_files_unique`.execute(db);
  await sql`ALTER TABLE backfill_files ADD CONSTRAINT backfill_files_unique UNIQUE (file, scope)`.execute(
    db,
  );
  await sql`ALTER TABLE backfill_files DROP COLUMN hour`.execute(db);
  await sql`ALTER TABLE backfill_files DROP COLUMN mirror`.execute(db);
}
