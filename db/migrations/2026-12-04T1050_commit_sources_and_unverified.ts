import { type Kysely, sql } from 'kysely';

// Frozen: mirror commits are evidence, not truth (ADR 0184). Never import application code
// here (src/db/migrate.ts imports the two indexes' names and definitions from this file,
// to build them CONCURRENTLY just before this migration runs).
//
// - commits.source: where a row's text came from ('github', 'webhook', 'archive',
//   'mirror'); NULL for a row written before this (its source was not recorded).
// - commits_state 'unverified': a push whose commits a mirror gave, stored until GitHub's
//   answer proves them. The fetcher works on it as on a pending push, so the two partial
//   indexes the fetcher's claim and due probe use cover both states.

const STATES_BEFORE = `'pending', 'complete', 'partial', 'none', 'skipped', 'gone', 'failed'`;
const STATES = `${STATES_BEFORE}, 'unverified'`;
const SOURCES = `'github', 'webhook', 'archive', 'mirror'`;

/** The fetcher's indexes: same names as before, over both states it works on. */
export const FETCHER_INDEXES = [
  { name: 'push_events_commits_due', columns: '(commits_next_attempt_at)' },
  {
    name: 'push_events_commits_pending_repo',
    columns: '(repository_id, commits_next_attempt_at)',
  },
] as const;
export const FETCHER_INDEX_PREDICATE = `commits_state IN ('pending', 'unverified')`;
/** The name an index is built under CONCURRENTLY before the migration renames it. */
export const onlineName = (name: string) => `${name}_next`;

async function valid(db: Kysely<unknown>, name: string): Promise<boolean> {
  const r = await sql<{ ok: boolean }>`
    SELECT i.indisvalid AS ok FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
    WHERE c.relname = ${name} AND c.relnamespace = current_schema()::regnamespace
      AND i.indrelid = 'push_events'::regclass`.execute(db);
  return r.rows[0]?.ok === true;
}

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE commits ADD COLUMN source text`.execute(db);
  await sql`
    ALTER TABLE commits ADD CONSTRAINT commits_source_check
      CHECK (source IN (${sql.raw(SOURCES)}))`.execute(db);

  // Every existing row holds one of the old seven: NOT VALID spares a full scan under lock.
  await sql`ALTER TABLE push_events DROP CONSTRAINT push_events_commits_state_check`.execute(db);
  await sql`
    ALTER TABLE push_events ADD CONSTRAINT push_events_commits_state_check
      CHECK (commits_state IN (${sql.raw(STATES)})) NOT VALID`.execute(db);

  // migrateToLatest (src/db/migrate.ts) builds each index CONCURRENTLY under its `_next`
  // name just before this migration, writes going on meanwhile: here the old one is dropped
  // and the new one takes its name. Any other route (Kysely's migrator alone, a build left
  // INVALID) builds it here, in the migration's transaction, holding writes for the build.
  for (const index of FETCHER_INDEXES) {
    const next = onlineName(index.name);
    await sql.raw(`DROP INDEX IF EXISTS ${index.name}`).execute(db);
    if (await valid(db, next)) {
      await sql.raw(`ALTER INDEX ${next} RENAME TO ${index.name}`).execute(db);
    } else {
      await sql.raw(`DROP INDEX IF EXISTS ${next}`).execute(db);
      await sql
        .raw(
          `CREATE INDEX ${index.name} ON push_events ${index.columns} WHERE ${FETCHER_INDEX_PREDICATE}`,
        )
        .execute(db);
    }
  }
}

export async function down(db: Kysely<unknown>): Promise<void> {
  // An unverified push becomes what the old states can say: due for the fetcher (pending),
  // or the commits it holds (partial).
  await sql`
    UPDATE push_events SET commits_state =
      CASE WHEN commits_next_attempt_at IS NOT NULL THEN 'pending' ELSE 'partial' END
    WHERE commits_state = 'unverified'`.execute(db);
  await sql`ALTER TABLE push_events DROP CONSTRAINT push_events_commits_state_check`.execute(db);
  await sql`
    ALTER TABLE push_events ADD CONSTRAINT push_events_commits_state_check
      CHECK (commits_state IN (${sql.raw(STATES_BEFORE)})) NOT VALID`.execute(db);
  for (const index of FETCHER_INDEXES) {
    await sql.raw(`DROP INDEX IF EXISTS ${index.name}`).execute(db);
    await sql
      .raw(
        `CREATE INDEX ${index.name} ON push_events ${index.columns} WHERE commits_state = 'pending'`,
      )
      .execute(db);
  }
  await sql`ALTER TABLE commits DROP COLUMN IF EXISTS source`.execute(db);
}
