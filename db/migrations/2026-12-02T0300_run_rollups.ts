import { type Kysely, sql } from 'kysely';

// Frozen: hourly rollups of ingestion runs for the status surfaces (issue 29 item 3,
// ADR 0150). Never import application code here.

/** Sources per global row set: a finalize locks one of this many rows an hour and status. */
const SHARDS = 16;

/** The hour a run counts in: its started_at to the UTC hour. */
const hour = (row: 'OLD' | 'NEW') => `date_trunc('hour', ${row}.started_at, 'UTC')`;

/** A run counts once it has its outcome: a running run is read live (ingestion_runs_running). */
const counts = (row: 'OLD' | 'NEW') => `(${row}.status <> 'running')`;

/** What a counted run adds to its rollup rows: when these change, the rollups must follow. */
const contribution = (row: 'OLD' | 'NEW') =>
  `(${counts(row)}, ${row}.source_id, ${hour(row)}, ${row}.status, ${row}.events_created, ${row}.events_rejected, ${row}.gap_detected)`;

export async function up(db: Kysely<unknown>): Promise<void> {
  // No run may be written between the triggers' creation and the backfill.
  await sql`LOCK TABLE ingestion_runs IN SHARE ROW EXCLUSIVE MODE`.execute(db);

  // Per source and UTC hour, the runs that have their outcome: how many, the events they
  // created and set aside, how many recorded a gap. The status surfaces sum a source's last
  // 24 hours from 24 rows instead of every run it made (a source polled each minute makes
  // 1,440 a day). No foreign key: a deleted source's rows are harmless and pruned with the rest.
  await sql`
    CREATE TABLE ingestion_run_hours (
      source_id bigint NOT NULL,
      hour timestamptz NOT NULL,
      runs integer NOT NULL DEFAULT 0,
      events bigint NOT NULL DEFAULT 0,
      rejected bigint NOT NULL DEFAULT 0,
      gaps integer NOT NULL DEFAULT 0,
      PRIMARY KEY (source_id, hour)
    )`.execute(db);

  // The same over every source, by outcome, split in SHARDS rows (source_id % SHARDS) so that
  // concurrent finalizes of different sources rarely wait for one another's row lock (held to
  // their COMMIT). The deployment's 24 hours are at most 24 × SHARDS × 4 rows.
  await sql`
    CREATE TABLE ingestion_run_totals (
      hour timestamptz NOT NULL,
      shard smallint NOT NULL,
      status text NOT NULL,
      runs integer NOT NULL DEFAULT 0,
      gaps integer NOT NULL DEFAULT 0,
      PRIMARY KEY (hour, shard, status)
    )`.execute(db);

  // Kept exact in the transaction of every insert, update and delete of a run: the old row's
  // contribution comes off, the new one's goes on (INSERT … ON CONFLICT: concurrent writers
  // of one row serialise on it, none is lost). A crash rolls the rollup back with the run.
  // Decrements never go below 0: only rows that retention already pruned (older than any
  // reader's window) could otherwise.
  await sql
    .raw(`
      CREATE FUNCTION ingestion_run_rollups_keep() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF TG_OP IN ('UPDATE', 'DELETE') AND ${counts('OLD')} THEN
          UPDATE ingestion_run_hours h
          SET runs = GREATEST(h.runs - 1, 0),
              events = GREATEST(h.events - OLD.events_created, 0),
              rejected = GREATEST(h.rejected - OLD.events_rejected, 0),
              gaps = GREATEST(h.gaps - OLD.gap_detected::int, 0)
          WHERE h.source_id = OLD.source_id AND h.hour = ${hour('OLD')};
          UPDATE ingestion_run_totals t
          SET runs = GREATEST(t.runs - 1, 0), gaps = GREATEST(t.gaps - OLD.gap_detected::int, 0)
          WHERE t.hour = ${hour('OLD')} AND t.shard = OLD.source_id % ${SHARDS} AND t.status = OLD.status;
        END IF;
        IF TG_OP IN ('INSERT', 'UPDATE') AND ${counts('NEW')} THEN
          INSERT INTO ingestion_run_hours AS h (source_id, hour, runs, events, rejected, gaps)
          VALUES (NEW.source_id, ${hour('NEW')}, 1, NEW.events_created, NEW.events_rejected,
                  NEW.gap_detected::int)
          ON CONFLICT (source_id, hour) DO UPDATE
          SET runs = h.runs + 1, events = h.events + excluded.events,
              rejected = h.rejected + excluded.rejected, gaps = h.gaps + excluded.gaps;
          INSERT INTO ingestion_run_totals AS t (hour, shard, status, runs, gaps)
          VALUES (${hour('NEW')}, NEW.source_id % ${SHARDS}, NEW.status, 1, NEW.gap_detected::int)
          ON CONFLICT (hour, shard, status) DO UPDATE
          SET runs = t.runs + 1, gaps = t.gaps + excluded.gaps;
        END IF;
        RETURN NULL;
      END $$`)
    .execute(db);
  await sql
    .raw(`
      CREATE TRIGGER ingestion_run_rollups_insert AFTER INSERT ON ingestion_runs
      FOR EACH ROW WHEN ${counts('NEW')} EXECUTE FUNCTION ingestion_run_rollups_keep()`)
    .execute(db);
  // A running run's page-by-page updates change nothing counted: the function does not run.
  await sql
    .raw(`
      CREATE TRIGGER ingestion_run_rollups_update AFTER UPDATE ON ingestion_runs
      FOR EACH ROW WHEN ((${counts('OLD')} OR ${counts('NEW')})
        AND ${contribution('OLD')} IS DISTINCT FROM ${contribution('NEW')})
      EXECUTE FUNCTION ingestion_run_rollups_keep()`)
    .execute(db);
  await sql
    .raw(`
      CREATE TRIGGER ingestion_run_rollups_delete AFTER DELETE ON ingestion_runs
      FOR EACH ROW WHEN ${counts('OLD')} EXECUTE FUNCTION ingestion_run_rollups_keep()`)
    .execute(db);

  // Rebuilds both from the runs (the backfill below; a repair, a bench that seeds with
  // triggers off). Takes the same lock, so no run is written meanwhile.
  await sql
    .raw(`
      CREATE FUNCTION ingestion_run_rollups_rebuild() RETURNS void LANGUAGE plpgsql AS $$
      BEGIN
        LOCK TABLE ingestion_runs IN SHARE ROW EXCLUSIVE MODE;
        DELETE FROM ingestion_run_hours;
        DELETE FROM ingestion_run_totals;
        INSERT INTO ingestion_run_hours (source_id, hour, runs, events, rejected, gaps)
        SELECT source_id, date_trunc('hour', started_at, 'UTC'), count(*), sum(events_created),
               sum(events_rejected), count(*) FILTER (WHERE gap_detected)
        FROM ingestion_runs WHERE status <> 'running' GROUP BY 1, 2;
        INSERT INTO ingestion_run_totals (hour, shard, status, runs, gaps)
        SELECT date_trunc('hour', started_at, 'UTC'), source_id % ${SHARDS}, status, count(*),
               count(*) FILTER (WHERE gap_detected)
        FROM ingestion_runs WHERE status <> 'running' GROUP BY 1, 2, 3;
      END $$`)
    .execute(db);

  await sql
    .raw(`
      CREATE FUNCTION ingestion_run_rollups_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        DELETE FROM ingestion_run_hours;
        DELETE FROM ingestion_run_totals;
        RETURN NULL;
      END $$`)
    .execute(db);
  await sql
    .raw(`
      CREATE TRIGGER ingestion_run_rollups_truncate AFTER TRUNCATE ON ingestion_runs
      FOR EACH STATEMENT EXECUTE FUNCTION ingestion_run_rollups_truncate()`)
    .execute(db);

  await sql`SELECT ingestion_run_rollups_rebuild()`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  for (const t of ['insert', 'update', 'delete', 'truncate']) {
    await sql
      .raw(`DROP TRIGGER IF EXISTS ingestion_run_rollups_${t} ON ingestion_runs`)
      .execute(db);
  }
  await sql`DROP FUNCTION IF EXISTS ingestion_run_rollups_truncate()`.execute(db);
  await sql`DROP FUNCTION IF EXISTS ingestion_run_rollups_rebuild()`.execute(db);
  await sql`DROP FUNCTION IF EXISTS ingestion_run_rollups_keep()`.execute(db);
  await sql`DROP TABLE IF EXISTS ingestion_run_totals`.execute(db);
  await sql`DROP TABLE IF EXISTS ingestion_run_hours`.execute(db);
}
