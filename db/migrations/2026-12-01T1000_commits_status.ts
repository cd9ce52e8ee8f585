import { type Kysely, sql } from 'kysely';

// Frozen: the indexes behind the commits status counts (issue 18 item 7, ADR 0070). Never
// import application code here.

export async function up(db: Kysely<unknown>): Promise<void> {
  // Pushes by commits_state (/status, bin/status, /metrics): seven values, so the btree is
  // mostly deduplicated posting lists and the count is an index-only scan of a few pages
  // per million pushes instead of a heap scan of push_events.
  await sql`CREATE INDEX push_events_commits_state ON push_events (commits_state)`.execute(db);
  // The fetch rate (commits requests in the last hour) without walking every credential's
  // spend index.
  await sql`
    CREATE INDEX github_requests_commits ON github_requests (reserved_at)
    WHERE purpose = 'commits'`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP INDEX IF EXISTS github_requests_commits`.execute(db);
  await sql`DROP INDEX IF EXISTS push_events_commits_state`.execute(db);
}
