import type pg from 'pg';

/**
 * The growth bench's `--fill copies` (bench/growth.ts): an hour of the store grown by a copy
 * of what `bin/backfill` stored for one of the first hours, made in SQL, because importing
 * a hundred generated hours takes hours of wall time.
 *
 * A copy of source hour `j` into hour `k` (of a run whose hour 0 starts at `firstHour`):
 * every row shifted by `k - j` hours; new event ids and push ids, shifted by the span the
 * generator gives an hour (so a copy's ids are where the generated hour `k`'s would be);
 * every sha — a push's `head` and `before`, its inline list (`commit_shas`, 20 or 32 bytes
 * a sha; `commit_sha_texts`) and `stored_commits.sha` — rewritten by one deterministic function of
 * the sha and `k`, so the lists still point at their commits; the same repositories and
 * actors (GH Archive repeats them). Rows go through the normal INSERT into `stored_commits` (under the `commits` view) and the
 * partitioned `push_events` (whose triggers key the pushes in `push_keys` and mark the hour
 * changed), in the order the store's writers use (`push_events` by repository_id, ref,
 * before, head; `stored_commits` by repository_id, sha), so every index grows as it would. The
 * hour's `backfill_files` row is copied too (the file renamed to the hour's).
 *
 * The columns are read from information_schema when the source is taken: a column this
 * file does not name is copied as it is, so a column added to a table needs nothing here,
 * and a sha column stored as bytea instead of text is rewritten by its type. What a copy
 * changes is the one table `COPIES` below.
 */

/** What a copy of one table changes; every other column is copied as it is. */
interface TableCopy {
  /** The order its writers insert in (the index build order that follows). */
  order: string[];
  /** Column → SQL of the copied value (`s` the source row); see `Shift` for the names. */
  set: Record<string, string>;
  /** How the source hour of a row is told, when the source is taken. */
  hourOf?: string;
}

/** The shas of a table: rewritten by their type (text, text[], bytea), the list's width. */
const SHA_COLUMNS = new Set([
  'head',
  'before',
  'sha',
  'parents',
  'commit_shas',
  'commit_sha_texts',
]);
/** A bytea column of several shas: the width of one (otherwise the whole value is one sha). */
const SHA_WIDTH: Record<string, string> = {
  commit_shas: 's.commit_shas_width',
};

// The placeholders a copy's statement fills in (inlined literals: numbers and hour names
// this process made, never input).
const HOURS = ':hours'; // k - j
const EVENT_SHIFT = ':event_shift';
const PUSH_SHIFT = ':push_shift';
const FROM_NAME = ':from_name';
const TO_NAME = ':to_name';
const shifted = (c: string) => `s.${c} + ${HOURS} * interval '1 hour'`;

const COPIES: Record<string, TableCopy> = {
  stored_commits: {
    order: ['repository_id', 'sha'],
    set: { first_seen_at: 'now()' },
  },
  push_events: {
    order: ['repository_id', 'ref', 'before', 'head'],
    set: {
      id: `s.id + ${EVENT_SHIFT}`,
      push_id: `s.push_id + ${PUSH_SHIFT}`,
      created_at: shifted('created_at'),
      ingested_at: 'now()',
    },
  },
  backfill_files: {
    order: [],
    set: {
      file: `replace(s.file, ${FROM_NAME}, ${TO_NAME})`,
      hour: shifted('hour'),
      writes_from: shifted('writes_from'),
      writes_to: shifted('writes_to'),
      started_at: 'now()',
      updated_at: 'now()',
      finished_at: 'now()',
    },
  },
};

/** Tables in the order an hour is copied: commits before the lists that name them. */
const TABLE_ORDER = ['stored_commits', 'push_events', 'backfill_files'] as const;

const q = (name: string) => `"${name.replaceAll('"', '""')}"`;
const src = (table: string) => `growth_src_${table}`;
const lit = (s: string) => `'${s.replaceAll("'", "''")}'`;

interface Column {
  name: string;
  /** information_schema udt_name: text, bytea, _text (text[]), … */
  udt: string;
}

