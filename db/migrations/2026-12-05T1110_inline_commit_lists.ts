import { type Kysely, type RawBuilder, sql } from 'kysely';

// Frozen: a push's commit list held in its own row (ADR 0200). Never import application code
// here.

/**
 * The list's four columns on push_events. `commit_flags` is the list's shape: one character
 * a position from the first (`t`/`f`: distinct or not, `?`: the source did not say, `-`: no
 * commit at that position; only a hand edit through the view leaves a hole). The shas are in
 * `commit_shas`, 20 bytes each (32 for a SHA-256 repository), when every one of them is
 * lowercase hex of one length, else in `commit_sha_texts` as given. `commit_first_position`
 * is NULL when the list starts at position 0 (a compare answer cut to the newest 250 starts
 * later).
 */
export const LIST_COLUMNS = [
  'commit_flags',
  'commit_first_position',
  'commit_shas',
  'commit_sha_texts',
] as const;

/**
 * What the hour's triggers watch from now on: the push_events list of migration
 * 2026-12-05T0330_archive_watches_names_and_commit_people and the list's columns (a push's
 * commits are now an UPDATE of its row). The commits list is unchanged.
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
    'actor_login',
    'repo_name',
    'org_id',
    'org_login',
    ...LIST_COLUMNS,
  ],
  commits: [
    'repository_id',
    'sha',
    'author_name',
    'author_email',
    'message',
    'author_id',
    'author_login',
    'authored_at',
    'committed_at',
  ],
} as const;

/** What the push_events function watched before (migration 2026-12-05T0330). */
const PUSH_EVENTS_BEFORE = WATCHED.push_events.slice(0, 16);

const HOUR = (col: string) => `date_trunc('hour', ${col}, 'UTC')`;
const ROW = (alias: string, cols: readonly string[]) =>
  `(${cols.map((c) => `${alias}."${c}"`).join(', ')})`;
const PUSH_KEY = (a: string) => `(${a}.repository_id, ${a}.ref, ${a}.before, ${a}.head)`;
const LIST_OF = (a: string) =>
  `${a}.commit_flags, ${a}.commit_first_position, ${a}.commit_shas, ${a}.commit_sha_texts`;

/**
 * The encoded list of each push of \`entries\` (a relation of push_commits' columns, one
 * position at most once a push): aggregates for a list without holes (every writer's), the
 * function for one with.
 */
const ENCODED = (entries: string) => `
  SELECT g.repository_id, g.ref, g.before, g.head,
    CASE WHEN g.whole THEN g.flags ELSE x.flags END AS flags,
    CASE WHEN g.whole THEN nullif(g.lo, 0) ELSE x.first_position END AS first_position,
    CASE WHEN NOT g.whole THEN x.sha_bytes WHEN g.hex THEN decode(g.hexes, 'hex') END AS sha_bytes,
    CASE WHEN NOT g.whole THEN x.sha_texts WHEN NOT g.hex THEN g.shas END AS sha_texts
  FROM (
    SELECT e.repository_id, e.ref, e.before, e.head, min(e.position) AS lo,
      count(*) = max(e.position) - min(e.position) + 1 AS whole,
      bool_and(e.sha ~ '^[0-9a-f]{40}$') OR bool_and(e.sha ~ '^[0-9a-f]{64}$') AS hex,
      string_agg(CASE WHEN e."distinct" THEN 't' WHEN NOT e."distinct" THEN 'f' ELSE '?' END, ''
        ORDER BY e.position) AS flags,
      string_agg(e.sha, '' ORDER BY e.position) AS hexes,
      array_agg(e.sha ORDER BY e.position) AS shas,
      array_agg(e.position ORDER BY e.position) AS positions,
      array_agg(e."distinct" ORDER BY e.position) AS distincts
    FROM ${entries} e
    GROUP BY e.repository_id, e.ref, e.before, e.head
  ) g
  LEFT JOIN LATERAL (
    -- OFFSET 0 keeps the condition a one-time filter: a whole list never calls the function.
    SELECT * FROM push_commit_list_encode(g.positions, g.shas, g.distincts) WHERE NOT g.whole
    OFFSET 0
  ) x ON true`;

