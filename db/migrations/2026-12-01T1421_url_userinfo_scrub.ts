import { type Kysely, sql } from 'kysely';

// Frozen: no URL's userinfo in any table (issue 27 item 6). Never import application code
// here.
//
// Before this, a GHARCHIVE_URL mirror written `http://user:password@host/` was stored with
// its password in backfill_files.mirror and .error, and an error message quoting a URL kept
// it wherever errors are kept. The application now removes the userinfo before anything is
// stored (src/redact.ts); this removes what was stored before. The same rule as
// src/redact.ts, in Postgres's regular expressions: after `scheme://`, everything up to the
// last `@` before the authority ends.

const USERINFO = '([a-z][a-z0-9+.-]*://)([^[:space:]/?#@"<>\\\\]*@)+';

/** Columns that hold our own messages or a mirror; never pushed or profile content. */
const COLUMNS: [table: string, column: string][] = [
  ['backfill_files', 'error'],
  ['gaps', 'last_error'],
  ['ingestion_runs', 'error'],
  ['event_sources', 'last_error'],
  ['enrichment_attempts', 'detail'],
  ['actors', 'last_error'],
  ['repositories', 'last_error'],
  ['github_requests', 'error'],
  ['github_rate_limits', 'auth_error'],
  ['github_rate_limits', 'block_reason'],
  ['webhook_deliveries', 'detail'],
  ['rejected_events', 'message'],
];

const scrub = (column: string) => sql`regexp_replace(${sql.ref(column)}, ${USERINFO}, '\\1', 'gi')`;
const matches = (column: string) => sql`${sql.ref(column)} ~* ${USERINFO}`;

export async function up(db: Kysely<unknown>): Promise<void> {
  // backfill_files.mirror is part of the checkpoint's key (file, scope, mirror): two rows of
  // one mirror whose password changed would become one key. The one updated last stands.
  await sql`
    DELETE FROM backfill_files b USING backfill_files k
    WHERE b.id <> k.id AND b.file = k.file AND b.scope = k.scope
      AND (${matches('b.mirror')} OR ${matches('k.mirror')})
      AND ${scrub('b.mirror')} = ${scrub('k.mirror')}
      AND (b.updated_at, b.id) < (k.updated_at, k.id)`.execute(db);
  await sql`
    UPDATE backfill_files SET mirror = ${scrub('mirror')}
    WHERE ${matches('mirror')}`.execute(db);
  for (const [table, column] of COLUMNS) {
    await sql`
      UPDATE ${sql.table(table)} SET ${sql.ref(column)} = ${scrub(column)}
      WHERE ${matches(column)}`.execute(db);
  }
}

export async function down(): Promise<void> {
  // A password removed is not put back.
}
