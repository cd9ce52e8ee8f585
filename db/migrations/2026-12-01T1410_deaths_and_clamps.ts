import { type Kysely, sql } from 'kysely';

// Frozen: work that killed its process is not retried at once, and no stored header keeps a
// credential or a source waiting past an hour (issue 27 items 1 and 2, ADR 0120, ADR 0121).
// Never import application code here.

export async function up(db: Kysely<unknown>): Promise<void> {
  // Polls that died (their run left `running`, found `interrupted`) since the source's last
  // completed run: the second sets the source aside for a day (ADR 0120).
  await sql`ALTER TABLE event_sources ADD COLUMN poll_deaths integer NOT NULL DEFAULT 0
    CHECK (poll_deaths >= 0)`.execute(db);
  // A commit fetch opens its attempt (attempts + 1, backoff) before its first request and
  // marks it open here; every settle closes it. Found open by the next claim, the previous
  // fetch died mid-request: commits_deaths counts those, the second sets the push aside.
  await sql`ALTER TABLE push_events ADD COLUMN commits_fetch_started_at timestamptz`.execute(db);
  await sql`ALTER TABLE push_events ADD COLUMN commits_deaths smallint NOT NULL DEFAULT 0`.execute(
    db,
  );

  // What unclamped headers left behind: a credential blocked until 2058, a rate-limit reset
  // in 2286, a source put off for decades, a poll interval of -5 or 10^9. Each is brought
  // within the hour GitHub's window allows.
  await sql`UPDATE github_rate_limits SET blocked_until = now() + interval '1 hour'
    WHERE block_reason = 'rate_limit' AND blocked_until > now() + interval '1 hour'`.execute(db);
  await sql`UPDATE github_rate_limits SET reset_at = now() + interval '1 hour'
    WHERE reset_at > now() + interval '1 hour 1 minute'`.execute(db);
  await sql`UPDATE event_sources SET next_poll_at = now() + interval '1 hour'
    WHERE next_poll_at > now() + interval '1 day'`.execute(db);
  await sql`UPDATE event_sources SET poll_interval_seconds = LEAST(3600, GREATEST(1, poll_interval_seconds))
    WHERE poll_interval_seconds NOT BETWEEN 1 AND 3600`.execute(db);
  await sql`ALTER TABLE event_sources ADD CONSTRAINT event_sources_poll_interval_bounds
    CHECK (poll_interval_seconds BETWEEN 1 AND 3600)`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE event_sources DROP CONSTRAINT event_sources_poll_interval_bounds`.execute(
    db,
  );
  await sql`ALTER TABLE push_events DROP COLUMN commits_deaths`.execute(db);
  await sql`ALTER TABLE push_events DROP COLUMN commits_fetch_started_at`.execute(db);
  await sql`ALTER TABLE event_sources DROP COLUMN poll_deaths`.execute(db);
}