/** Pushes moved a statement: a batch ends after the push holding its BATCH_ROWS-th row. */
const BATCH_ROWS = 20_000;

async function pushEventsFunction(db: Kysely<unknown>, cols: readonly string[]): Promise<void> {
  await sql
    .raw(`
    CREATE OR REPLACE FUNCTION archive_push_events_written() RETURNS trigger LANGUAGE plpgsql AS $$
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
          WHERE ${ROW('o', cols)} IS DISTINCT FROM ${ROW('n', cols)}));
      END IF;
      RETURN NULL;
    END $$`)
    .execute(db);
}

/**
 * A commit's text rewritten or deleted: the hours of the pushes whose line lists it, found
 * among its repository's pushes (no index maps a sha to the pushes holding it any more: that
 * index cost more than the list itself). Only pushes in a state whose line lists commits
 * count. A commit inserted needs no search: a list and its commits are written by one
 * statement (src/store/commits.ts), whose write of the list the push_events trigger counts.
 */
async function commitsFunction(db: Kysely<unknown>, cols: readonly string[]): Promise<void> {
  const pushesListing = (rows: string) => `
    SELECT ${HOUR('p.created_at')} FROM (SELECT DISTINCT repository_id, sha FROM ${rows}) k
    JOIN push_events p ON p.repository_id = k.repository_id
    WHERE p.commit_flags IS NOT NULL AND p.commits_state IN ('complete', 'partial', 'none')
      AND CASE WHEN p.commit_shas IS NULL THEN k.sha = ANY (p.commit_sha_texts)
        WHEN k.sha !~ '^([0-9a-f]{40}|[0-9a-f]{64})$' THEN false
        ELSE position(decode(k.sha, 'hex') IN p.commit_shas) > 0 END
      AND EXISTS (SELECT 1 FROM push_commit_list(${LIST_OF('p')}) l WHERE l.sha = k.sha)`;
  await sql
    .raw(`
    CREATE OR REPLACE FUNCTION archive_commits_written() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF TG_OP = 'DELETE' THEN
        PERFORM archive_hours_changed(ARRAY(${pushesListing('old_rows')}));
      ELSIF TG_OP = 'UPDATE' THEN
        PERFORM archive_hours_changed(ARRAY(${pushesListing(`(
          SELECT n.repository_id, n.sha FROM old_rows o JOIN new_rows n
            ON (o.repository_id, o.sha) = (n.repository_id, n.sha)
          WHERE ${ROW('o', cols)} IS DISTINCT FROM ${ROW('n', cols)}) AS changed`)}));
      END IF;
      RETURN NULL;
    END $$`)
    .execute(db);
}

/** The commits function as migration 2026-12-05T0330 left it (for down). */
async function commitsFunctionBefore(db: Kysely<unknown>, cols: readonly string[]): Promise<void> {
  const pushesListing = (rows: string) => `
    SELECT ${HOUR('p.created_at')} FROM (SELECT DISTINCT repository_id, sha FROM ${rows}) k
    JOIN push_commits pc ON (pc.repository_id, pc.sha) = (k.repository_id, k.sha)
    JOIN push_events p ON ${PUSH_KEY('p')} = ${PUSH_KEY('pc')}`;
  await sql
    .raw(`
    CREATE OR REPLACE FUNCTION archive_commits_written() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF TG_OP = 'INSERT' THEN
        PERFORM archive_hours_changed(ARRAY(${pushesListing('new_rows')}));
      ELSIF TG_OP = 'DELETE' THEN
        PERFORM archive_hours_changed(ARRAY(${pushesListing('old_rows')}));
      ELSE
        PERFORM archive_hours_changed(ARRAY(${pushesListing(`(
          SELECT n.repository_id, n.sha FROM old_rows o JOIN new_rows n
            ON (o.repository_id, o.sha) = (n.repository_id, n.sha)
          WHERE ${ROW('o', cols)} IS DISTINCT FROM ${ROW('n', cols)}) AS changed`)}));
      END IF;
      RETURN NULL;
    END $$`)
    .execute(db);
}

