import { type Kysely, sql } from 'kysely';

// Frozen: event ids are not keys (issue 27 item 5, ADR 0122). Never import application
// code here (the application imports the index's name and definition from this file).

/**
 * An event id names at most one push per era (event_id_era, migration 2026-12-01T1400):
 * the index that replaces push_events' UNIQUE (id). Ids repeat across eras (GitHub reused
 * them), so each era keeps its own push; within one, two pushes claiming an id are a
 * dispute, settled by the store (src/ingestion/event-ids.ts), and this index is what makes
 * two writers that race on one id meet.
 */
export const EVENT_ID_INDEX = 'push_events_event_id';
/**
 * event_id_era(created_at) written out: an index evaluates a SQL function per row without
 * inlining it (twice the cost of the expression itself on an insert); queries that write
 * event_id_era(created_at) are inlined to exactly this and can use the index.
 */
export const EVENT_ID_INDEX_COLUMNS =
  "(id, (date_part('year', created_at AT TIME ZONE 'UTC')::smallint))";

/**
 * True when the index exists, is valid, and is shaped as defined above: unique, on `id` and
 * one expression (what CREATE INDEX CONCURRENTLY of EVENT_ID_INDEX_COLUMNS leaves).
 */
async function indexReady(db: Kysely<unknown>): Promise<boolean> {
  const r = await sql<{ ok: boolean }>`
    SELECT i.indisvalid AND i.indisunique AND i.indnatts = 2 AND i.indexprs IS NOT NULL
           AND i.indkey[0] = (SELECT attnum FROM pg_attribute
                              WHERE attrelid = i.indrelid AND attname = 'id') AS ok
    FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
    WHERE c.relname = ${EVENT_ID_INDEX} AND c.relnamespace = current_schema()::regnamespace
      AND i.indrelid = 'push_events'::regclass`.execute(db);
  return r.rows[0]?.ok === true;
}

export async function up(db: Kysely<unknown>): Promise<void> {
  // Kysely's migrator runs every pending migration in ONE transaction, where CREATE INDEX
  // CONCURRENTLY cannot run. So migrateToLatest (src/db/migrate.ts) builds this index
  // CONCURRENTLY between the migration before this one and this one, writes going on
  // meanwhile; here it is then only checked. Anything else (a database migrated by another
  // route, an interrupted concurrent build left INVALID) builds it here, holding writes to
  // push_events for the build: seconds per million pushes.
  if (!(await indexReady(db))) {
    await sql.raw(`DROP INDEX IF EXISTS ${EVENT_ID_INDEX}`).execute(db);
    await sql
      .raw(`CREATE UNIQUE INDEX ${EVENT_ID_INDEX} ON push_events ${EVENT_ID_INDEX_COLUMNS}`)
      .execute(db);
  }
  // Dropping the old constraint takes an ACCESS EXCLUSIVE lock for an instant (no scan),
  // but waiting for it queues every reader behind it: bounded, so a long query elsewhere
  // fails this migration (bin/setup says so; run it again) instead of stalling the ingest.
  await sql`SET LOCAL lock_timeout = '10s'`.execute(db);
  await sql`ALTER TABLE push_events DROP CONSTRAINT push_events_id_key`.execute(db);
  await sql`SET LOCAL lock_timeout TO DEFAULT`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  // UNIQUE (id) cannot come back while an id is held by pushes of two eras: say so rather
  // than drop pushes to make it fit.
  const dup = await sql<{ n: string }>`
    SELECT count(*) AS n FROM (
      SELECT id FROM push_events WHERE id IS NOT NULL GROUP BY id HAVING count(*) > 1
    ) d`.execute(db);
  const n = Number(dup.rows[0]!.n);
  if (n > 0) {
    throw new Error(
      `cannot restore UNIQUE (id) on push_events: ${n} event ids are held by pushes of more than one era (GitHub reused them); that is why this migration exists`,
    );
  }
  await sql`ALTER TABLE push_events ADD CONSTRAINT push_events_id_key UNIQUE (id)`.execute(db);
  await sql.raw(`DROP INDEX IF EXISTS ${EVENT_ID_INDEX}`).execute(db);
}
