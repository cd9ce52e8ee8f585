import { type Kysely, sql } from 'kysely';

// Frozen: the request path at scale (issue 19, ADR 0080). Never import application code here.

export async function up(db: Kysely<unknown>): Promise<void> {
  // The third purpose, 'commits', is the commits migration's (2026-12-01T1000, which runs
  // before this one): it owns github_requests_purpose_check, up and down.
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
}
