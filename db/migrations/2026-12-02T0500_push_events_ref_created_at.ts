import { type Kysely, sql } from 'kysely';

// Frozen: never import application code here (src/db/migrate.ts imports the index's name
// and definition from this file, to build it CONCURRENTLY before this migration runs).

/**
 * A new branch's commits are those not on the default branch as it was when the branch
 * was pushed (src/commits/default-tip.ts): the pushes to the default branch just before
 * and just after that time, found by (repository_id, ref, created_at). Without this index
 * each lookup read and sorted a busy default branch's whole history (a sequential scan of
 * push_events on 100,000 pushes, test/integration/commits-plans.test.ts).
 */
export const REF_CREATED_AT_INDEX = 'push_events_ref_created_at';
export const REF_CREATED_AT_INDEX_COLUMNS = '(repository_id, ref, created_at)';

/** True when the index exists, is valid, and is on exactly those three columns. */
async function indexReady(db: Kysely<unknown>): Promise<boolean> {
  const r = await sql<{ ok: boolean }>`
    SELECT i.indisvalid AND NOT i.indisunique AND i.indexprs IS NULL AND i.indpred IS NULL
           AND i.indkey::int2[] = (SELECT array_agg(attnum ORDER BY k.n) FROM
             unnest(array['repository_id', 'ref', 'created_at']) WITH ORDINALITY AS k(name, n)
             JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attname = k.name) AS ok
    FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
    WHERE c.relname = ${REF_CREATED_AT_INDEX} AND c.relnamespace = current_schema()::regnamespace
      AND i.indrelid = 'push_events'::regclass`.execute(db);
  return r.rows[0]?.ok === true;
}

export async function up(db: Kysely<unknown>): Promise<void> {
  // migrateToLatest (src/db/migrate.ts) builds the index CONCURRENTLY just before this
  // migration, writes going on meanwhile; here it is then only checked. Any other route
  // (Kysely's migrator alone, an interrupted concurrent build left INVALID) builds it here,
  // in the migration's transaction, holding writes to push_events for the build.
  if (await indexReady(db)) return;
  await sql.raw(`DROP INDEX IF EXISTS ${REF_CREATED_AT_INDEX}`).execute(db);
  await sql
    .raw(`CREATE INDEX ${REF_CREATED_AT_INDEX} ON push_events ${REF_CREATED_AT_INDEX_COLUMNS}`)
    .execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql.raw(`DROP INDEX IF EXISTS ${REF_CREATED_AT_INDEX}`).execute(db);
}
