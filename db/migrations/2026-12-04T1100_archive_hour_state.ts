import { type Kysely, sql } from 'kysely';

// Frozen: what /archive keeps per hour instead of reading every row of it on each request,
// and what marks an hour still being imported (issue 38, ADR 0185). Never import application
// code here.

/**
 * The values an hour file's lines are made of (src/export/hour-query.ts), per table: a
 * write that changes one of them changes the hour of every push whose line shows it. The
 * triggers below watch exactly these; test/integration/archive-hour-state.test.ts holds the
 * export's query to them, so a line that starts reading another column fails there until a
 * migration watches it too. Repositories are watched through the expressions the line
 * reads, not the whole profile (enrichment rewrites follower counts daily).
 */
export const WATCHED = {
  push_events: [
    'id',
    'actor_id',
    'repository_id',
    'push_id',
    'ref',
    'head',
    'before',
    'created_at',
    'commits_state',
    'commit_count',
    'distinct_size',
    'origin',
  ],
  push_commits: ['repository_id', 'ref', 'before', 'head', 'position', 'sha', 'distinct'],
  commits: ['repository_id', 'sha', 'author_name', 'author_email', 'message'],
  actors: ['id', 'login'],
  repositories: [
    'id',
    'full_name',
    "profile->>'private'",
    "profile->'owner'->>'type'",
    "profile->'owner'->>'id'",
    "profile->'owner'->>'login'",
  ],
} as const;

const HOUR = (col: string) => `date_trunc('hour', ${col}, 'UTC')`;
const ROW = (alias: string, cols: readonly string[]) =>
  `(${cols.map((c) => (c.includes('->') ? `${alias}.${c}` : `${alias}."${c}"`)).join(', ')})`;
const PUSH_KEY = (a: string) => `(${a}.repository_id, ${a}.ref, ${a}.before, ${a}.head)`;

