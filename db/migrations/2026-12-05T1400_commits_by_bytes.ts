import { type Kysely, sql } from 'kysely';

// Frozen: never import application code here.
//
// A commit's sha held as its bytes (ADR 0204): the rows move to `stored_commits`, whose
// key is (repository_id, sha bytea) and whose `source` is a small number (its rank: mirror
// 0, archive 1, webhook 2, github 3), and `commits` becomes a view of it with the columns,
// names, order and text of the table it replaces: every recipe, dashboard and psql habit
// that reads `commits` keeps working. 40 hex characters (41 bytes in the row, 49 in the
// key's entry) become 20 (21 and 29).
//
// The addresses (author_email, committer_email) are held as bytes too: GH Archive's form
// (`<sha1 hex>@domain`, what COMMIT_EMAILS=gharchive stores) as a 1, the 20 bytes and the
// domain; `sha256:<hex>` (COMMIT_EMAILS=hash) as a 2 and the 32 bytes; anything else as a
// 0 and its UTF-8 bytes. commit_address_bytes and commit_address_text are each other's
// inverse, so the view gives back every address exactly as it was written.
//
// The sha's bytes: a full hex sha (40 or 64 lowercase hex digits, all a writer stores) is
// decoded; any other text (none is written since the writers check shas, but a store may
// hold one from before) is kept as its UTF-8 bytes, with a trailing zero byte when it is
// 20 or 32 bytes long (a text never holds a zero byte), so the two never meet.
// commit_sha_bytes and commit_sha_text are each other's inverse; both inline into a plan,
// so `sha = commit_sha_bytes(x)` is a probe of the key.
//
// The view takes writes as a table did (INSERT, UPDATE, DELETE through an INSTEAD OF
// trigger; its first_seen_at defaults to now()); the application writes the table. TRUNCATE
// names the table. The key and the source's check keep their names (commits_pkey,
// commits_source_check). The archive's triggers (an hour whose commits change) move to the
// table; push_commits_json (push_payload's commits) joins it by bytes.

const COLUMNS = `repository_id, sha, author_name, author_email, author_id, author_login,
  committer_name, committer_email, committer_id, committed_at, message, authored_at, parents,
  first_seen_at, source`;

/** What the archive trigger compares (migration 2026-12-05T1110's list for commits). */
const WATCHED = [
  'repository_id',
  'sha',
  'author_name',
  'author_email',
  'message',
  'author_id',
  'author_login',
  'authored_at',
  'committed_at',
];

const HOUR = (col: string) => `date_trunc('hour', ${col}, 'UTC')`;
const ROW = (alias: string, cols: readonly string[]) =>
  `(${cols.map((c) => `${alias}."${c}"`).join(', ')})`;
const LIST_OF = (a: string) =>
  `${a}.commit_flags, ${a}.commit_first_position, ${a}.commit_shas, ${a}.commit_sha_texts`;

async function functions(db: Kysely<unknown>): Promise<void> {
  await sql`
    CREATE FUNCTION commit_sha_bytes(sha text) RETURNS bytea
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
      SELECT CASE WHEN sha ~ '^([0-9a-f]{40}|[0-9a-f]{64})$' THEN decode(sha, 'hex')
        WHEN octet_length(sha) IN (20, 32) THEN convert_to(sha, 'UTF8') || '\\x00'::bytea
        ELSE convert_to(sha, 'UTF8') END
    $$`.execute(db);
  await sql`
    CREATE FUNCTION commit_sha_text(sha bytea) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
      SELECT CASE WHEN octet_length(sha) IN (20, 32) THEN encode(sha, 'hex')
        WHEN octet_length(sha) = 0 THEN ''
        ELSE CASE WHEN get_byte(sha, octet_length(sha) - 1) = 0
          THEN convert_from(substring(sha FROM 1 FOR octet_length(sha) - 1), 'UTF8')
          ELSE convert_from(sha, 'UTF8') END END
    $$`.execute(db);
  // An unknown name maps to -1, which the table's check refuses (commits_source_check).
  await sql`
    CREATE FUNCTION commit_source_code(source text) RETURNS smallint
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
      SELECT (CASE source WHEN 'mirror' THEN 0 WHEN 'archive' THEN 1 WHEN 'webhook' THEN 2
        WHEN 'github' THEN 3 ELSE -1 END)::smallint
    $$`.execute(db);
  await sql`
    CREATE FUNCTION commit_source_name(source smallint) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
      SELECT CASE source WHEN 0 THEN 'mirror' WHEN 1 THEN 'archive' WHEN 2 THEN 'webhook'
        WHEN 3 THEN 'github' END
    $$`.execute(db);
}