// The rewrite of one sha (its bytes, 20 or 32) in copy `salt`: the first as many bytes of
// SHA-256(sha ‖ salt). A hex text is rewritten through its bytes, so the text and bytea
// forms of one sha stay one sha; a text that is not a sha's hex is kept as it is.
const FUNCTIONS = [
  `CREATE OR REPLACE FUNCTION pg_temp.growth_sha_bytes(b bytea, salt bytea) RETURNS bytea
     LANGUAGE sql IMMUTABLE AS $$ SELECT substr(sha256(b || salt), 1, octet_length(b)) $$`,
  `CREATE OR REPLACE FUNCTION pg_temp.growth_sha_text(t text, salt bytea) RETURNS text
     LANGUAGE sql IMMUTABLE AS $$
       SELECT CASE WHEN t ~ '^([0-9a-f]{40}|[0-9a-f]{64})$'
         THEN encode(pg_temp.growth_sha_bytes(decode(t, 'hex'), salt), 'hex') ELSE t END $$`,
  `CREATE OR REPLACE FUNCTION pg_temp.growth_sha_list(b bytea, width int, salt bytea)
     RETURNS bytea LANGUAGE sql IMMUTABLE AS $$
       SELECT string_agg(pg_temp.growth_sha_bytes(substr(b, i, width), salt), ''::bytea ORDER BY i)
       FROM generate_series(1, octet_length(b), width) AS i $$`,
  `CREATE OR REPLACE FUNCTION pg_temp.growth_sha_texts(a text[], salt bytea) RETURNS text[]
     LANGUAGE sql IMMUTABLE AS $$
       SELECT array_agg(pg_temp.growth_sha_text(x, salt) ORDER BY n)
       FROM unnest(a) WITH ORDINALITY AS u(x, n) $$`,
];

function shaExpr(c: Column, salt: string): string {
  const col = `s.${q(c.name)}`;
  if (c.udt === 'text') return `pg_temp.growth_sha_text(${col}, ${salt})`;
  if (c.udt === '_text') return `pg_temp.growth_sha_texts(${col}, ${salt})`;
  if (c.udt === 'bytea') {
    const width = SHA_WIDTH[c.name] ?? `octet_length(${col})`;
    return `pg_temp.growth_sha_list(${col}, ${width}, ${salt})`;
  }
  throw new Error(`growth copy: sha column ${c.name} of type ${c.udt}`);
}

export interface CopySource {
  /** The source hours' rows each table holds, counted when the source was taken. */
  rows: Record<string, Map<number, number>>;
  /** push_commits rows (the lists' entries) of each source hour. */
  listEntries: Map<number, number>;
  /** Rows of `commits` when the source was taken (the source hours' and nothing else). */
  commitsBefore: number;
  columns: Record<string, Column[]>;
}

export interface CopyTarget {
  /** Hour index of the source (0 = the run's first hour) and of the copy. */
  source: number;
  target: number;
  /** Event ids and push ids an hour spans in the generator's layout. */
  eventsPerHour: number;
  pushesPerHour: number;
  sourceName: string;
  targetName: string;
}

async function columnsOf(client: pg.ClientBase, table: string): Promise<Column[]> {
  const r = await client.query<{ name: string; udt: string }>(
    `SELECT column_name AS name, udt_name AS udt FROM information_schema.columns
      WHERE table_schema = current_schema() AND table_name = $1
        AND is_generated = 'NEVER' AND coalesce(identity_generation, '') <> 'ALWAYS'
      ORDER BY ordinal_position`,
    [table],
  );
  if (r.rows.length === 0) throw new Error(`growth copy: no columns for ${table}`);
  return r.rows;
}

/**
 * Takes the source: the rows of hours `0 … hours-1` (from `firstHour`) each table holds, into
 * temporary tables of `client`'s session (which every later copy must use). Called when the
 * store holds those hours and nothing else of them; their commits are the ones their lists
 * name (found through the push_commits view).
 */
