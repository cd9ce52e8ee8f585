import { type Kysely, sql } from 'kysely';

// Frozen: fair turns for commit fetching (issue 18, ADR 0071). Never import application code.

export async function up(db: Kysely<unknown>): Promise<void> {
  // When the fetcher last claimed a push of each repository: the claim serves the
  // repository served least recently first, so one repository pushing 10,000 times takes
  // one turn in N, never the whole budget. A row per repository ever fetched (tiny).
  await sql`
    CREATE TABLE commit_fetch_turns (
      repository_id bigint PRIMARY KEY,
      served_at timestamptz NOT NULL
    )`.execute(db);
  // The claim walks the repositories with pending pushes (a skip scan: one probe per
  // repository, however many pushes each has) and takes each one's oldest due push.
  await sql`
    CREATE INDEX push_events_commits_pending_repo
      ON push_events (repository_id, commits_next_attempt_at)
      WHERE commits_state = 'pending'`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP INDEX IF EXISTS push_events_commits_pending_repo`.execute(db);
  await sql`DROP TABLE IF EXISTS commit_fetch_turns`.execute(db);
}