async function addressFunctions(db: Kysely<unknown>): Promise<void> {
  await sql`
    CREATE FUNCTION commit_address_bytes(address text) RETURNS bytea
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
      SELECT CASE WHEN address ~ '^[0-9a-f]{40}@'
          THEN '\\x01'::bytea || decode(left(address, 40), 'hex')
            || convert_to(substr(address, 42), 'UTF8')
        WHEN address ~ '^sha256:[0-9a-f]{64}$'
          THEN '\\x02'::bytea || decode(substr(address, 8), 'hex')
        ELSE '\\x00'::bytea || convert_to(address, 'UTF8') END
    $$`.execute(db);
  await sql`
    CREATE FUNCTION commit_address_text(address bytea) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
      SELECT CASE get_byte(address, 0)
        WHEN 1 THEN encode(substring(address FROM 2 FOR 20), 'hex') || '@'
          || convert_from(substring(address FROM 22), 'UTF8')
        WHEN 2 THEN 'sha256:' || encode(substring(address FROM 2), 'hex')
        ELSE convert_from(substring(address FROM 2), 'UTF8') END
    $$`.execute(db);
}

/** The hours of the pushes listing the commits of `rows`, over bytes (up). */
const bytesListing = (rows: string) => `
    SELECT ${HOUR('p.created_at')} FROM (SELECT DISTINCT repository_id, sha FROM ${rows}) k
    JOIN push_events p ON p.repository_id = k.repository_id
    WHERE p.commit_flags IS NOT NULL AND p.commits_state IN ('complete', 'partial', 'none')
      AND CASE WHEN p.commit_shas IS NULL THEN commit_sha_text(k.sha) = ANY (p.commit_sha_texts)
        WHEN octet_length(k.sha) NOT IN (20, 32) THEN false
        ELSE position(k.sha IN p.commit_shas) > 0 END
      AND EXISTS (SELECT 1 FROM push_commit_list(${LIST_OF('p')}) l
        WHERE l.sha = commit_sha_text(k.sha))`;

/** archive_commits_written, finding a changed commit's hours by `listing`. */
async function archiveFunction(db: Kysely<unknown>, listing: (rows: string) => string) {
  await sql
    .raw(`
    CREATE OR REPLACE FUNCTION archive_commits_written() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF TG_OP = 'DELETE' THEN
        PERFORM archive_hours_changed(ARRAY(${listing('old_rows')}));
      ELSIF TG_OP = 'UPDATE' THEN
        PERFORM archive_hours_changed(ARRAY(${listing(`(
          SELECT n.repository_id, n.sha FROM old_rows o JOIN new_rows n
            ON (o.repository_id, o.sha) = (n.repository_id, n.sha)
          WHERE ${ROW('o', WATCHED)} IS DISTINCT FROM ${ROW('n', WATCHED)}) AS changed`)}));
      END IF;
      RETURN NULL;
    END $$`)
    .execute(db);
}

/**
 * The archive's triggers on `table`. Up leaves out the INSERT one: since migration
 * 2026-12-05T1110 its function does nothing for an INSERT (a new commit changes no line
 * until a push lists it, and that write marks the hour), so it only made every insert
 * collect its rows for nothing.
 */
async function archiveTriggers(db: Kysely<unknown>, table: string, onInsert: boolean) {
  for (const [op, referencing] of [
    ...(onInsert ? ([['insert', 'NEW TABLE AS new_rows']] as const) : []),
    ['update', 'OLD TABLE AS old_rows NEW TABLE AS new_rows'],
    ['delete', 'OLD TABLE AS old_rows'],
  ] as const) {
    await sql
      .raw(`
      CREATE TRIGGER commits_archive_${op} AFTER ${op.toUpperCase()} ON ${table}
        REFERENCING ${referencing} FOR EACH STATEMENT EXECUTE FUNCTION archive_commits_written()`)
      .execute(db);
  }
  await sql
    .raw(`
    CREATE TRIGGER commits_archive_truncate AFTER TRUNCATE ON ${table}
      FOR EACH STATEMENT EXECUTE FUNCTION archive_forget_files()`)
    .execute(db);
}

