import { type Kysely, sql } from 'kysely';

// Frozen: GraphQL points on the request ledger (issue 26 item 2, ADR 0110 §2, ADR 0114).
// Never import application code here.
//
// A GraphQL query spends points, not one request: its ledger row carries them in `points`
// (NULL means 1, every REST row). The per-minute counters add coalesce(points, 1) and follow
// a change of points (a settle writes the answer's rateLimit.cost over the estimate), and the
// three spend indexes carry points so the window still reads them alone.

/** The same text as SPENDS_QUOTA in src/github/ledger.ts (the planner matches the predicate). */
const SPENDS = `counted IS NOT FALSE AND NOT (outcome = 'abandoned' AND sent_at IS NULL)`;
const SPENDS_QUOTA = sql.raw(SPENDS);

const spends = (row: 'OLD' | 'NEW') =>
  `(${row}.counted IS NOT FALSE AND NOT (${row}.outcome = 'abandoned' AND ${row}.sent_at IS NULL))`;

const minute = (row: 'OLD' | 'NEW') => `date_trunc('minute', ${row}.reserved_at, 'UTC')`;

/** The counters' function, each row weighing `weight(row)`. */
function keepFunction(weight: (row: 'OLD' | 'NEW') => string): string {
  return `
    CREATE OR REPLACE FUNCTION github_request_minutes_keep() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF TG_OP IN ('UPDATE', 'DELETE') THEN
        IF ${spends('OLD')} THEN
          UPDATE github_request_minutes m
          SET poll = GREATEST(m.poll - (OLD.purpose = 'poll')::int * ${weight('OLD')}, 0),
              enrich = GREATEST(m.enrich - (OLD.purpose = 'enrich')::int * ${weight('OLD')}, 0),
              commits = GREATEST(m.commits - (OLD.purpose = 'commits')::int * ${weight('OLD')}, 0)
          WHERE m.credential = OLD.credential AND m.minute = ${minute('OLD')};
        END IF;
      END IF;
      IF TG_OP IN ('INSERT', 'UPDATE') THEN
        IF ${spends('NEW')} THEN
          INSERT INTO github_request_minutes AS m (credential, minute, poll, enrich, commits)
          VALUES (NEW.credential, ${minute('NEW')}, (NEW.purpose = 'poll')::int * ${weight('NEW')},
                  (NEW.purpose = 'enrich')::int * ${weight('NEW')},
                  (NEW.purpose = 'commits')::int * ${weight('NEW')})
          ON CONFLICT (credential, minute) DO UPDATE
          SET poll = m.poll + excluded.poll, enrich = m.enrich + excluded.enrich,
              commits = m.commits + excluded.commits;
        END IF;
      END IF;
      RETURN NULL;
    END $$`;
}

function updateTrigger(extra: string): string {
  return `
    CREATE TRIGGER github_request_minutes_update AFTER UPDATE ON github_requests
    FOR EACH ROW WHEN (
      ${spends('OLD')} IS DISTINCT FROM ${spends('NEW')}
      OR OLD.credential IS DISTINCT FROM NEW.credential
      OR OLD.purpose IS DISTINCT FROM NEW.purpose
      OR ${minute('OLD')} IS DISTINCT FROM ${minute('NEW')}${extra})
    EXECUTE FUNCTION github_request_minutes_keep()`;
}

async function spendIndexes(db: Kysely<unknown>, include: string): Promise<void> {
  await sql`DROP INDEX github_requests_spend`.execute(db);
  await sql`DROP INDEX github_requests_unfinished`.execute(db);
  await sql`DROP INDEX github_requests_finished`.execute(db);
  await sql`
    CREATE INDEX github_requests_spend ON github_requests (credential, reserved_at)
    INCLUDE (purpose, finished_at${sql.raw(include)}) WHERE ${SPENDS_QUOTA}`.execute(db);
  await sql`
    CREATE INDEX github_requests_unfinished ON github_requests (credential, reserved_at)
    ${sql.raw(include ? `INCLUDE (${include.slice(2)})` : '')}
    WHERE ${SPENDS_QUOTA} AND finished_at IS NULL`.execute(db);
  await sql`
    CREATE INDEX github_requests_finished ON github_requests (credential, finished_at)
    INCLUDE (reserved_at${sql.raw(include)}) WHERE ${SPENDS_QUOTA} AND finished_at IS NOT NULL`.execute(
    db,
  );
}

