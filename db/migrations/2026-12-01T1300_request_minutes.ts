import { type Kysely, sql } from 'kysely';

// Frozen: per-credential window counters (issue 19 item 1, ADR 0083). Never import
// application code here.

/** The ledger rows that spend quota: the same text as SPENDS_QUOTA in src/github/ledger.ts,
 * because the planner only uses a partial index whose predicate the query repeats. */
const SPENDS_QUOTA = sql`counted IS NOT FALSE AND NOT (outcome = 'abandoned' AND sent_at IS NULL)`;

/** The same test on a trigger's row (`OLD` or `NEW`). */
const spends = (row: 'OLD' | 'NEW') =>
  `(${row}.counted IS NOT FALSE AND NOT (${row}.outcome = 'abandoned' AND ${row}.sent_at IS NULL))`;

/** The minute a row counts in: its reserved_at to the UTC minute. */
const minute = (row: 'OLD' | 'NEW') => `date_trunc('minute', ${row}.reserved_at, 'UTC')`;

export async function up(db: Kysely<unknown>): Promise<void> {
  // No ledger write may fall between the triggers' creation and the backfill: the lock is
  // held to the migration's COMMIT (CREATE TRIGGER would take it anyway).
  await sql`LOCK TABLE github_requests IN SHARE ROW EXCLUSIVE MODE`.execute(db);

  // How many ledger rows that spend quota were reserved in each minute, per credential and
  // purpose: the budget window sums these instead of counting every row of its hour. The
  // ledger stays the truth; the triggers below keep this exact in the same transaction as
  // every insert, update and delete of it. Rows older than 2 hours are pruned (a window is
  // at most 1 h + 1 min long); a ledger row deleted after its minute was pruned changes
  // nothing.
  await sql`
    CREATE TABLE github_request_minutes (
      credential text NOT NULL,
      minute timestamptz NOT NULL,
      poll integer NOT NULL DEFAULT 0,
      enrich integer NOT NULL DEFAULT 0,
      commits integer NOT NULL DEFAULT 0,
      PRIMARY KEY (credential, minute)
    )`.execute(db);

  // Decrements never go below 0: only a minute that retention already pruned and an update
  // moved a row back into could otherwise (no window reads such a minute).
  await sql
    .raw(`
      CREATE FUNCTION github_request_minutes_keep() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF TG_OP IN ('UPDATE', 'DELETE') THEN
          IF ${spends('OLD')} THEN
            UPDATE github_request_minutes m
            SET poll = GREATEST(m.poll - (OLD.purpose = 'poll')::int, 0),
                enrich = GREATEST(m.enrich - (OLD.purpose = 'enrich')::int, 0),
                commits = GREATEST(m.commits - (OLD.purpose = 'commits')::int, 0)
            WHERE m.credential = OLD.credential AND m.minute = ${minute('OLD')};
          END IF;
        END IF;
        IF TG_OP IN ('INSERT', 'UPDATE') THEN
          IF ${spends('NEW')} THEN
            INSERT INTO github_request_minutes AS m (credential, minute, poll, enrich, commits)
            VALUES (NEW.credential, ${minute('NEW')}, (NEW.purpose = 'poll')::int,
                    (NEW.purpose = 'enrich')::int, (NEW.purpose = 'commits')::int)
            ON CONFLICT (credential, minute) DO UPDATE
            SET poll = m.poll + excluded.poll, enrich = m.enrich + excluded.enrich,
                commits = m.commits + excluded.commits;
          END IF;
        END IF;
        RETURN NULL;
      END $$`)
    .execute(db);
  await sql
    .raw(`
      CREATE TRIGGER github_request_minutes_insert AFTER INSERT ON github_requests
      FOR EACH ROW WHEN ${spends('NEW')} EXECUTE FUNCTION github_request_minutes_keep()`)
    .execute(db);
  // Most updates (sent, a 200's settle) change none of these: the function does not run.
  await sql
    .raw(`
      CREATE TRIGGER github_request_minutes_update AFTER UPDATE ON github_requests
      FOR EACH ROW WHEN (
        ${spends('OLD')} IS DISTINCT FROM ${spends('NEW')}
        OR OLD.credential IS DISTINCT FROM NEW.credential
        OR OLD.purpose IS DISTINCT FROM NEW.purpose
        OR ${minute('OLD')} IS DISTINCT FROM ${minute('NEW')})
      EXECUTE FUNCTION github_request_minutes_keep()`)
    .execute(db);
  await sql
    .raw(`
      CREATE TRIGGER github_request_minutes_delete AFTER DELETE ON github_requests
      FOR EACH ROW WHEN ${spends('OLD')} EXECUTE FUNCTION github_request_minutes_keep()`)
    .execute(db);
  await sql
    .raw(`
      CREATE FUNCTION github_request_minutes_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        -- DELETE, not TRUNCATE: a TRUNCATE that names both tables still has this one open
        -- when its triggers fire (and has emptied it already).
        DELETE FROM github_request_minutes;
        RETURN NULL;
      END $$`)
    .execute(db);
  await sql
    .raw(`
      CREATE TRIGGER github_request_minutes_truncate AFTER TRUNCATE ON github_requests
      FOR EACH STATEMENT EXECUTE FUNCTION github_request_minutes_truncate()`)
    .execute(db);

  // Every existing row (exact whatever clock a reader uses; retention prunes the old minutes).
  await sql`
    INSERT INTO github_request_minutes (credential, minute, poll, enrich, commits)
    SELECT credential, date_trunc('minute', reserved_at, 'UTC'),
      count(*) FILTER (WHERE purpose = 'poll'), count(*) FILTER (WHERE purpose = 'enrich'),
      count(*) FILTER (WHERE purpose = 'commits')
    FROM github_requests WHERE ${SPENDS_QUOTA}
    GROUP BY 1, 2`.execute(db);

  // The two parts of the window that are not counted per minute, each a small set:
  // - spending rows with no answer yet (in flight or waiting for their gate): `open`, and
  //   part of what was spent since the rate-limit observation;
  // - spending rows answered after a given time: the rest of that (rows answered after the
  //   credential's last observation are few — a settle with headers moves it).
  await sql`
    CREATE INDEX github_requests_unfinished ON github_requests (credential, reserved_at)
    WHERE ${SPENDS_QUOTA} AND finished_at IS NULL`.execute(db);
  await sql`
    CREATE INDEX github_requests_finished ON github_requests (credential, finished_at)
    INCLUDE (reserved_at) WHERE ${SPENDS_QUOTA} AND finished_at IS NOT NULL`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP INDEX IF EXISTS github_requests_finished`.execute(db);
  await sql`DROP INDEX IF EXISTS github_requests_unfinished`.execute(db);
  for (const t of ['insert', 'update', 'delete', 'truncate']) {
    await sql
      .raw(`DROP TRIGGER IF EXISTS github_request_minutes_${t} ON github_requests`)
      .execute(db);
  }
  await sql`DROP FUNCTION IF EXISTS github_request_minutes_truncate()`.execute(db);
  await sql`DROP FUNCTION IF EXISTS github_request_minutes_keep()`.execute(db);
  await sql`DROP TABLE IF EXISTS github_request_minutes`.execute(db);
}
