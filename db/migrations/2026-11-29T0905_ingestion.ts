import { type Kysely, sql } from 'kysely';

// Frozen: ingestion's additions (issue 2). Never import application code here.

export async function up(db: Kysely<unknown>): Promise<void> {
  // GitHub logins and repository names are case-insensitive: `user Torvalds` and
  // `user torvalds` are the same feed and must be one source, not two polls sharing a
  // budget. The original (kind, target, mode) constraint stays; this one is stricter.
  await sql`
    CREATE UNIQUE INDEX event_sources_unique_ci
      ON event_sources (kind, lower(target), mode) NULLS NOT DISTINCT`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP INDEX IF EXISTS event_sources_unique_ci`.execute(db);
}
