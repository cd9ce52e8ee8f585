import { type Kysely, sql } from 'kysely';

// Frozen: never import application code here.
//
// Pushes counted without counting them (ADR 0203): `push_tallies`, the pushes of each
// month of created_at (UTC), origin and commits_state, and `push_tally_deltas`, what each
// statement on push_events changed of them, appended by statement-level triggers with
// transition tables on push_events (one row a month, origin and state the statement
// touched, no row when it changed none). Appending never waits on another writer: an
// upsert of a shared row would make every poll, delivery, archive chunk and commits fetch
// that touches one month queue behind each other until commit. The maintenance job folds
// the deltas into the tallies (src/store/push-tallies.ts); a reader sums both, so the figures are
// exact at every commit, folded or not.
//
// What the triggers see: every statement on push_events (the table every writer names),
// COPY included. A statement on one partition by its own name does not fire them, as it
// does not fire push_keys' triggers; the month-maker moves rows from the default partition
// into a new month that way, which changes no month's tally (a row's month is its
// created_at's). TRUNCATE push_events empties both; retention's drop of a month deletes the
// month's rows of both in its transaction.
//
// push_events_commits_state (a full index on commits_state, one entry a push) served only
// the count by state, which the tallies now give; every other statement on commits_state
// reads the fetcher's partial indexes. It is dropped.

const TALLIES_TABLE = 'push_tallies';
const DELTAS_TABLE = 'push_tally_deltas';

/** The month a push is tallied under: its created_at's UTC month (its partition's). */
const MONTH_OF = (alias: string) =>
  `date_trunc('month', ${alias}.created_at AT TIME ZONE 'UTC')::date`;

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql
    .raw(`
    CREATE TABLE ${TALLIES_TABLE} (
      month date NOT NULL CHECK (extract(day FROM month) = 1),
      origin text NOT NULL,
      commits_state text NOT NULL,
      pushes bigint NOT NULL CHECK (pushes >= 0),
      PRIMARY KEY (month, origin, commits_state)
    )`)
    .execute(db);
  // Append-only, no key and no index: written by every statement on push_events, read
  // whole (a reader's sum, the fold), never looked up.
  await sql
    .raw(`
    CREATE TABLE ${DELTAS_TABLE} (
      month date NOT NULL,
      origin text NOT NULL,
      commits_state text NOT NULL,
      pushes bigint NOT NULL
    )`)
    .execute(db);

  await sql
    .raw(`
    CREATE FUNCTION push_tallies_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      INSERT INTO ${DELTAS_TABLE} (month, origin, commits_state, pushes)
      SELECT ${MONTH_OF('n')}, n.origin, n.commits_state, count(*)
      FROM new_rows n GROUP BY 1, 2, 3;
      RETURN NULL;
    END $$`)
    .execute(db);
  // An update counts only when it moved a push to another origin or state: the fetcher's
  // lease and attempt updates add nothing.
  await sql
    .raw(`
    CREATE FUNCTION push_tallies_updated() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      INSERT INTO ${DELTAS_TABLE} (month, origin, commits_state, pushes)
      SELECT month, origin, commits_state, sum(d)
      FROM (SELECT ${MONTH_OF('n')} AS month, n.origin, n.commits_state, 1 AS d FROM new_rows n
            UNION ALL
            SELECT ${MONTH_OF('o')}, o.origin, o.commits_state, -1 FROM old_rows o) c
      GROUP BY 1, 2, 3 HAVING sum(d) <> 0;
      RETURN NULL;
    END $$`)
    .execute(db);
  await sql
    .raw(`
    CREATE FUNCTION push_tallies_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      INSERT INTO ${DELTAS_TABLE} (month, origin, commits_state, pushes)
      SELECT ${MONTH_OF('o')}, o.origin, o.commits_state, -count(*)
      FROM old_rows o GROUP BY 1, 2, 3;
      RETURN NULL;
    END $$`)
    .execute(db);
  await sql
    .raw(`
    CREATE FUNCTION push_tallies_truncated() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      TRUNCATE ${TALLIES_TABLE}, ${DELTAS_TABLE};
      RETURN NULL;
    END $$`)
    .execute(db);

  // The triggers first: creating one takes SHARE ROW EXCLUSIVE on push_events, so no writer
  // stores a push between the count below and the commit of this migration.
  for (const [op, referencing] of [
    ['insert', 'NEW TABLE AS new_rows'],
    ['update', 'OLD TABLE AS old_rows NEW TABLE AS new_rows'],
    ['delete', 'OLD TABLE AS old_rows'],
  ] as const) {
    await sql
      .raw(`
      CREATE TRIGGER push_events_tallies_${op} AFTER ${op.toUpperCase()} ON push_events
        REFERENCING ${referencing} FOR EACH STATEMENT
        EXECUTE FUNCTION push_tallies_${op === 'insert' ? 'inserted' : `${op}d`}()`)
      .execute(db);
  }
  await sql`
    CREATE TRIGGER push_events_tallies_truncate AFTER TRUNCATE ON push_events
      FOR EACH STATEMENT EXECUTE FUNCTION push_tallies_truncated()`.execute(db);

  // The pushes already stored, counted once.
  await sql
    .raw(`
    INSERT INTO ${TALLIES_TABLE} (month, origin, commits_state, pushes)
    SELECT ${MONTH_OF('p')}, p.origin, p.commits_state, count(*)
    FROM push_events p GROUP BY 1, 2, 3`)
    .execute(db);

  await sql`DROP INDEX IF EXISTS push_events_commits_state`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`CREATE INDEX IF NOT EXISTS push_events_commits_state ON push_events (commits_state)`.execute(
    db,
  );
  for (const op of ['insert', 'update', 'delete', 'truncate']) {
    await sql.raw(`DROP TRIGGER IF EXISTS push_events_tallies_${op} ON push_events`).execute(db);
  }
  for (const f of ['inserted', 'updated', 'deleted', 'truncated']) {
    await sql.raw(`DROP FUNCTION IF EXISTS push_tallies_${f}()`).execute(db);
  }
  await sql.raw(`DROP TABLE IF EXISTS ${DELTAS_TABLE}, ${TALLIES_TABLE}`).execute(db);
}