/** The triggers of migration 2026-12-04T1100 on the push_commits table (for down). */
async function pushCommitsTriggers(db: Kysely<unknown>): Promise<void> {
  for (const [op, referencing] of [
    ['insert', 'NEW TABLE AS new_rows'],
    ['update', 'OLD TABLE AS old_rows NEW TABLE AS new_rows'],
    ['delete', 'OLD TABLE AS old_rows'],
  ] as const) {
    await sql
      .raw(`
      CREATE TRIGGER push_commits_archive_${op} AFTER ${op.toUpperCase()} ON push_commits
        REFERENCING ${referencing} FOR EACH STATEMENT
        EXECUTE FUNCTION archive_push_commits_written()`)
      .execute(db);
  }
  await sql`
    CREATE TRIGGER push_commits_archive_truncate AFTER TRUNCATE ON push_commits
      FOR EACH STATEMENT EXECUTE FUNCTION archive_forget_files()`.execute(db);
}

export async function up(db: Kysely<unknown>): Promise<void> {
  // New nullable columns without defaults: no rewrite, on a partitioned table every
  // partition gets them. The check reads the table once (every row passes: all NULL).
  await sql`
    ALTER TABLE push_events
      ADD COLUMN commit_flags text,
      ADD COLUMN commit_first_position integer,
      ADD COLUMN commit_shas bytea,
      ADD COLUMN commit_sha_texts text[],
      ADD CONSTRAINT push_events_commit_list CHECK (
        CASE WHEN commit_flags IS NULL
          THEN commit_first_position IS NULL AND commit_shas IS NULL AND commit_sha_texts IS NULL
          ELSE commit_flags ~ '^[-tf?]+$' AND commit_flags ~ '^[^-]' AND commit_flags ~ '[^-]$'
            AND coalesce(commit_first_position > 0, true)
            AND (commit_shas IS NULL) <> (commit_sha_texts IS NULL)
            AND coalesce(octet_length(commit_shas) IN (20 * length(commit_flags),
                32 * length(commit_flags)), true)
            AND coalesce(cardinality(commit_sha_texts) = length(commit_flags), true)
        END)`.execute(db);

  // The list as rows (position, sha as text, distinct), the holes left out. Plain SQL, so a
  // query's lateral call is inlined into it.
  await sql`
    CREATE FUNCTION push_commit_list(flags text, first_position integer, shas bytea,
        sha_texts text[])
      RETURNS TABLE ("position" integer, sha text, "distinct" boolean)
      LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
      SELECT coalesce(first_position, 0) + i - 1,
        CASE WHEN shas IS NULL THEN sha_texts[i]
          ELSE encode(substring(shas FROM (i - 1) * (octet_length(shas) / length(flags)) + 1
            FOR octet_length(shas) / length(flags)), 'hex') END,
        CASE substr(flags, i, 1) WHEN 't' THEN true WHEN 'f' THEN false END
      FROM generate_series(1, length(flags)) AS i
      WHERE substr(flags, i, 1) <> '-'
    $$`.execute(db);

  // Entries (any order, positions unique) → the four columns; no entry → all NULL. A hole
  // between two entries becomes a '-' (and 20 zero bytes). Writers that have no hole encode
  // with aggregates instead (ENCODED below); this is their fallback and the view's.
  await sql`
    CREATE FUNCTION push_commit_list_encode(positions integer[], shas text[],
        distincts boolean[], OUT flags text, OUT first_position integer, OUT sha_bytes bytea,
        OUT sha_texts text[])
      LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
    DECLARE
      n integer := coalesce(cardinality(positions), 0);
      lo integer;
      hi integer;
      w integer;
      k integer;
      s integer;
      fl text[];
      hx text[];
    BEGIN
      IF n = 0 THEN
        RETURN;
      END IF;
      lo := positions[1];
      hi := lo;
      w := CASE WHEN shas[1] ~ '^[0-9a-f]{40}$' THEN 20
                WHEN shas[1] ~ '^[0-9a-f]{64}$' THEN 32 ELSE 0 END;
      FOR k IN 1..n LOOP
        IF positions[k] < lo THEN lo := positions[k]; END IF;
        IF positions[k] > hi THEN hi := positions[k]; END IF;
        IF w > 0 AND (length(shas[k]) <> 2 * w OR shas[k] !~ '^[0-9a-f]+$') THEN w := 0; END IF;
      END LOOP;
      fl := array_fill('-'::text, ARRAY[hi - lo + 1]);
      hx := array_fill(CASE WHEN w > 0 THEN repeat('0', 2 * w) END, ARRAY[hi - lo + 1]);
      FOR k IN 1..n LOOP
        s := positions[k] - lo + 1;
        fl[s] := CASE WHEN distincts[k] THEN 't' WHEN NOT distincts[k] THEN 'f' ELSE '?' END;
        hx[s] := shas[k];
      END LOOP;
      flags := array_to_string(fl, '');
      first_position := nullif(lo, 0);
      IF w > 0 THEN
        sha_bytes := decode(array_to_string(hx, ''), 'hex');
      ELSE
        sha_texts := hx;
      END IF;
    END $$`.execute(db);

  // Every push's rows into its columns, a batch of pushes a statement, walked by the
  // table's key in key order (repository_id as a number).
  const hasRows = await sql<{ n: number }>`
    SELECT count(*)::int AS n FROM (SELECT 1 FROM push_commits LIMIT 1) x`.execute(db);
  type Key = { repository_id: string; ref: string; before: string; head: string };
  const keyOf = (k: Key) =>
    sql`(${k.repository_id}::bigint, ${k.ref}::text, ${k.before}::text, ${k.head}::text)`;
  const [head, tail] = ENCODED('\u0000').split('\u0000') as [string, string];
  let after: Key | null = null;
  while (hasRows.rows[0]!.n > 0) {
    const from: RawBuilder<unknown> = after
      ? sql`(repository_id, ref, before, head) > ${keyOf(after)}`
      : sql`TRUE`;
    const upto: Key | undefined = (
      await sql<Key>`
        SELECT repository_id::text AS repository_id, ref, before, head FROM push_commits
        WHERE ${from}
        ORDER BY repository_id, ref, before, head, position
        OFFSET ${BATCH_ROWS - 1} LIMIT 1`.execute(db)
    ).rows[0];
    const until = upto ? sql`(repository_id, ref, before, head) <= ${keyOf(upto)}` : sql`TRUE`;
    await sql`
      UPDATE push_events p SET commit_flags = x.flags, commit_first_position = x.first_position,
        commit_shas = x.sha_bytes, commit_sha_texts = x.sha_texts
      FROM (${sql.raw(head)}(SELECT * FROM push_commits WHERE ${from} AND ${until})${sql.raw(tail)}) x
      WHERE ${sql.raw(PUSH_KEY('p'))} = ${sql.raw(PUSH_KEY('x'))}`.execute(db);
    if (!upto) break;
    after = upto;
  }

  // The table goes (its triggers and indexes with it); the view keeps its name and columns.
  await sql`DROP TABLE push_commits`.execute(db);
  await sql`DROP FUNCTION archive_push_commits_written()`.execute(db);
  await sql
    .raw(`
    CREATE VIEW push_commits AS
      SELECT p.repository_id, p.ref, p.before, p.head, l.position, l.sha, l."distinct"
      FROM push_events p CROSS JOIN LATERAL push_commit_list(${LIST_OF('p')}) l
      WHERE p.commit_flags IS NOT NULL`)
    .execute(db);

  // Writes through the view (tests and hand edits; the application writes the columns). A
  // row trigger checks each row and queues it in a table of the session; the statement's
  // trigger then applies the queue in one UPDATE of the pushes (a row's UPDATE each would
  // count every row as a change of its hour). The old table's rules hold: a position at most
  // once a push (push_commits_pkey), never negative, a sha always, and (new) the push must
  // be stored.
  await sql`
    CREATE FUNCTION push_commits_view_queue() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF to_regclass('pg_temp.push_commits_queued') IS NULL THEN
        CREATE TEMP TABLE push_commits_queued (added boolean NOT NULL, repository_id bigint,
          ref text, before text, head text, position integer, sha text, "distinct" boolean);
      END IF;
      IF TG_OP IN ('UPDATE', 'DELETE') THEN
        INSERT INTO pg_temp.push_commits_queued
          VALUES (false, OLD.repository_id, OLD.ref, OLD.before, OLD.head, OLD.position);
      END IF;
      IF TG_OP = 'DELETE' THEN
        RETURN OLD;
      END IF;
      IF NEW.position IS NULL OR NEW.position < 0 THEN
        RAISE EXCEPTION 'new row for relation "push_commits" violates check constraint "push_commits_position_check"'
          USING ERRCODE = 'check_violation', CONSTRAINT = 'push_commits_position_check';
      END IF;
      IF NEW.sha IS NULL THEN
        RAISE EXCEPTION 'push_commits: a commit needs its sha'
          USING ERRCODE = 'not_null_violation', COLUMN = 'sha';
      END IF;
      INSERT INTO pg_temp.push_commits_queued VALUES (true, NEW.repository_id, NEW.ref,
        NEW.before, NEW.head, NEW.position, NEW.sha, NEW."distinct");
      RETURN NEW;
    END $$`.execute(db);
  const queuedKeys = `(SELECT DISTINCT repository_id, ref, before, head FROM pg_temp.push_commits_queued)`;
  const listAfter = `(
      SELECT p.repository_id, p.ref, p.before, p.head, l.position, l.sha, l."distinct"
      FROM push_events p JOIN ${queuedKeys} k ON ${PUSH_KEY('p')} = ${PUSH_KEY('k')}
      CROSS JOIN LATERAL push_commit_list(${LIST_OF('p')}) l
      WHERE NOT EXISTS (SELECT 1 FROM pg_temp.push_commits_queued q
        WHERE NOT q.added AND ${PUSH_KEY('q')} = ${PUSH_KEY('p')} AND q.position = l.position)
      UNION ALL
      SELECT repository_id, ref, before, head, position, sha, "distinct"
      FROM pg_temp.push_commits_queued WHERE added)`;
  await sql
    .raw(`
    CREATE FUNCTION push_commits_view_apply() RETURNS trigger LANGUAGE plpgsql
    -- The queue's keys join push_events on four columns, whose selectivities multiply to an
    -- estimate of one row: a nested loop would run the encoding once a push, for every push.
    SET enable_nestloop = off AS $$
    DECLARE
      bad record;
    BEGIN
      IF to_regclass('pg_temp.push_commits_queued') IS NULL THEN
        RETURN NULL;
      END IF;
      -- A temporary table has no statistics until it is analyzed: without them the joins
      -- below are planned for a handful of rows.
      ANALYZE pg_temp.push_commits_queued;
      SELECT k.* INTO bad FROM ${queuedKeys} k WHERE NOT EXISTS (
        SELECT 1 FROM push_events p WHERE ${PUSH_KEY('p')} = ${PUSH_KEY('k')}) LIMIT 1;
      IF FOUND THEN
        DELETE FROM pg_temp.push_commits_queued;
        RAISE EXCEPTION 'push_commits: no stored push (%, %, %, %)',
          bad.repository_id, bad.ref, bad.before, bad.head USING ERRCODE = 'foreign_key_violation';
      END IF;
      PERFORM 1 FROM push_events p WHERE ${PUSH_KEY('p')} IN ${queuedKeys}
        ORDER BY p.repository_id, p.ref, p.before, p.head FOR NO KEY UPDATE;
      SELECT e.repository_id, e.ref, e.before, e.head, e.position INTO bad FROM ${listAfter} e
        GROUP BY e.repository_id, e.ref, e.before, e.head, e.position HAVING count(*) > 1 LIMIT 1;
      IF FOUND THEN
        DELETE FROM pg_temp.push_commits_queued;
        RAISE EXCEPTION 'duplicate key value violates unique constraint "push_commits_pkey"'
          USING DETAIL = format('Key (repository_id, ref, before, head, position)=(%s, %s, %s, %s, %s) already exists.',
            bad.repository_id, bad.ref, bad.before, bad.head, bad.position),
          ERRCODE = 'unique_violation', CONSTRAINT = 'push_commits_pkey';
      END IF;
      UPDATE push_events p SET commit_flags = x.flags, commit_first_position = x.first_position,
        commit_shas = x.sha_bytes, commit_sha_texts = x.sha_texts
      FROM (
        SELECT k.repository_id, k.ref, k.before, k.head, n.flags, n.first_position, n.sha_bytes,
          n.sha_texts
        FROM ${queuedKeys} k LEFT JOIN (${ENCODED(listAfter)}) n ON ${PUSH_KEY('n')} = ${PUSH_KEY('k')}
      ) x
      WHERE ${PUSH_KEY('p')} = ${PUSH_KEY('x')};
      DELETE FROM pg_temp.push_commits_queued;
      RETURN NULL;
    END $$`)
    .execute(db);
  await sql`
    CREATE TRIGGER push_commits_queue INSTEAD OF INSERT OR UPDATE OR DELETE ON push_commits
      FOR EACH ROW EXECUTE FUNCTION push_commits_view_queue()`.execute(db);
  await sql`
    CREATE TRIGGER push_commits_apply AFTER INSERT OR UPDATE OR DELETE ON push_commits
      FOR EACH STATEMENT EXECUTE FUNCTION push_commits_view_apply()`.execute(db);
  await pushEventsFunction(db, WATCHED.push_events);
  await commitsFunction(db, WATCHED.commits);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP VIEW push_commits`.execute(db);
  await sql`DROP FUNCTION push_commits_view_queue()`.execute(db);
  await sql`DROP FUNCTION push_commits_view_apply()`.execute(db);
  await sql`
    CREATE TABLE push_commits (
      repository_id bigint NOT NULL,
      ref text NOT NULL,
      before text NOT NULL,
      head text NOT NULL,
      position integer NOT NULL CHECK (position >= 0),
      sha text NOT NULL,
      "distinct" boolean,
      CONSTRAINT push_commits_pkey PRIMARY KEY (repository_id, ref, before, head, position)
    )`.execute(db);
  await sql
    .raw(`
    INSERT INTO push_commits (repository_id, ref, before, head, position, sha, "distinct")
    SELECT p.repository_id, p.ref, p.before, p.head, l.position, l.sha, l."distinct"
    FROM push_events p CROSS JOIN LATERAL push_commit_list(${LIST_OF('p')}) l
    WHERE p.commit_flags IS NOT NULL`)
    .execute(db);
  await sql`CREATE INDEX push_commits_sha ON push_commits (repository_id, sha)`.execute(db);
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
            WHERE (o.repository_id, o.ref, o.before, o.head, o.position, o.sha, o."distinct")
              IS DISTINCT FROM (n.repository_id, n.ref, n.before, n.head, n.position, n.sha, n."distinct")
          ) k JOIN push_events p ON ${PUSH_KEY('p')} = ${PUSH_KEY('k')}));
      END IF;
      RETURN NULL;
    END $$`)
    .execute(db);
  await pushCommitsTriggers(db);
  await pushEventsFunction(db, PUSH_EVENTS_BEFORE);
  await commitsFunctionBefore(db, WATCHED.commits);
  await sql`
    ALTER TABLE push_events
      DROP CONSTRAINT push_events_commit_list,
      DROP COLUMN commit_flags,
      DROP COLUMN commit_first_position,
      DROP COLUMN commit_shas,
      DROP COLUMN commit_sha_texts`.execute(db);
  await sql`DROP FUNCTION push_commit_list_encode(integer[], text[], boolean[])`.execute(db);
  await sql`DROP FUNCTION push_commit_list(text, integer, bytea, text[])`.execute(db);
}
