import { type Kysely, sql } from 'kysely';

// Frozen: the request path at scale (issue 19, ADR 0080). Never import application code here.

export async function up(db: Kysely<unknown>): Promise<void> {
  // The third purpose (the agreement of issue 18/19): commit fetching spends the background
  // allowance with enrichment. The commits migration (2026-12-01T1000) makes the same change;
  // dropping and adding it again is idempotent, whichever of the two ran first.
  await sql`ALTER TABLE github_requests DROP CONSTRAINT IF EXISTS github_requests_purpose_check`.execute(
    db,
  );
  await sql`
    ALTER TABLE github_requests ADD CONSTRAINT github_requests_purpose_check
    CHECK (purpose IN ('poll', 'enrich', 'commits'))`.execute(db);

  // Pacing within GitHub's secondary limit (at most N requests a minute to one endpoint per
  // credential): when each (credential, route template) may send next. Written under the
  // credential's request gate, in the statement that marks a request sent.
  await sql`
    CREATE TABLE github_endpoint_pace (
      credential text NOT NULL,
      endpoint text NOT NULL,
      next_at timestamptz NOT NULL,
      PRIMARY KEY (credential, endpoint)
    )`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP TABLE github_endpoint_pace`.execute(db);
  await sql`ALTER TABLE github_requests DROP CONSTRAINT github_requests_purpose_check`.execute(db);
  await sql`
    ALTER TABLE github_requests ADD CONSTRAINT github_requests_purpose_check
    CHECK (purpose IN ('poll', 'enrich'))`.execute(db);
}
