import { type Kysely, sql } from 'kysely';

// Frozen: a commit fetch that died is charged to the pushes its request was about, and a
// batch's death to its suspects, not to every push it had claimed (ADR 0182). Never import
// application code here.

export async function up(db: Kysely<unknown>): Promise<void> {
  // How many pushes the request in flight asks about (1: this push alone; a GraphQL batch's
  // query: all of its pushes). Set with commits_fetch_started_at, cleared with it. A fetch
  // found dead with 1 here is this push's death (commits_deaths); with more, nobody knows
  // which push killed it: each of them is a suspect (commits_batch_deaths), asked alone from
  // then on, and never set aside for it. NULL with a start time is a fetch opened before
  // this column existed: read as alone, as it was counted then.
  await sql`ALTER TABLE push_events ADD COLUMN commits_fetch_group smallint
    CHECK (commits_fetch_group >= 1)`.execute(db);
  await sql`ALTER TABLE push_events ADD COLUMN commits_batch_deaths smallint NOT NULL DEFAULT 0
    CHECK (commits_batch_deaths >= 0)`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE push_events DROP COLUMN commits_batch_deaths`.execute(db);
  await sql`ALTER TABLE push_events DROP COLUMN commits_fetch_group`.execute(db);
}
