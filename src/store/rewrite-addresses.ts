import { sql } from 'kysely';
import type { CommitEmailMode } from '../platform/config/config.ts';
import type { Db } from '../platform/db/pool.ts';
import { parseJsonVerbatim } from '../platform/json/exact.ts';
import { addressUnderPolicy, jsonUnderPolicy, textUnderPolicy } from './commit-emails.ts';

/**
 * Stored rows put under a stricter COMMIT_EMAILS (ADR 0184): what `bin/setup --reconfigure`
 * runs before it records `keep → hash`, `keep → drop` or `hash → drop`, so that no row
 * stored under the old value keeps an address the new one forbids. The same places the
 * policy holds at write time: payloads, commit rows, rejected events, webhook rejections,
 * and the account and repository profiles enrichment stored.
 *
 * Big tables are walked in key order (the key columns themselves, never their text: ids of
 * different lengths sort otherwise as text), BATCH rows a statement, each batch's UPDATE committed
 * on its own: an interrupted run leaves rows done and rows not yet, and running it again
 * (the setting is recorded only after it finished) does the rest; a row already under the
 * policy is left as it is.
 */

const BATCH = 2_000;

type Row = Record<string, string | null> & { gpi_candidate: boolean };

interface Walk {
  table:
    | 'push_events'
    | 'stored_commits'
    | 'rejected_events'
    | 'webhook_deliveries'
    | 'actors'
    | 'repositories';
  /** Key columns and their types, in the order of a unique index on them. */
  key: Record<string, string>;
  candidate: string;
  read: string;
  /** Types of the columns a rewrite may set. */
  types: Record<string, string>;
  /** A column stored otherwise than it is read: the SQL function that stores a value. */
  storedBy?: Record<string, string>;
  rewrite: (row: Row) => Record<string, unknown> | null;
}

/** Rows rewritten, by table. */
export type RewriteCounts = Record<Exclude<Walk['table'], 'stored_commits'> | 'commits', number>;

async function walk(db: Db, w: Walk): Promise<number> {
  const keys = Object.keys(w.key);
  const keyList = sql.raw(keys.join(', '));
  let after: (string | null)[] | null = null;
  let changedRows = 0;
  for (;;) {
    const cursor: ReturnType<typeof sql> =
      after === null
        ? sql``
        : sql`WHERE (${keyList}) > (${sql.join(after.map((v, i) => sql`${v}::${sql.raw(w.key[keys[i]!]!)}`))})`;
    const batch = (
      await sql<Row>`
        SELECT ${sql.raw(keys.map((k) => `${k}::text AS gpi_key_${k}`).join(', '))},
          (${sql.raw(w.candidate)}) AS gpi_candidate, ${sql.raw(w.read)}
        FROM ${sql.table(w.table)} ${cursor}
        ORDER BY ${keyList} LIMIT ${BATCH}`.execute(db)
    ).rows;
    if (batch.length === 0) break;
    const changed: { key: (string | null)[]; values: Record<string, unknown> }[] = [];
    for (const row of batch) {
      if (!row.gpi_candidate) continue;
      const values = w.rewrite(row);
      if (values) changed.push({ key: keys.map((k) => row[`gpi_key_${k}`] ?? null), values });
    }
    if (changed.length > 0) await write(db, w, changed);
    changedRows += changed.length;
    const last = batch.at(-1)!;
    after = keys.map((k) => last[`gpi_key_${k}`] ?? null);
    if (batch.length < BATCH) break;
  }
  return changedRows;
}

/** One UPDATE for a batch: each column set only on the rows whose rewrite names it. */
async function write(
  db: Db,
  w: Walk,
  changed: { key: (string | null)[]; values: Record<string, unknown> }[],
): Promise<void> {
  const keys = Object.keys(w.key);
  const columns = Object.keys(w.types);
  const arrays = [
    ...keys.map((k, i) => sql`${changed.map((c) => c.key[i])}::${sql.raw(`${w.key[k]}[]`)}`),
    ...columns.flatMap((c) => [
      sql`${changed.map((x) => c in x.values)}::boolean[]`,
      sql`${changed.map((x) => (c in x.values ? x.values[c] : null))}::${sql.raw(`${w.types[c]}[]`)}`,
    ]),
  ];
  const names = [...keys.map((k) => `k_${k}`), ...columns.flatMap((c) => [`s_${c}`, `v_${c}`])];
  const stored = (c: string) => (w.storedBy?.[c] ? `${w.storedBy[c]}(u.v_${c})` : `u.v_${c}`);
  const set = columns.map((c) => `${c} = CASE WHEN u.s_${c} THEN ${stored(c)} ELSE t.${c} END`);
  const match = keys.map((k) => `t.${k} = u.k_${k}`).join(' AND ');
  await sql`
    UPDATE ${sql.table(w.table)} t SET ${sql.raw(set.join(', '))}
    FROM unnest(${sql.join(arrays)}) AS u (${sql.raw(names.join(', '))})
    WHERE ${sql.raw(match)}`.execute(db);
}

/** The columns of `next` that differ from `row`, or null. */
function changes(row: Row, next: Record<string, unknown>): Record<string, unknown> | null {
  const out = Object.fromEntries(Object.entries(next).filter(([k, v]) => v !== (row[k] ?? null)));
  return Object.keys(out).length > 0 ? out : null;
}

