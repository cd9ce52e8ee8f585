import { type Kysely, sql } from 'kysely';

// Frozen: push_events becomes a table partitioned by month of created_at (ADR 0199). Never
// import application code here (the application imports the names below from this file).
//
// - One partition a month, `push_events_YYYY_MM`, [first instant of the month, first of the
//   next) in UTC. A month can then be dropped whole (retention) and a query of an hour
//   reads one partition. A push of a month that has no partition yet (a hand-written
//   insert; writers make their months first) lands in push_events_default, and is moved
//   into its month when the month is made.
// - A partitioned table cannot hold a unique index that leaves out created_at, so "a push
//   is stored once, whichever month its copies arrive in" moves to `push_keys`: one row a
//   push, (repository_id, a 16-byte digest of the natural key), with the push's created_at
//   (which partition holds it) and its event id and era. Its primary key keeps the name of
//   the natural key it replaces, and its unique (event_id, era) index the name of the event
//   id index, so a writer that races another meets the same constraint names as before.
//   Triggers on push_events keep push_keys in step with every insert, event id change,
//   delete and truncate, so no writer can store a push without its key.
// - Natural-key lookups in a partition use a hash index on `head` (16 bytes a push, against
//   ~120 for a B-tree of the four text columns); the rest of the key is a filter.
// - `payload` keeps only what the columns do not hold: the keys a column stores with the
//   same value go, and so does `commits` when push_commits holds at least as many of the
//   push's commits. NULL when nothing is left (almost every push). The export never read it.
//
// Time and disk: the table is copied once (old and new side by side until the old one is
// dropped at the end of the transaction): about twice push_events' size at the peak.
// test/integration/migration-push-events-by-month.test.ts measures it on a million pushes.

export const MONTH_PARTITION_PREFIX = 'push_events_';
export const ENSURE_MONTH_FUNCTION = 'push_events_ensure_month';
export const KEY_DIGEST_FUNCTION = 'push_key_digest';
/** Where a push of a month without its partition is stored until the month is made. */
export const DEFAULT_PARTITION = 'push_events_default';

/** Columns of push_events in their order (payload handled apart). */
const COLUMNS = [
  'id',
  'actor_id',
  'repository_id',
  'push_id',
  'ref',
  'head',
  'before',
  'created_at',
  'payload',
  'size',
  'distinct_size',
  'origin',
  'source_id',
  'run_id',
  'ingested_at',
  'commit_count',
  'commits_state',
  'commits_attempts',
  'commits_next_attempt_at',
  'commits_claimed_until',
  'commits_error',
  'mirror_id',
  'commits_fetch_started_at',
  'commits_deaths',
  'commits_fetch_group',
  'commits_batch_deaths',
  'actor_login',
  'repo_name',
  'org_id',
  'org_login',
] as const;

/**
 * The bits of `payload_held`: which keys of the event's payload the columns hold (left out of
 * `payload`, put back by push_payload). `commits`: the payload's commits are the push's
 * stored ones, in an event's shape; `commit_urls`: each with its API url.
 */
export const PAYLOAD_HELD = {
  repository_id: 1,
  push_id: 2,
  size: 4,
  distinct_size: 8,
  ref: 16,
  head: 32,
  before: 64,
  commits: 128,
  commit_urls: 256,
} as const;

/** Payload keys a column holds (the column of that name), with the JSON type it gives back. */
const HELD_BY_COLUMN: Record<string, 'number' | 'string'> = {
  repository_id: 'number',
  push_id: 'number',
  size: 'number',
  distinct_size: 'number',
  ref: 'string',
  head: 'string',
  before: 'string',
};

const ERA = "date_part('year', created_at AT TIME ZONE 'UTC')::smallint";
const eraOf = (t: string) => `date_part('year', ${t}.created_at AT TIME ZONE 'UTC')::smallint`;
const digestOf = (t: string) =>
  `${KEY_DIGEST_FUNCTION}(${t}.repository_id, ${t}.ref, ${t}.before, ${t}.head)`;

const commitsJson = (o: string, withUrl: boolean) =>
  `push_commits_json(${o}.repository_id, ${o}.ref, ${o}.before, ${o}.head, ${o}.repo_name, ${withUrl})`;