/** push_payload's commits (migration 2026-12-05T1100), joined to the table given. */
async function pushCommitsJson(db: Kysely<unknown>, join: string, email: string) {
  await sql
    .raw(`
    CREATE OR REPLACE FUNCTION push_commits_json(repository_id_ bigint, ref_ text, before_ text,
      head_ text, repo_name_ text, with_url boolean) RETURNS jsonb LANGUAGE sql STABLE AS $$
      SELECT jsonb_agg(jsonb_build_object('sha', pc.sha,
          'author', jsonb_build_object('email', ${email}, 'name', c.author_name),
          'message', c.message, 'distinct', pc."distinct")
        || CASE WHEN with_url THEN jsonb_build_object('url',
             'https://api.github.com/repos/' || repo_name_ || '/commits/' || pc.sha)
           ELSE '{}'::jsonb END
        ORDER BY pc.position)
      FROM push_commits pc
      LEFT JOIN ${join}
      WHERE (pc.repository_id, pc.ref, pc.before, pc.head)
        = (repository_id_, ref_, before_, head_)
    $$`)
    .execute(db);
}

export async function up(db: Kysely<unknown>): Promise<void> {
  await functions(db);
  await addressFunctions(db);
  await sql`
    CREATE TABLE stored_commits (
      repository_id bigint NOT NULL,
      first_seen_at timestamptz NOT NULL DEFAULT now(),
      committed_at timestamptz,
      authored_at timestamptz,
      author_id bigint,
      committer_id bigint,
      source smallint,
      sha bytea NOT NULL,
      author_name text,
      author_email bytea,
      author_login text,
      committer_name text,
      committer_email bytea,
      message text,
      parents text[]
    )`.execute(db);
  // Key order: the pages of the key fill as an append does, and the heap follows it.
  await sql`
    INSERT INTO stored_commits (repository_id, first_seen_at, committed_at, authored_at,
      author_id, committer_id, source, sha, author_name, author_email, author_login,
      committer_name, committer_email, message, parents)
    SELECT repository_id, first_seen_at, committed_at, authored_at, author_id, committer_id,
      commit_source_code(source), commit_sha_bytes(sha), author_name,
      commit_address_bytes(author_email), author_login, committer_name,
      commit_address_bytes(committer_email), message, parents
    FROM commits ORDER BY repository_id, commit_sha_bytes(sha)`.execute(db);
  await sql`DROP TABLE commits`.execute(db);
  await sql`
    ALTER TABLE stored_commits
      ADD CONSTRAINT commits_pkey PRIMARY KEY (repository_id, sha),
      ADD CONSTRAINT commits_source_check CHECK (source BETWEEN 0 AND 3)`.execute(db);
  await sql`CREATE INDEX commits_first_seen_at ON stored_commits USING brin (first_seen_at)`.execute(
    db,
  );
  await archiveTriggers(db, 'stored_commits', false);
  await archiveFunction(db, bytesListing);
  await sql
    .raw(`
    CREATE VIEW commits AS
      SELECT repository_id, commit_sha_text(sha) AS sha, author_name,
        commit_address_text(author_email) AS author_email, author_id, author_login,
        committer_name, commit_address_text(committer_email) AS committer_email, committer_id,
        committed_at, message,
        authored_at, parents, first_seen_at, commit_source_name(source) AS source
      FROM stored_commits`)
    .execute(db);
  await sql`ALTER VIEW commits ALTER COLUMN first_seen_at SET DEFAULT now()`.execute(db);
  await sql`
    CREATE FUNCTION commits_view_write() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF TG_OP = 'INSERT' THEN
        INSERT INTO stored_commits (repository_id, first_seen_at, committed_at, authored_at,
          author_id, committer_id, source, sha, author_name, author_email, author_login,
          committer_name, committer_email, message, parents)
        VALUES (NEW.repository_id, NEW.first_seen_at, NEW.committed_at, NEW.authored_at,
          NEW.author_id, NEW.committer_id, commit_source_code(NEW.source),
          commit_sha_bytes(NEW.sha), NEW.author_name, commit_address_bytes(NEW.author_email),
          NEW.author_login, NEW.committer_name, commit_address_bytes(NEW.committer_email),
          NEW.message, NEW.parents);
        RETURN NEW;
      ELSIF TG_OP = 'UPDATE' THEN
        UPDATE stored_commits SET repository_id = NEW.repository_id,
          first_seen_at = NEW.first_seen_at, committed_at = NEW.committed_at,
          authored_at = NEW.authored_at, author_id = NEW.author_id,
          committer_id = NEW.committer_id, source = commit_source_code(NEW.source),
          sha = commit_sha_bytes(NEW.sha), author_name = NEW.author_name,
          author_email = commit_address_bytes(NEW.author_email),
          author_login = NEW.author_login, committer_name = NEW.committer_name,
          committer_email = commit_address_bytes(NEW.committer_email),
          message = NEW.message, parents = NEW.parents
        WHERE repository_id = OLD.repository_id AND sha = commit_sha_bytes(OLD.sha);
        RETURN NEW;
      END IF;
      DELETE FROM stored_commits
      WHERE repository_id = OLD.repository_id AND sha = commit_sha_bytes(OLD.sha);
      RETURN OLD;
    END $$`.execute(db);
  await sql`
    CREATE TRIGGER commits_view_write INSTEAD OF INSERT OR UPDATE OR DELETE ON commits
      FOR EACH ROW EXECUTE FUNCTION commits_view_write()`.execute(db);
  await pushCommitsJson(
    db,
    'stored_commits c ON c.repository_id = pc.repository_id AND c.sha = commit_sha_bytes(pc.sha)',
    'commit_address_text(c.author_email)',
  );
  await sql`ANALYZE stored_commits`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP VIEW commits`.execute(db);
  await sql`DROP FUNCTION commits_view_write()`.execute(db);
  await sql`
    CREATE TABLE commits (
      repository_id bigint NOT NULL,
      sha text NOT NULL,
      author_name text,
      author_email text,
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
      source text
    )`.execute(db);
  await sql
    .raw(`
    INSERT INTO commits (${COLUMNS})
    SELECT repository_id, commit_sha_text(sha), author_name,
      commit_address_text(author_email), author_id, author_login, committer_name,
      commit_address_text(committer_email), committer_id, committed_at, message,
      authored_at, parents, first_seen_at, commit_source_name(source)
    FROM stored_commits ORDER BY repository_id, commit_sha_text(sha)`)
    .execute(db);
  await sql`DROP TABLE stored_commits`.execute(db);
  await sql`
    ALTER TABLE commits
      ADD CONSTRAINT commits_pkey PRIMARY KEY (repository_id, sha),
      ADD CONSTRAINT commits_source_check
        CHECK (source IN ('github', 'webhook', 'archive', 'mirror'))`.execute(db);
  await sql`CREATE INDEX commits_first_seen_at ON commits USING brin (first_seen_at)`.execute(db);
  await archiveTriggers(db, 'commits', true);
  // The function as migration 2026-12-05T1110 left it, over text shas.
  await archiveFunction(db, textListing);
  await pushCommitsJson(
    db,
    'commits c ON (c.repository_id, c.sha) = (pc.repository_id, pc.sha)',
    'c.author_email',
  );
  for (const f of [
    'commit_sha_bytes(text)',
    'commit_sha_text(bytea)',
    'commit_source_code(text)',
    'commit_source_name(smallint)',
    'commit_address_bytes(text)',
    'commit_address_text(bytea)',
  ]) {
    await sql.raw(`DROP FUNCTION ${f}`).execute(db);
  }
}

const textListing = (rows: string) => `
    SELECT ${HOUR('p.created_at')} FROM (SELECT DISTINCT repository_id, sha FROM ${rows}) k
    JOIN push_events p ON p.repository_id = k.repository_id
    WHERE p.commit_flags IS NOT NULL AND p.commits_state IN ('complete', 'partial', 'none')
      AND CASE WHEN p.commit_shas IS NULL THEN k.sha = ANY (p.commit_sha_texts)
        WHEN k.sha !~ '^([0-9a-f]{40}|[0-9a-f]{64})$' THEN false
        ELSE position(decode(k.sha, 'hex') IN p.commit_shas) > 0 END
      AND EXISTS (SELECT 1 FROM push_commit_list(${LIST_OF('p')}) l WHERE l.sha = k.sha)`;
