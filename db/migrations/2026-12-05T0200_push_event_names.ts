import { type Kysely, sql } from 'kysely';

// Frozen: never import application code here.

export async function up(db: Kysely<unknown>): Promise<void> {
  // The names an event carried when it happened: the actor's login, the repository's
  // name, and its organisation. A GH Archive line records them as of the event, and an
  // export that reads them from actors and repositories writes today's names instead (a
  // repository renamed within the hour goes out under its new name), and no organisation
  // at all. NULL for a push stored before this migration: the export then falls back to the
  // name the store knows. Nullable columns with no default: adding them rewrites nothing.
  await sql`
    ALTER TABLE push_events
      ADD COLUMN actor_login text,
      ADD COLUMN repo_name text,
      ADD COLUMN org_id bigint,
      ADD COLUMN org_login text`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`
    ALTER TABLE push_events
      DROP COLUMN IF EXISTS actor_login,
      DROP COLUMN IF EXISTS repo_name,
      DROP COLUMN IF EXISTS org_id,
      DROP COLUMN IF EXISTS org_login`.execute(db);
}