/** jsonb text under the policy, or null when the value does not change. */
function jsonChange(text: string, mode: CommitEmailMode): string | null {
  const value = parseJsonVerbatim(text);
  const under = jsonUnderPolicy(value, mode);
  return under === value ? null : JSON.stringify(under);
}

/** Rewrites every stored row that holds what `mode` forbids; `keep` rewrites nothing. */
export async function rewriteStoredAddresses(
  db: Db,
  mode: CommitEmailMode,
): Promise<RewriteCounts> {
  const counts: RewriteCounts = {
    push_events: 0,
    commits: 0,
    rejected_events: 0,
    webhook_deliveries: 0,
    actors: 0,
    repositories: 0,
  };
  if (mode === 'keep') return counts;
  counts.push_events = await walk(db, {
    table: 'push_events',
    key: { repository_id: 'bigint', ref: 'text', before: 'text', head: 'text' },
    candidate: `payload::text LIKE '%@%'`,
    read: `CASE WHEN payload::text LIKE '%@%' THEN payload::text END AS payload`,
    types: { payload: 'jsonb' },
    rewrite: (row) => {
      const payload = jsonChange(row.payload!, mode);
      return payload === null ? null : { payload };
    },
  });
  // An address column not under the policy: any value under drop, a clear one under hash.
  // The table holds addresses as bytes (commit_address_bytes); they are read and written
  // as the text the commits view shows.
  const asText = (c: string) => (c.endsWith('_email') ? `commit_address_text(${c})` : c);
  const address = (c: string) =>
    `(${c} IS NOT NULL AND ${mode === 'drop' ? 'true' : `${asText(c)} !~ '^sha256:[0-9a-f]{64}$'`})`;
  const at = (c: string) => `coalesce(${c} LIKE '%@%', false)`;
  const candidate = [
    address('author_email'),
    address('committer_email'),
    at('author_name'),
    at('committer_name'),
    at('message'),
  ].join(' OR ');
  const text = ['author_email', 'committer_email', 'author_name', 'committer_name', 'message'];
  counts.commits = await walk(db, {
    // The table under the commits view: its key is the sha's bytes (bytea's text form,
    // '\\x…', is what the cursor carries between batches).
    table: 'stored_commits',
    key: { repository_id: 'bigint', sha: 'bytea' },
    candidate,
    read: text.map((c) => `CASE WHEN ${candidate} THEN ${asText(c)} END AS ${c}`).join(', '),
    types: Object.fromEntries(text.map((c) => [c, 'text'])),
    storedBy: { author_email: 'commit_address_bytes', committer_email: 'commit_address_bytes' },
    rewrite: (row) =>
      changes(row, {
        author_email: addressUnderPolicy(row.author_email ?? null, mode),
        committer_email: addressUnderPolicy(row.committer_email ?? null, mode),
        author_name: textUnderPolicy(row.author_name ?? null, mode),
        committer_name: textUnderPolicy(row.committer_name ?? null, mode),
        message: textUnderPolicy(row.message ?? null, mode),
      }),
  });
  counts.rejected_events = await walk(db, {
    table: 'rejected_events',
    key: { id: 'bigint' },
    candidate: `raw::text LIKE '%@%' OR message LIKE '%@%' OR coalesce(event_id LIKE '%@%', false)`,
    read: `CASE WHEN raw::text LIKE '%@%' THEN raw::text END AS raw, message, event_id`,
    types: { raw: 'jsonb', raw_exact: 'boolean', message: 'text', event_id: 'text' },
    rewrite: (row) => {
      const next: Record<string, unknown> = {
        message: textUnderPolicy(row.message ?? null, mode),
        event_id: textUnderPolicy(row.event_id ?? null, mode),
      };
      const raw = row.raw === null ? null : jsonChange(row.raw!, mode);
      // An address put under the policy: no longer the event exactly as read.
      if (raw !== null) Object.assign(next, { raw, raw_exact: false });
      return changes(row, next);
    },
  });
  counts.webhook_deliveries = await walk(db, {
    table: 'webhook_deliveries',
    key: { delivery_id: 'text' },
    candidate: `coalesce(detail LIKE '%@%', false)`,
    read: 'detail',
    types: { detail: 'text' },
    rewrite: (row) => changes(row, { detail: textUnderPolicy(row.detail ?? null, mode) }),
  });
  const profiles = [
    { table: 'actors', columns: ['name', 'company', 'blog', 'location', 'bio'] },
    { table: 'repositories', columns: ['description'] },
  ] as const;
  for (const { table, columns } of profiles) {
    const at = (c: string) => `coalesce(${c} LIKE '%@%', false)`;
    const candidate = [at('profile::text'), ...columns.map(at)].join(' OR ');
    counts[table] = await walk(db, {
      table,
      key: { id: 'bigint' },
      candidate,
      read: [
        `CASE WHEN ${at('profile::text')} THEN profile::text END AS profile`,
        ...columns.map((c) => `CASE WHEN ${candidate} THEN ${c} END AS ${c}`),
      ].join(', '),
      types: { profile: 'jsonb', ...Object.fromEntries(columns.map((c) => [c, 'text'])) },
      rewrite: (row) => {
        const next: Record<string, unknown> = Object.fromEntries(
          columns.map((c) => [c, textUnderPolicy(row[c] ?? null, mode)]),
        );
        const profile = row.profile == null ? null : jsonChange(row.profile, mode);
        if (profile !== null) next.profile = profile;
        return changes(row, next);
      },
    });
  }
  return counts;
}