/** The PAYLOAD_HELD bits of `o` (an old row): what its columns and push_commits hold as given. */
function heldOf(o: string): string {
  const scalars = Object.entries(HELD_BY_COLUMN).map(
    ([key, type]) => `CASE WHEN jsonb_typeof(${o}.payload->'${key}') = '${type}'
      AND ${o}.payload->'${key}' = to_jsonb(${o}.${key}) THEN ${PAYLOAD_HELD[key as keyof typeof PAYLOAD_HELD]} ELSE 0 END`,
  );
  const commits = `CASE WHEN jsonb_typeof(${o}.payload->'commits') <> 'array'
        OR jsonb_array_length(${o}.payload->'commits') = 0 THEN 0
      WHEN ${o}.payload->'commits' = ${commitsJson(o, true)}
        THEN ${PAYLOAD_HELD.commits | PAYLOAD_HELD.commit_urls}
      WHEN ${o}.payload->'commits' = ${commitsJson(o, false)} THEN ${PAYLOAD_HELD.commits}
      ELSE 0 END`;
  return `(${[...scalars, commits].join(' + ')})::smallint`;
}

/** The payload without the keys `held` (SQL of its bits) says the columns hold. */
function restOf(o: string, held: string): string {
  const keys = Object.entries(PAYLOAD_HELD)
    .filter(([key]) => key !== 'commit_urls')
    .map(([key, bit]) => `CASE WHEN ${held} & ${bit} <> 0 THEN '${key}' END`);
  return `nullif(${o}.payload - array_remove(ARRAY[${keys.join(', ')}]::text[], NULL), '{}'::jsonb)`;
}

/** The partitioned indexes of push_events (each partition gets its own, named by Postgres). */
const INDEXES = [
  'CREATE INDEX push_events_head ON push_events USING hash (head)',
  'CREATE INDEX push_events_ref_created_at ON push_events (repository_id, ref, created_at)',
  'CREATE INDEX push_events_id ON push_events (id)',
  'CREATE INDEX push_events_commits_state ON push_events (commits_state)',
  `CREATE INDEX push_events_commits_due ON push_events (commits_next_attempt_at)
     WHERE commits_state IN ('pending', 'unverified')`,
  `CREATE INDEX push_events_commits_pending_repo ON push_events
     (repository_id, commits_next_attempt_at) WHERE commits_state IN ('pending', 'unverified')`,
  `CREATE INDEX push_events_commits_awaiting ON push_events (created_at)
     WHERE commits_state = 'skipped' AND commits_next_attempt_at IS NOT NULL`,
  'CREATE INDEX push_events_created_at ON push_events USING brin (created_at)',
  'CREATE INDEX push_events_ingested_at ON push_events USING brin (ingested_at)',
];

/** The checks push_events held NOT VALID, as they were. */
const UNCHECKED_OF_OLD: Record<string, string> = {
  push_events_origin_check: "origin IN ('poll', 'webhook', 'archive')",
  push_events_commits_pending_due:
    "commits_state <> 'pending' OR commits_next_attempt_at IS NOT NULL",
  push_events_commits_state_check: `commits_state IN ('pending', 'complete', 'partial', 'none',
    'skipped', 'gone', 'failed', 'unverified')`,
};

const OLD_INDEXES = [
  'push_events_commits_awaiting',
  'push_events_commits_due',
  'push_events_commits_pending_repo',
  'push_events_commits_state',
  'push_events_created_at',
  'push_events_event_id',
  'push_events_ingested_at',
  'push_events_ref_created_at',
];

