import { type Kysely, sql } from 'kysely';

// Frozen (issue 19 item 3): each source's expected counted cost per poll — an exponentially
// weighted mean of the quota-counted requests its recent polls spent (0 for a 304, the pages
// read for a change) — so the schedule plans with what a poll is likely to spend rather than
// as if every poll cost a counted request. A source starts at 1: unknown is assumed busy.
// Never import application code here.

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    ALTER TABLE event_sources
      ADD COLUMN poll_cost double precision NOT NULL DEFAULT 1
        CHECK (poll_cost >= 0 AND poll_cost <= 100)`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE event_sources DROP COLUMN poll_cost`.execute(db);
}
