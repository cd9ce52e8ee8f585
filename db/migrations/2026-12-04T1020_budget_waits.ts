import { type Kysely, sql } from 'kysely';

// Frozen: a purpose told no while it waits for REST requests (ADR 0181). Never import
// application code here.

export async function up(db: Kysely<unknown>): Promise<void> {
  // One row per background purpose that asked for a REST request and was told no (the
  // allowance spent, or its floor reached), kept until it is next granted one. Commit
  // fetching by GraphQL spends REST only on the pushes GraphQL cannot prove; this row is how
  // every process knows such a push is waiting, so enrichment stops borrowing commits' floor
  // until it is served. A handful of rows at most, written on a refusal and deleted on the
  // next grant.
  await sql`
    CREATE TABLE budget_waits (
      purpose text PRIMARY KEY CHECK (purpose IN ('enrich', 'commits')),
      since timestamptz NOT NULL,
      refused_at timestamptz NOT NULL CHECK (refused_at >= since)
    )`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP TABLE IF EXISTS budget_waits`.execute(db);
}