async function keyTriggers(db: Kysely<unknown>): Promise<void> {
  // A statement's new pushes without a key get one. The store writes each push's key itself,
  // first, in the same statement (ON CONFLICT on it is how copies racing from two writers
  // meet, src/store/pushes.ts); this catches every other insert (a hand-written one, a
  // test's), so no push is ever stored without its key, and refuses a second copy of a
  // push in another month as the primary key of one table would. A push whose event id
  // another push holds in its era fails the statement on push_events_event_id.
  await sql
    .raw(`
    CREATE FUNCTION push_keys_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF EXISTS (SELECT 1 FROM new_rows n JOIN push_keys k
                   ON (k.repository_id, k.digest) = (n.repository_id, ${digestOf('n')})
                 WHERE k.created_at <> n.created_at) THEN
        RAISE EXCEPTION 'a push is stored once: another copy of it is held in another month'
          USING ERRCODE = 'unique_violation', CONSTRAINT = 'push_events_natural_key';
      END IF;
      INSERT INTO push_keys (repository_id, digest, created_at, event_id, era)
      SELECT n.repository_id, n.digest, n.created_at, n.id,
        CASE WHEN n.id IS NOT NULL THEN ${eraOf('n')} END
      FROM (SELECT r.*, ${digestOf('r')} AS digest FROM new_rows r) n
      WHERE NOT EXISTS (SELECT 1 FROM push_keys k
                        WHERE (k.repository_id, k.digest) = (n.repository_id, n.digest));
      RETURN NULL;
    END $$`)
    .execute(db);
  await sql`
    CREATE TRIGGER push_events_keys_insert AFTER INSERT ON push_events
      REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT
      EXECUTE FUNCTION push_keys_inserted()`.execute(db);

  // An event id given, taken away or changed (the store's fill-in, settleDisputes): per
  // row, and only when it changed, so the commits fetcher's many updates cost nothing.
  await sql
    .raw(`
    CREATE FUNCTION push_keys_id_changed() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      UPDATE push_keys SET event_id = NEW.id,
        era = CASE WHEN NEW.id IS NOT NULL THEN ${eraOf('NEW')} END
      WHERE repository_id = NEW.repository_id AND digest = ${digestOf('NEW')};
      RETURN NULL;
    END $$`)
    .execute(db);
  await sql`
    CREATE TRIGGER push_events_keys_id AFTER UPDATE OF id ON push_events
      FOR EACH ROW WHEN (OLD.id IS DISTINCT FROM NEW.id)
      EXECUTE FUNCTION push_keys_id_changed()`.execute(db);

  // The key columns and created_at never change: a push is its key, and its month is where
  // its key says it is.
  await sql`
    CREATE FUNCTION push_keys_fixed() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      RAISE EXCEPTION 'a push''s natural key and created_at are never updated'
        USING ERRCODE = '23514', CONSTRAINT = 'push_events_key_fixed';
    END $$`.execute(db);
  await sql`
    CREATE TRIGGER push_events_key_fixed BEFORE UPDATE OF repository_id, ref, before, head,
      created_at ON push_events FOR EACH ROW
      WHEN ((OLD.repository_id, OLD.ref, OLD.before, OLD.head, OLD.created_at)
        IS DISTINCT FROM (NEW.repository_id, NEW.ref, NEW.before, NEW.head, NEW.created_at))
      EXECUTE FUNCTION push_keys_fixed()`.execute(db);

  await sql
    .raw(`
    CREATE FUNCTION push_keys_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      DELETE FROM push_keys k USING old_rows o
      WHERE k.repository_id = o.repository_id AND k.digest = ${digestOf('o')}
        AND k.created_at = o.created_at;
      RETURN NULL;
    END $$`)
    .execute(db);
  await sql`
    CREATE TRIGGER push_events_keys_delete AFTER DELETE ON push_events
      REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT
      EXECUTE FUNCTION push_keys_deleted()`.execute(db);

  await sql`
    CREATE FUNCTION push_keys_truncated() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      TRUNCATE push_keys;
      RETURN NULL;
    END $$`.execute(db);
  await sql`
    CREATE TRIGGER push_events_keys_truncate AFTER TRUNCATE ON push_events
      FOR EACH STATEMENT EXECUTE FUNCTION push_keys_truncated()`.execute(db);
}

async function archiveTriggers(db: Kysely<unknown>): Promise<void> {
  // Those of 2026-12-04T1100_archive_hour_state, on the new table (their functions stay).
  for (const [op, referencing] of [
    ['insert', 'NEW TABLE AS new_rows'],
    ['update', 'OLD TABLE AS old_rows NEW TABLE AS new_rows'],
    ['delete', 'OLD TABLE AS old_rows'],
  ] as const) {
    await sql
      .raw(`
      CREATE TRIGGER push_events_archive_${op} AFTER ${op.toUpperCase()} ON push_events
        REFERENCING ${referencing} FOR EACH STATEMENT
        EXECUTE FUNCTION archive_push_events_written()`)
      .execute(db);
  }
  await sql`
    CREATE TRIGGER push_events_archive_truncate AFTER TRUNCATE ON push_events
      FOR EACH STATEMENT EXECUTE FUNCTION archive_forget_files()`.execute(db);
}

