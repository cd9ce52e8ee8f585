import { type Kysely, sql } from 'kysely';

// Frozen (issue 29 item 2, ADR 0141): how many conditional answers a source's poll_cost has
// learned from. 0 means poll_cost is still the prior (1: unknown is assumed busy); the first
// conditional answer then replaces it outright instead of moving it halfway, so a feed that
// answers 304 is believed idle at once. Sources that already moved off the prior have learned.
// Never import application code here.

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    ALTER TABLE event_sources
      ADD COLUMN poll_cost_samples integer NOT NULL DEFAULT 0
        CHECK (poll_cost_samples >= 0)`.execute(db);
  await sql`UPDATE event_sources SET poll_cost_samples = 1 WHERE poll_cost <> 1`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE event_sources DROP COLUMN poll_cost_samples`.execute(db);
}
