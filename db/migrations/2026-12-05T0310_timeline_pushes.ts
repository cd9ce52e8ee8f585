import { type Kysely, sql } from 'kysely';

// Frozen: never import application code here.

export async function up(db: Kysely<unknown>): Promise<void> {
  // GH Archive's 2011–2014 hours (the "timeline" format) name a push's actor by login
  // only: actor_attributes carries a profile without an account id. Such a push is stored
  // with its actor_login and no actor_id (and no actors row: an actor is keyed by id). A
  // push still names its actor one way or the other; the check holds every new row to it.
  // Dropping NOT NULL rewrites nothing; the check is added NOT VALID (no scan under the
  // ALTER's lock) and validated after, which reads the table without blocking writers.
  await sql`ALTER TABLE push_events ALTER COLUMN actor_id DROP NOT NULL`.execute(db);
  await sql`
    ALTER TABLE push_events ADD CONSTRAINT push_events_names_its_actor
      CHECK (actor_id IS NOT NULL OR actor_login IS NOT NULL) NOT VALID`.execute(db);
  await sql`ALTER TABLE push_events VALIDATE CONSTRAINT push_events_names_its_actor`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  // A push without an actor id cannot be kept under NOT NULL, and inventing an id would
  // attribute it to someone: going down with timeline pushes stored is refused by name.
  const r = await sql<{ n: string }>`
    SELECT count(*) AS n FROM push_events WHERE actor_id IS NULL`.execute(db);
  const n = Number(r.rows[0]?.n ?? 0);
  if (n > 0) {
    throw new Error(
      `${n} pushes have no actor id (timeline-format archive lines); delete them before migrating down`,
    );
  }
  await sql`ALTER TABLE push_events DROP CONSTRAINT IF EXISTS push_events_names_its_actor`.execute(
    db,
  );
  await sql`ALTER TABLE push_events ALTER COLUMN actor_id SET NOT NULL`.execute(db);
}