export async function up(db: Kysely<unknown>): Promise<void> {
  // The digest of a natural key: each text part preceded by its length, so no two keys
  // spell the same input; 16 bytes of SHA-256 (a uuid: fixed width, no length header).
  await sql
    .raw(`
    CREATE FUNCTION ${KEY_DIGEST_FUNCTION}(repository_id bigint, ref text, before text, head text)
    RETURNS uuid LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
      SELECT encode(substring(sha256(convert_to(
        repository_id::text || ':' || length(ref) || ':' || ref || length(before) || ':'
          || before || ':' || head, 'UTF8')) FROM 1 FOR 16), 'hex')::uuid
    $$`)
    .execute(db);

  // The month's partition, made when missing: a table shaped as push_events, filled with the
  // month's rows the default partition caught (a write that found no month: a hand-written
  // insert, or a writer whose attach gave up), then attached. The attach holds SHARE UPDATE
  // EXCLUSIVE on push_events (reads and writes go on) and ACCESS EXCLUSIVE on the default
  // partition, for an instant when it is empty: a query scanning it holds that up, so the
  // attach waits 1 s at most and then leaves the month to the default partition (false),
  // where its rows are stored and read as well, until the next try moves them.
  await sql
    .raw(`
    CREATE FUNCTION ${ENSURE_MONTH_FUNCTION}(at timestamptz) RETURNS boolean
    LANGUAGE plpgsql SET lock_timeout = '1s' AS $$
    DECLARE
      m timestamp := date_trunc('month', at AT TIME ZONE 'UTC');
      name text := '${MONTH_PARTITION_PREFIX}' || to_char(m, 'YYYY_MM');
      lo timestamptz := m AT TIME ZONE 'UTC';
      hi timestamptz := (m + interval '1 month') AT TIME ZONE 'UTC';
    BEGIN
      IF to_regclass(name) IS NOT NULL THEN RETURN false; END IF;
      BEGIN
        -- Another writer making a month: wait for it a second at most (the lock timeout),
        -- then store in the default partition rather than queue behind it.
        PERFORM pg_advisory_xact_lock(hashtext('${ENSURE_MONTH_FUNCTION}'));
      EXCEPTION WHEN lock_not_available THEN
        RETURN false;
      END;
      -- Read from the catalog in this statement's snapshot: to_regclass's cache may not yet
      -- know the table another writer made and committed while this one waited for the lock.
      IF EXISTS (SELECT 1 FROM pg_class
                 WHERE relname = name AND relnamespace = current_schema()::regnamespace) THEN
        RETURN false;
      END IF;
      BEGIN
        EXECUTE format('CREATE TABLE %I (LIKE push_events INCLUDING DEFAULTS INCLUDING CONSTRAINTS)',
          name);
        EXECUTE format('WITH moved AS (DELETE FROM ${DEFAULT_PARTITION} WHERE created_at >= %L
            AND created_at < %L RETURNING *) INSERT INTO %I SELECT * FROM moved', lo, hi, name);
        EXECUTE format('ALTER TABLE push_events ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
          name, lo, hi);
      EXCEPTION WHEN lock_not_available OR duplicate_table THEN
        RETURN false;
      END;
      RETURN true;
    END $$`)
    .execute(db);

  // A push's stored commits in an event's shape, oldest first: what push_payload gives back
  // as `commits`, and what a payload's commits are compared with to leave them out.
  await sql`
    CREATE FUNCTION push_commits_json(repository_id_ bigint, ref_ text, before_ text, head_ text,
      repo_name_ text, with_url boolean) RETURNS jsonb LANGUAGE sql STABLE AS $$
      SELECT jsonb_agg(jsonb_build_object('sha', pc.sha,
          'author', jsonb_build_object('email', c.author_email, 'name', c.author_name),
          'message', c.message, 'distinct', pc."distinct")
        || CASE WHEN with_url THEN jsonb_build_object('url',
             'https://api.github.com/repos/' || repo_name_ || '/commits/' || pc.sha)
           ELSE '{}'::jsonb END
        ORDER BY pc.position)
      FROM push_commits pc
      LEFT JOIN commits c ON (c.repository_id, c.sha) = (pc.repository_id, pc.sha)
      WHERE (pc.repository_id, pc.ref, pc.before, pc.head)
        = (repository_id_, ref_, before_, head_)
    $$`.execute(db);

  // The old table steps aside: its name, its indexes' names and its triggers go.
  await sql`ALTER TABLE push_events RENAME TO push_events_unpartitioned`.execute(db);
  for (const index of OLD_INDEXES) {
    await sql.raw(`DROP INDEX IF EXISTS ${index}`).execute(db);
  }
  for (const op of ['insert', 'update', 'delete', 'truncate']) {
    await sql
      .raw(`DROP TRIGGER IF EXISTS push_events_archive_${op} ON push_events_unpartitioned`)
      .execute(db);
  }
  await sql`
    ALTER TABLE push_events_unpartitioned
      RENAME CONSTRAINT push_events_natural_key TO push_events_unpartitioned_key`.execute(db);

  await sql`
    CREATE TABLE push_events (LIKE push_events_unpartitioned INCLUDING DEFAULTS
      INCLUDING CONSTRAINTS) PARTITION BY RANGE (created_at)`.execute(db);
  await sql`ALTER TABLE push_events ALTER COLUMN payload DROP NOT NULL`.execute(db);
  await sql`
    ALTER TABLE push_events ADD COLUMN payload_held smallint NOT NULL DEFAULT 0`.execute(db);
  // Checks the old table held NOT VALID (rows from before them may break them) are held
  // the same way here: added back NOT VALID after the copy.
  for (const name of Object.keys(UNCHECKED_OF_OLD)) {
    await sql.raw(`ALTER TABLE push_events DROP CONSTRAINT IF EXISTS ${name}`).execute(db);
  }
  await sql`
    ALTER TABLE push_events ADD CONSTRAINT push_events_source_id_fkey
      FOREIGN KEY (source_id) REFERENCES event_sources (id) ON DELETE SET NULL`.execute(db);

  await sql.raw(`CREATE TABLE ${DEFAULT_PARTITION} PARTITION OF push_events DEFAULT`).execute(db);
  // Every month the store holds. Months ahead are the maintenance job's (an empty month
  // costs its indexes' first pages, ~190 kB: a new store holds only what it needs).
  const months = await sql<{ m: Date }>`
    SELECT DISTINCT date_trunc('month', created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS m
    FROM push_events_unpartitioned`.execute(db);
  for (const { m } of months.rows) {
    await sql`SELECT ${sql.raw(ENSURE_MONTH_FUNCTION)}(${m}::timestamptz)`.execute(db);
  }

  // Time order, so that each month's BRIN on created_at is as tight as a live store's.
  const cols = COLUMNS.map((c) => (c === 'payload' ? restOf('o', 'o.held') : `o.${c}`)).join(', ');
  await sql
    .raw(`
    INSERT INTO push_events (${COLUMNS.join(', ')}, payload_held)
    SELECT ${cols}, o.held
    -- OFFSET 0: the subquery stays one, so each row's bits are worked out once, not once
    -- for every use of them
    FROM (SELECT u.*, ${heldOf('u')} AS held FROM push_events_unpartitioned u OFFSET 0) o
    ORDER BY o.created_at`)
    .execute(db);

  // The event's payload whole again: what is left of it, the keys its columns hold, and its
  // commits as stored (a better source's text, once GitHub's answer replaced a line's).
  const scalarsBack = Object.keys(HELD_BY_COLUMN)
    .map(
      (key) => `|| CASE WHEN p.payload_held & ${PAYLOAD_HELD[key as keyof typeof PAYLOAD_HELD]} <> 0
        THEN jsonb_build_object('${key}', p.${key}) ELSE '{}'::jsonb END`,
    )
    .join('\n');
  await sql
    .raw(`
    CREATE FUNCTION push_payload(p push_events) RETURNS jsonb LANGUAGE sql STABLE AS $$
      SELECT coalesce(p.payload, '{}'::jsonb)
        ${scalarsBack}
        || CASE WHEN p.payload_held & ${PAYLOAD_HELD.commits} <> 0
             THEN jsonb_build_object('commits', coalesce(push_commits_json(p.repository_id, p.ref,
               p.before, p.head, p.repo_name, p.payload_held & ${PAYLOAD_HELD.commit_urls} <> 0),
               '[]'::jsonb))
           ELSE '{}'::jsonb END
    $$`)
    .execute(db);

  for (const [name, check] of Object.entries(UNCHECKED_OF_OLD)) {
    await sql
      .raw(`ALTER TABLE push_events ADD CONSTRAINT ${name} CHECK (${check}) NOT VALID`)
      .execute(db);
  }

  await sql`
    CREATE TABLE push_keys (
      repository_id bigint NOT NULL,
      digest uuid NOT NULL,
      created_at timestamptz NOT NULL,
      event_id bigint,
      era smallint,
      CHECK ((event_id IS NULL) = (era IS NULL))
    )`.execute(db);
  await sql
    .raw(`
    INSERT INTO push_keys (repository_id, digest, created_at, event_id, era)
    SELECT repository_id, ${digestOf('p')}, created_at, id, CASE WHEN id IS NOT NULL THEN ${ERA} END
    FROM push_events p ORDER BY repository_id, 2`)
    .execute(db);
  await sql`
    ALTER TABLE push_keys ADD CONSTRAINT push_events_natural_key
      PRIMARY KEY (repository_id, digest)`.execute(db);
  await sql`
    CREATE UNIQUE INDEX push_events_event_id ON push_keys (event_id, era)
      WHERE event_id IS NOT NULL`.execute(db);

  for (const index of INDEXES) await sql.raw(index).execute(db);
  await keyTriggers(db);
  await archiveTriggers(db);
  await sql`DROP TABLE push_events_unpartitioned`.execute(db);
  await sql`ANALYZE push_events`.execute(db);
  await sql`ANALYZE push_keys`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  // Back to one table, each payload whole again (push_payload).
  await sql`ALTER TABLE push_events RENAME TO push_events_partitioned`.execute(db);
  await sql`
    CREATE TABLE push_events (LIKE push_events_partitioned INCLUDING DEFAULTS
      INCLUDING CONSTRAINTS)`.execute(db);
  const back = 'push_payload(p)';
  const cols = COLUMNS.map((c) => (c === 'payload' ? back : `p.${c}`)).join(', ');
  await sql
    .raw(
      `INSERT INTO push_events (${COLUMNS.join(', ')}) SELECT ${cols} FROM push_events_partitioned p`,
    )
    .execute(db);
  await sql`DROP FUNCTION IF EXISTS push_payload(push_events_partitioned)`.execute(db);
  await sql`DROP TABLE push_events_partitioned CASCADE`.execute(db);
  await sql`ALTER TABLE push_events DROP COLUMN payload_held`.execute(db);
  await sql`DROP TABLE push_keys`.execute(db);
  await sql`ALTER TABLE push_events ALTER COLUMN payload SET NOT NULL`.execute(db);
  await sql`
    ALTER TABLE push_events ADD CONSTRAINT push_events_natural_key
      PRIMARY KEY (repository_id, ref, before, head)`.execute(db);
  await sql`
    ALTER TABLE push_events ADD CONSTRAINT push_events_source_id_fkey
      FOREIGN KEY (source_id) REFERENCES event_sources (id) ON DELETE SET NULL`.execute(db);
  await sql
    .raw(`CREATE UNIQUE INDEX push_events_event_id ON push_events (id, (${ERA}))`)
    .execute(db);
  for (const index of INDEXES) {
    if (index.includes('push_events_head') || index.includes('push_events_id ')) continue;
    await sql.raw(index).execute(db);
  }
  await archiveTriggers(db);
  for (const fn of [
    'push_keys_inserted()',
    'push_keys_id_changed()',
    'push_keys_fixed()',
    'push_keys_deleted()',
    'push_keys_truncated()',
    `${ENSURE_MONTH_FUNCTION}(timestamptz)`,
    `${KEY_DIGEST_FUNCTION}(bigint, text, text, text)`,
    'push_commits_json(bigint, text, text, text, text, boolean)',
  ]) {
    await sql.raw(`DROP FUNCTION IF EXISTS ${fn}`).execute(db);
  }
}