export async function up(db: Kysely<unknown>): Promise<void> {
  // An hour's count of committed writes that may have changed its file: the sum of its rows'
  // `changes`. A writer adds 1 to a row of the hour that no other transaction holds (SKIP
  // LOCKED), or inserts one: it never waits for another writer and never deadlocks, and an
  // hour has about as many rows as writers ever wrote it at once. The sum only grows, so two
  // snapshots that read the same sum saw the same committed writes of the hour.
  await sql`
    CREATE TABLE archive_hour_changes (
      id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      hour timestamptz NOT NULL,
      changes bigint NOT NULL DEFAULT 0 CHECK (changes >= 0)
    )`.execute(db);
  await sql`CREATE INDEX archive_hour_changes_hour ON archive_hour_changes (hour)`.execute(db);
  await sql`
    CREATE FUNCTION archive_hours_changed(hours timestamptz[]) RETURNS void
    LANGUAGE plpgsql AS $$
    DECLARE
      h timestamptz;
      target bigint;
    BEGIN
      FOR h IN SELECT DISTINCT x FROM unnest(hours) AS x WHERE x IS NOT NULL ORDER BY 1 LOOP
        SELECT id INTO target FROM archive_hour_changes WHERE hour = h
          LIMIT 1 FOR UPDATE SKIP LOCKED;
        IF FOUND THEN
          UPDATE archive_hour_changes SET changes = changes + 1 WHERE id = target;
        ELSE
          INSERT INTO archive_hour_changes (hour, changes) VALUES (h, 1);
        END IF;
      END LOOP;
    END $$`.execute(db);

  // Statement-level triggers with transition tables: one call a statement (a chunk of 5,000
  // pushes is one), its hours found from the rows it wrote.
  const pushCols = WATCHED.push_events;
  await sql
    .raw(`
    CREATE FUNCTION archive_push_events_written() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF TG_OP = 'INSERT' THEN
        PERFORM archive_hours_changed(ARRAY(SELECT ${HOUR('n.created_at')} FROM new_rows n));
      ELSIF TG_OP = 'DELETE' THEN
        PERFORM archive_hours_changed(ARRAY(SELECT ${HOUR('o.created_at')} FROM old_rows o));
      ELSE
        PERFORM archive_hours_changed(ARRAY(
          SELECT ${HOUR('t.at')}
          FROM old_rows o FULL JOIN new_rows n ON ${PUSH_KEY('o')} = ${PUSH_KEY('n')}
          CROSS JOIN LATERAL (VALUES (o.created_at), (n.created_at)) AS t(at)
          WHERE ${ROW('o', pushCols)} IS DISTINCT FROM ${ROW('n', pushCols)}));
      END IF;
      RETURN NULL;
    END $$`)
    .execute(db);

  // A push's commits: the hour of the push they belong to (its primary key).
  const pcCols = WATCHED.push_commits;
  await sql
    .raw(`
    CREATE FUNCTION archive_push_commits_written() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF TG_OP = 'INSERT' THEN
        PERFORM archive_hours_changed(ARRAY(
          SELECT ${HOUR('p.created_at')} FROM (SELECT DISTINCT repository_id, ref, before, head
            FROM new_rows) k JOIN push_events p ON ${PUSH_KEY('p')} = ${PUSH_KEY('k')}));
      ELSIF TG_OP = 'DELETE' THEN
        PERFORM archive_hours_changed(ARRAY(
          SELECT ${HOUR('p.created_at')} FROM (SELECT DISTINCT repository_id, ref, before, head
            FROM old_rows) k JOIN push_events p ON ${PUSH_KEY('p')} = ${PUSH_KEY('k')}));
      ELSE
        PERFORM archive_hours_changed(ARRAY(
          SELECT ${HOUR('p.created_at')} FROM (
            SELECT DISTINCT k.repository_id, k.ref, k.before, k.head
            FROM old_rows o FULL JOIN new_rows n
              ON (o.repository_id, o.ref, o.before, o.head, o.position)
               = (n.repository_id, n.ref, n.before, n.head, n.position)
            CROSS JOIN LATERAL (VALUES (o.repository_id, o.ref, o.before, o.head),
                                       (n.repository_id, n.ref, n.before, n.head))
              AS k(repository_id, ref, before, head)
            WHERE ${ROW('o', pcCols)} IS DISTINCT FROM ${ROW('n', pcCols)}
          ) k JOIN push_events p ON ${PUSH_KEY('p')} = ${PUSH_KEY('k')}));
      END IF;
      RETURN NULL;
    END $$`)
    .execute(db);

  // A commit's text: the hours of every push that lists it (push_commits_sha). Inserts too:
  // nothing ties a push_commits row to its commits row, so a commit stored after the push
  // that lists it changes that push's line.
  const cCols = WATCHED.commits;
  const pushesListing = (rows: string) => `
    SELECT ${HOUR('p.created_at')} FROM (SELECT DISTINCT repository_id, sha FROM ${rows}) k
    JOIN push_commits pc ON (pc.repository_id, pc.sha) = (k.repository_id, k.sha)
    JOIN push_events p ON ${PUSH_KEY('p')} = ${PUSH_KEY('pc')}`;
  await sql
    .raw(`
    CREATE FUNCTION archive_commits_written() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF TG_OP = 'INSERT' THEN
        PERFORM archive_hours_changed(ARRAY(${pushesListing('new_rows')}));
      ELSIF TG_OP = 'DELETE' THEN
        PERFORM archive_hours_changed(ARRAY(${pushesListing('old_rows')}));
      ELSE
        PERFORM archive_hours_changed(ARRAY(${pushesListing(`(
          SELECT n.repository_id, n.sha FROM old_rows o JOIN new_rows n
            ON (o.repository_id, o.sha) = (n.repository_id, n.sha)
          WHERE ${ROW('o', cCols)} IS DISTINCT FROM ${ROW('n', cCols)}) AS changed`)}));
      END IF;
      RETURN NULL;
    END $$`)
    .execute(db);

  // A repository renamed, made private or public, or moved to another owner: the hours of its
  // pushes (push_events' primary key starts with repository_id).
  const rCols = WATCHED.repositories;
  await sql
    .raw(`
    CREATE FUNCTION archive_repositories_updated() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      PERFORM archive_hours_changed(ARRAY(
        SELECT DISTINCT ${HOUR('p.created_at')}
        FROM old_rows o JOIN new_rows n ON o.id = n.id
        JOIN push_events p ON p.repository_id = n.id
        WHERE ${ROW('o', rCols)} IS DISTINCT FROM ${ROW('n', rCols)}));
      RETURN NULL;
    END $$`)
    .execute(db);

  // An account renamed: push_events has no index on actor_id, and a rename must not scan the
  // store. It is logged with its transaction id instead; /archive asks, for an hour whose
  // file was built before it, whether that hour holds a push of the account (one pass over
  // that hour's pushes, once per rename: src/export/hour-state.ts).
  await sql`
    CREATE TABLE archive_renamed_actors (
      xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
      actor_id bigint NOT NULL,
      renamed_at timestamptz NOT NULL DEFAULT now()
    )`.execute(db);
  await sql`CREATE INDEX archive_renamed_actors_xid ON archive_renamed_actors (xid)`.execute(db);
  await sql`
    CREATE FUNCTION archive_actors_updated() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      INSERT INTO archive_renamed_actors (actor_id)
      SELECT DISTINCT n.id FROM old_rows o JOIN new_rows n ON o.id = n.id
      WHERE o.login IS DISTINCT FROM n.login;
      RETURN NULL;
    END $$`.execute(db);

  for (const [table, fn] of [
    ['push_events', 'archive_push_events_written'],
    ['push_commits', 'archive_push_commits_written'],
    ['commits', 'archive_commits_written'],
  ] as const) {
    // Transition tables allow one event a trigger: three triggers, one function.
    for (const [op, referencing] of [
      ['insert', 'NEW TABLE AS new_rows'],
      ['update', 'OLD TABLE AS old_rows NEW TABLE AS new_rows'],
      ['delete', 'OLD TABLE AS old_rows'],
    ] as const) {
      await sql
        .raw(`
        CREATE TRIGGER ${table}_archive_${op} AFTER ${op.toUpperCase()} ON ${table}
          REFERENCING ${referencing} FOR EACH STATEMENT EXECUTE FUNCTION ${fn}()`)
        .execute(db);
    }
  }
  await sql`
    CREATE TRIGGER repositories_archive_update AFTER UPDATE ON repositories
      REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
      FOR EACH STATEMENT EXECUTE FUNCTION archive_repositories_updated()`.execute(db);
  await sql`
    CREATE TRIGGER actors_archive_update AFTER UPDATE ON actors
      REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
      FOR EACH STATEMENT EXECUTE FUNCTION archive_actors_updated()`.execute(db);

  // What /archive built: per hour and file format (the line format and zlib, which decide
  // the bytes), the hour's change count and snapshot the file was read in, and the file's
  // SHA-256 (its ETag; the cache's file on disk is named by it). Every web replica shares
  // it; a restored database brings its rows back with the data they describe.
  await sql`
    CREATE TABLE archive_hour_files (
      hour timestamptz NOT NULL,
      format text NOT NULL,
      changes bigint NOT NULL,
      snapshot pg_snapshot NOT NULL,
      sha256 text NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
      bytes bigint NOT NULL CHECK (bytes >= 0),
      pushes integer NOT NULL CHECK (pushes >= 0),
      pending integer NOT NULL CHECK (pending >= 0),
      built_at timestamptz NOT NULL DEFAULT now(),
      PRIMARY KEY (hour, format)
    )`.execute(db);
  // A TRUNCATE fires no row or statement trigger of the kinds above: what was built from
  // the emptied table is forgotten whole.
  await sql`
    CREATE FUNCTION archive_forget_files() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      DELETE FROM archive_hour_files;
      RETURN NULL;
    END $$`.execute(db);
  for (const table of [
    'push_events',
    'push_commits',
    'commits',
    'actors',
    'repositories',
    'archive_hour_changes',
    'archive_renamed_actors',
  ]) {
    await sql
      .raw(`
      CREATE TRIGGER ${table}_archive_truncate AFTER TRUNCATE ON ${table}
        FOR EACH STATEMENT EXECUTE FUNCTION archive_forget_files()`)
      .execute(db);
  }

  // An import says which pushes' hours it writes: set at its start from what it reads (an
  // archive hour: that hour and the one before, where crawl-time filing puts late events; a
  // gap: the gap's window) and widened in each chunk's transaction to the created_at of the
  // pushes it stored. While it runs (or after it stopped part-way) those hours are open.
  // 'open': the file was read while its mirror said the hour was still open; its lines are
  // stored, and it is read again from its start until the mirror says it is final.
  await sql`
    ALTER TABLE backfill_files ADD COLUMN writes_from timestamptz,
      ADD COLUMN writes_to timestamptz`.execute(db);
  await sql`ALTER TABLE backfill_files DROP CONSTRAINT backfill_files_state_check`.execute(db);
  await sql`
    ALTER TABLE backfill_files ADD CONSTRAINT backfill_files_state_check
      CHECK (state IN ('running', 'completed', 'failed', 'missing', 'open'))`.execute(db);
  await sql`
    CREATE INDEX backfill_files_unfinished ON backfill_files (writes_from)
    WHERE state IN ('running', 'failed', 'open')`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP INDEX IF EXISTS backfill_files_unfinished`.execute(db);
  await sql`UPDATE backfill_files SET state = 'failed' WHERE state = 'open'`.execute(db);
  await sql`ALTER TABLE backfill_files DROP CONSTRAINT backfill_files_state_check`.execute(db);
  await sql`
    ALTER TABLE backfill_files ADD CONSTRAINT backfill_files_state_check
      CHECK (state IN ('running', 'completed', 'failed', 'missing'))`.execute(db);
  await sql`
    ALTER TABLE backfill_files DROP COLUMN writes_from, DROP COLUMN writes_to`.execute(db);
  for (const table of [
    'push_events',
    'push_commits',
    'commits',
    'actors',
    'repositories',
    'archive_hour_changes',
    'archive_renamed_actors',
  ]) {
    await sql.raw(`DROP TRIGGER IF EXISTS ${table}_archive_truncate ON ${table}`).execute(db);
  }
  for (const table of ['push_events', 'push_commits', 'commits']) {
    for (const op of ['insert', 'update', 'delete']) {
      await sql.raw(`DROP TRIGGER IF EXISTS ${table}_archive_${op} ON ${table}`).execute(db);
    }
  }
  await sql`DROP TRIGGER IF EXISTS repositories_archive_update ON repositories`.execute(db);
  await sql`DROP TRIGGER IF EXISTS actors_archive_update ON actors`.execute(db);
  await sql`DROP TABLE IF EXISTS archive_hour_files`.execute(db);
  await sql`DROP TABLE IF EXISTS archive_renamed_actors`.execute(db);
  await sql`DROP TABLE IF EXISTS archive_hour_changes`.execute(db);
  for (const fn of [
    'archive_forget_files()',
    'archive_actors_updated()',
    'archive_repositories_updated()',
    'archive_commits_written()',
    'archive_push_commits_written()',
    'archive_push_events_written()',
    'archive_hours_changed(timestamptz[])',
  ]) {
    await sql.raw(`DROP FUNCTION IF EXISTS ${fn}`).execute(db);
  }
}