/**
 * What a prune of the ledger tallies (2026-11-29T0920's trigger function), so /metrics'
 * counters never go down: the requests by purpose and status as before, and now the points
 * the #graphql keys spent, by credential label (gpi_github_graphql_points_total).
 */
function tallyFunction(withPoints: boolean): string {
  const points = withPoints
    ? `
        UNION ALL
        SELECT 'gpi_github_graphql_points_total',
               jsonb_build_object('credential', left(credential, -length('#graphql'))),
               sum(coalesce(points, 1))
        FROM gone WHERE credential LIKE '%#graphql' AND outcome NOT IN ('reserved', 'sent')
          AND ${SPENDS}
        GROUP BY credential`
    : '';
  return `
    CREATE OR REPLACE FUNCTION tally_deleted_github_requests() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      INSERT INTO metric_tallies (metric, labels, n)
      SELECT 'gpi_github_requests_total',
             jsonb_build_object('purpose', purpose, 'status', coalesce(status::text, outcome)),
             count(*)
      FROM gone WHERE outcome NOT IN ('reserved', 'sent')
      GROUP BY purpose, coalesce(status::text, outcome)${points}
      ON CONFLICT (metric, labels) DO UPDATE SET n = metric_tallies.n + excluded.n;
      RETURN NULL;
    END $$`;
}

export async function up(db: Kysely<unknown>): Promise<void> {
  // No ledger write between the new function and its trigger (as in 2026-12-01T1300).
  await sql`LOCK TABLE github_requests IN SHARE ROW EXCLUSIVE MODE`.execute(db);
  // 0 is a query GitHub answered without charging (a dry run, a refused query); a
  // reservation always holds at least 1.
  await sql`
    ALTER TABLE github_requests
      ADD COLUMN points integer CHECK (points >= 0)`.execute(db);
  await sql.raw(keepFunction((row) => `coalesce(${row}.points, 1)`)).execute(db);
  await sql`DROP TRIGGER github_request_minutes_update ON github_requests`.execute(db);
  await sql.raw(updateTrigger(`\n      OR OLD.points IS DISTINCT FROM NEW.points`)).execute(db);
  // Every existing row has points NULL (weight 1): the counters are exact as they stand.
  await spendIndexes(db, ', points');
  await sql.raw(tallyFunction(true)).execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`LOCK TABLE github_requests IN SHARE ROW EXCLUSIVE MODE`.execute(db);
  await sql.raw(tallyFunction(false)).execute(db);
  await spendIndexes(db, '');
  await sql`DROP TRIGGER github_request_minutes_update ON github_requests`.execute(db);
  await sql.raw(updateTrigger('')).execute(db);
  await sql.raw(keepFunction(() => '1')).execute(db);
  // Counters built with points would now be off by them: rebuild them by rows.
  await sql`DELETE FROM github_request_minutes`.execute(db);
  await sql`
    INSERT INTO github_request_minutes (credential, minute, poll, enrich, commits)
    SELECT credential, date_trunc('minute', reserved_at, 'UTC'),
      count(*) FILTER (WHERE purpose = 'poll'), count(*) FILTER (WHERE purpose = 'enrich'),
      count(*) FILTER (WHERE purpose = 'commits')
    FROM github_requests WHERE ${SPENDS_QUOTA}
    GROUP BY 1, 2`.execute(db);
  await sql`ALTER TABLE github_requests DROP COLUMN points`.execute(db);
}
