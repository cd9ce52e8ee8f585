import { type Kysely, sql } from 'kysely';

// Frozen: commits of pushes (issue 18, ADRs 0070/0071). Never import application code here.

const COMMITS_STATES = `'pending', 'complete', 'partial', 'none', 'skipped', 'gone', 'failed'`;

export async function up(db: Kysely<unknown>): Promise<void> {
  // One row per commit of a repository. A commit's content never changes, so writers
  // insert ON CONFLICT DO NOTHING (a richer later answer may only fill columns still NULL).
  // author_email / committer_email follow COMMIT_EMAILS: 'sha256:<hex>' of the trimmed,
  // lower-cased address (hash), the address as given (keep) or NULL (drop).
  await sql`
    CREATE TABLE commits (
      repository_id bigint NOT NULL,
      sha text NOT NULL,
      author_name text,
      author_email text,
      -- The GitHub account, when the source names one by id; NULL otherwise.
      author_id bigint,
      author_login text,
      committer_name text,
      committer_email text,
      committer_id bigint,
      committed_at timestamptz,
      message text,
      authored_at timestamptz,
      parents text[],
      first_seen_at timestamptz NOT NULL DEFAULT now(),
      CONSTRAINT commits_pkey PRIMARY KEY (repository_id, sha)
    )`.execute(db);
  await sql`CREATE INDEX commits_first_seen_at ON commits USING brin (first_seen_at)`.execute(db);

  // Which commits a push carried, in order (position 0 = oldest). The key starts with
  // push_events' natural key (repository_id, ref, before, head); the same commit pushed
  // to two branches is one commits row and two push_commits rows.
  await sql`
    CREATE TABLE push_commits (
      repository_id bigint NOT NULL,
      ref text NOT NULL,
      before text NOT NULL,
      head text NOT NULL,
      position integer NOT NULL CHECK (position >= 0),
      sha text NOT NULL,
      -- NULL when the source does not say (compare answers).
      "distinct" boolean,
      CONSTRAINT push_commits_pkey PRIMARY KEY (repository_id, ref, before, head, position)
    )`.execute(db);
  // "Which pushes carried this commit".
  await sql`CREATE INDEX push_commits_sha ON push_commits (repository_id, sha)`.execute(db);

  // Every push stored before this migration is 'skipped' (nobody asked for its commits).
  // A constant default fills existing rows without rewriting the table, and since every
  // existing row holds that value the check is added NOT VALID (no full scan under lock).
  // The default stays: it is the state of a push nobody targets.
  await sql`
    ALTER TABLE push_events
      ADD COLUMN commit_count integer,
      ADD COLUMN commits_state text NOT NULL DEFAULT 'skipped',
      ADD COLUMN commits_attempts integer NOT NULL DEFAULT 0,
      ADD COLUMN commits_next_attempt_at timestamptz,
      ADD COLUMN commits_claimed_until timestamptz,
      ADD COLUMN commits_error text`.execute(db);
  await sql`
    ALTER TABLE push_events ADD CONSTRAINT push_events_commits_state_check
      CHECK (commits_state IN (${sql.raw(COMMITS_STATES)})) NOT VALID`.execute(db);
  // A pending push always says when it may be fetched, so the fetcher's due probe is one
  // range scan of the partial index below (no "IS NULL OR" arm).
  await sql`
    ALTER TABLE push_events ADD CONSTRAINT push_events_commits_pending_due
      CHECK (commits_state <> 'pending' OR commits_next_attempt_at IS NOT NULL) NOT VALID`.execute(
    db,
  );
  await sql`
    CREATE INDEX push_events_commits_due ON push_events (commits_next_attempt_at)
      WHERE commits_state = 'pending'`.execute(db);

  // Commits are fetched only for sources that ask. A public-timeline source would spend
  // the whole background allowance on strangers' pushes, so it starts off; no default:
  // every writer (addSource) decides by kind.
  await sql`ALTER TABLE event_sources ADD COLUMN commits_enabled boolean NOT NULL DEFAULT false`.execute(
    db,
  );
  await sql`UPDATE event_sources SET commits_enabled = (kind <> 'public')`.execute(db);
  await sql`ALTER TABLE event_sources ALTER COLUMN commits_enabled DROP DEFAULT`.execute(db);

  // A third purpose for the ledger. Every existing row is 'poll' or 'enrich', a subset of
  // the new rule: NOT VALID spares the ledger a full scan under an exclusive lock.
  await sql`ALTER TABLE github_requests DROP CONSTRAINT github_requests_purpose_check`.execute(db);
  await sql`
    ALTER TABLE github_requests ADD CONSTRAINT github_requests_purpose_check
      CHECK (purpose IN ('poll', 'enrich', 'commits')) NOT VALID`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DELETE FROM github_requests WHERE purpose = 'commits'`.execute(db);
  await sql`ALTER TABLE github_requests DROP CONSTRAINT github_requests_purpose_check`.execute(db);
  await sql`
    ALTER TABLE github_requests ADD CONSTRAINT github_requests_purpose_check
      CHECK (purpose IN ('poll', 'enrich')) NOT VALID`.execute(db);
  await sql`ALTER TABLE event_sources DROP COLUMN IF EXISTS commits_enabled`.execute(db);
  await sql`DROP INDEX IF EXISTS push_events_commits_due`.execute(db);
  await sql`
    ALTER TABLE push_events
      DROP CONSTRAINT IF EXISTS push_events_commits_pending_due,
      DROP CONSTRAINT IF EXISTS push_events_commits_state_check,
      DROP COLUMN IF EXISTS commits_error,
      DROP COLUMN IF EXISTS commits_claimed_until,
      DROP COLUMN IF EXISTS commits_next_attempt_at,
      DROP COLUMN IF EXISTS commits_attempts,
      DROP COLUMN IF EXISTS commits_state,
      DROP COLUMN IF EXISTS commit_count`.execute(db);
  await sql`DROP TABLE IF EXISTS push_commits`.execute(db);
  await sql`DROP TABLE IF EXISTS commits`.execute(db);
}
