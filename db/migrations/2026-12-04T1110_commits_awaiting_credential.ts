import { type Kysely, sql } from 'kysely';

// Frozen: never import application code here (src/db/migrate.ts imports the index's name
// and definition from this file, to build it CONCURRENTLY before this migration runs).

/**
 * A push a source covers, stored by a process without a GitHub credential, is `skipped` with
 * `commits_next_attempt_at` set (when it was set aside): it waits for a credential. A worker
 * that has one makes the newest of them `pending`, a batch at a time, when nothing else is
 * due (ADR 0186). This partial index holds those pushes only, by push time: finding the
 * newest is one short backward range scan, whatever the skipped history around them holds.
 */
export const AWAITING_INDEX = 'push_events_commits_awaiting';
export const AWAITING_INDEX_DEFINITION =
  "ON push_events (created_at) WHERE commits_state = 'skipped' AND commits_next_attempt_at IS NOT NULL";

/** True when the index exists, is valid, is on created_at alone and is partial. */
async function indexReady(db: Kysely<unknown>): Promise<boolean> {
  const r = await sql<{ ok: boolean }>`
    SELECT i.indisvalid AND NOT i.indisunique AND i.indexprs IS NULL AND i.indpred IS NOT NULL
           AND i.indkey::int2[] = ARRAY[(SELECT attnum FROM pg_attribute
             WHERE attrelid = i.indrelid AND attname = 'created_at')] AS ok
    FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
    WHERE c.relname = ${AWAITING_INDEX} AND c.relnamespace = current_schema()::regnamespace
      AND i.indrelid = 'push_events'::regclass`.execute(db);
  return r.rows[0]?.ok === true;
}

export async function up(db: Kysely<unknown>): Promise<void> {
  // migrateToLatest builds the index CONCURRENTLY just before this migration, writes going
  // on meanwhile; here it is then only checked. Any other route builds it here, in the
  // migration's transaction, holding writes to push_events for the build.
  if (await indexReady(db)) return;
  await sql.raw(`DROP INDEX IF EXISTS ${AWAITING_INDEX}`).execute(db);
  await sql.raw(`CREATE INDEX ${AWAITING_INDEX} ${AWAITING_INDEX_DEFINITION}`).execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql.raw(`DROP INDEX IF EXISTS ${AWAITING_INDEX}`).execute(db);
}