export async function takeCopySource(
  client: pg.ClientBase,
  firstHour: Date,
  hours: number,
): Promise<CopySource> {
  for (const f of FUNCTIONS) await client.query(f);
  const from = lit(firstHour.toISOString());
  const until = `${from}::timestamptz + ${hours} * interval '1 hour'`;
  const hourOf = (c: string) =>
    `floor(extract(epoch FROM ${c} - ${from}::timestamptz) / 3600)::int`;
  const columns: Record<string, Column[]> = {};
  for (const t of TABLE_ORDER) columns[t] = await columnsOf(client, t);

  await client.query(`DROP TABLE IF EXISTS ${TABLE_ORDER.map(src).join(', ')}`);
  await client.query(
    `CREATE TEMP TABLE ${src('push_events')} AS
       SELECT t.*, ${hourOf('t.created_at')} AS growth_hour,
         octet_length(t.commit_shas) / nullif(length(t.commit_flags), 0) AS commit_shas_width
       FROM push_events t WHERE t.created_at >= ${from}::timestamptz AND t.created_at < ${until}`,
  );
  await client.query(
    `CREATE TEMP TABLE ${src('stored_commits')} AS
       SELECT c.*, h.growth_hour FROM stored_commits c
       JOIN (SELECT DISTINCT s.growth_hour, pc.repository_id, pc.sha
             FROM ${src('push_events')} s
             JOIN push_commits pc ON (pc.repository_id, pc.ref, pc.before, pc.head)
                                   = (s.repository_id, s.ref, s.before, s.head)) h
         ON h.repository_id = c.repository_id AND commit_sha_bytes(h.sha) = c.sha`,
  );
  await client.query(
    `CREATE TEMP TABLE ${src('backfill_files')} AS
       SELECT t.*, ${hourOf('t.writes_from')} AS growth_hour FROM backfill_files t
       WHERE t.writes_from >= ${from}::timestamptz AND t.writes_from < ${until}`,
  );
  const rows: Record<string, Map<number, number>> = {};
  for (const t of TABLE_ORDER) {
    const r = await client.query<{ h: number; n: string }>(
      `SELECT growth_hour AS h, count(*) AS n FROM ${src(t)} GROUP BY 1`,
    );
    rows[t] = new Map(r.rows.map((x) => [x.h, Number(x.n)]));
  }
  const entries = await client.query<{ h: number; n: string }>(
    `SELECT s.growth_hour AS h, count(*) AS n FROM ${src('push_events')} s
       JOIN push_commits pc ON (pc.repository_id, pc.ref, pc.before, pc.head)
                             = (s.repository_id, s.ref, s.before, s.head)
     GROUP BY 1`,
  );
  for (const t of TABLE_ORDER) await client.query(`ANALYZE ${src(t)}`);
  const before = await client.query<{ n: string }>('SELECT count(*) AS n FROM stored_commits');
  return {
    rows,
    listEntries: new Map(entries.rows.map((x) => [x.h, Number(x.n)])),
    commitsBefore: Number(before.rows[0]!.n),
    columns,
  };
}

/** The statement that copies `table`'s rows of the source hour as the copy `c`. */
export function copyStatement(table: string, columns: Column[], c: CopyTarget): string {
  const spec = COPIES[table]!;
  const salt = `int4send(${c.target})`;
  const fill = (sqlText: string) =>
    sqlText
      .replaceAll(EVENT_SHIFT, String((c.target - c.source) * c.eventsPerHour))
      .replaceAll(PUSH_SHIFT, String((c.target - c.source) * c.pushesPerHour))
      .replaceAll(FROM_NAME, lit(c.sourceName))
      .replaceAll(TO_NAME, lit(c.targetName))
      .replaceAll(HOURS, String(c.target - c.source));
  const exprs = columns.map((col) => {
    const e =
      spec.set[col.name] ?? (SHA_COLUMNS.has(col.name) ? shaExpr(col, salt) : `s.${q(col.name)}`);
    return `${fill(e)} AS ${q(col.name)}`;
  });
  const names = columns.map((col) => q(col.name)).join(', ');
  const order = spec.order.length
    ? `ORDER BY ${spec.order.map((o) => `x.${q(o)}`).join(', ')}`
    : '';
  return `INSERT INTO ${table} (${names})
    SELECT ${columns.map((col) => `x.${q(col.name)}`).join(', ')}
    FROM (SELECT ${exprs.join(',\n      ')}
          FROM ${src(table)} s WHERE s.growth_hour = ${c.source}) x
    ${order}`;
}

/** Copies one hour, in one transaction; the rows each table received. */
export async function copyHour(
  client: pg.ClientBase,
  source: CopySource,
  c: CopyTarget,
): Promise<Record<string, number>> {
  const counts: Record<string, number> = {};
  await client.query('BEGIN');
  try {
    for (const t of TABLE_ORDER) {
      const r = await client.query(copyStatement(t, source.columns[t]!, c));
      counts[t] = r.rowCount ?? 0;
      const want = source.rows[t]!.get(c.source) ?? 0;
      if (counts[t] !== want) {
        throw new Error(
          `growth copy: ${t} of hour ${c.target}: ${counts[t]} rows, the source ${want}`,
        );
      }
    }
    await client.query('COMMIT');
  } catch (err) {
    await client.query('ROLLBACK');
    throw err;
  }
  return counts;
}
