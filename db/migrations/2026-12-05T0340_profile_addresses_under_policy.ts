import { createHash } from 'node:crypto';
import { type Kysely, sql } from 'kysely';

// Frozen: the account and repository profiles enrichment stored are held to COMMIT_EMAILS
// too. Never import application code here: the rule below is a copy of
// src/store/commit-emails.ts as it was when this was written (`hash` and `drop`; a database
// recording any other policy, or none, is left as it is).
//
// Before this, `actors.profile` (GitHub's whole answer, a public `email` included) and the
// text columns beside it (a bio, a company, a description) kept an address in clear under
// every policy. This rewrites what was stored before; enrichment writes the policy's form
// from now on.
//
// It also walks again what 2026-12-04T1050_email_policy_everywhere walked (payloads,
// commits, rejected events, deliveries): that walk ordered its batches by the key read as
// text but paged by the key as a number, so in a store of more than one batch whose ids
// differ in their count of digits, rows that sort differently as text were skipped and kept
// their addresses. Here each batch orders and pages by the columns themselves.

const BATCH = 2_000;
const HASHED = /^sha256:[0-9a-f]{64}$/;
const ADDRESS_IN_TEXT =
  /[A-Za-z0-9._%+'!#$&*=?^`{|}~/-]+@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*\.[A-Za-z]{2,63}\b/g;

type Mode = 'hash' | 'drop' | 'keep';

// Node >= 21 has both; TypeScript's lib does not declare them yet.
const NativeJson = JSON as JSON & {
  rawJSON(text: string): unknown;
  isRawJSON(value: unknown): boolean;
};

function address(a: string | null, mode: Mode): string | null {
  if (a === null || mode === 'keep') return a;
  if (mode === 'drop') return null;
  if (HASHED.test(a)) return a;
  const normal = a.trim().toLowerCase();
  if (normal === '') return null;
  return `sha256:${createHash('sha256').update(normal, 'utf8').digest('hex')}`;
}

function text(t: string | null, mode: Mode): string | null {
  if (t === null || mode === 'keep' || !t.includes('@')) return t;
  return t.replace(ADDRESS_IN_TEXT, (found) => address(found, mode) ?? '');
}

function json(v: unknown, mode: Mode, field: boolean): unknown {
  if (typeof v === 'string') return field ? address(v, mode) : text(v, mode);
  if (v === null || typeof v !== 'object' || NativeJson.isRawJSON(v)) return v;
  if (Array.isArray(v)) return v.map((x) => json(x, mode, false));
  const out: Record<string, unknown> = {};
  for (const [k, x] of Object.entries(v)) {
    out[text(k, mode)!] = json(x, mode, k.toLowerCase() === 'email');
  }
  return out;
}

/**
 * jsonb text → the same value under the policy (`keep`: as it is), every number exactly as
 * stored, in one spelling: two results compare equal exactly when the values are.
 */
function jsonText(t: string, mode: Mode): string {
  const parsed = JSON.parse(t, (_k, v, ctx?: { source?: string }) =>
    typeof v === 'number' && ctx?.source !== undefined ? NativeJson.rawJSON(ctx.source) : v,
  );
  return JSON.stringify(json(parsed, mode, false));
}

type Row = Record<string, string | null> & { gpi_candidate: boolean };

interface Walk {
  table: string;
  /** The key columns (name → type), in the order of a unique index on them. */
  keyTypes: Record<string, string>;
  key: string[];
  /** Columns read (as text) only for rows that may need a change; the rest come back NULL. */
  read: string;
  /** SQL that is true for a row that may need a change. */
  candidate: string;
  /** Postgres types of the columns a rewrite may set. */
  types: Record<string, string>;
  /** The columns that change (column → new value), or null when none does. */
  rewrite: (row: Row) => Record<string, unknown> | null;
}

async function walk(db: Kysely<unknown>, w: Walk): Promise<void> {
  const keys = sql.raw(w.key.join(', '));
  let after: (string | null)[] | null = null;
  for (;;) {
    const cursor: ReturnType<typeof sql> =
      after === null ? sql`` : sql`WHERE (${keys}) > (${sql.join(after.map((v) => sql`${v}`))})`;
    const batch = (
      await sql<Row>`
        SELECT ${sql.raw(w.key.map((k) => `${k}::text AS gpi_key_${k}`).join(', '))},
          (${sql.raw(w.candidate)}) AS gpi_candidate, ${sql.raw(w.read)}
        FROM ${sql.table(w.table)} ${cursor}
        ORDER BY ${keys} LIMIT ${BATCH}`.execute(db)
    ).rows;
    if (batch.length === 0) return;
    const changed: { key: (string | null)[]; values: Record<string, unknown> }[] = [];
    for (const row of batch) {
      if (!row.gpi_candidate) continue;
      const values = w.rewrite(row);
      if (values) changed.push({ key: w.key.map((k) => row[`gpi_key_${k}`] ?? null), values });
    }
    if (changed.length > 0) await write(db, w, changed);
    const last = batch.at(-1)!;
    after = w.key.map((k) => last[`gpi_key_${k}`] ?? null);
    if (batch.length < BATCH) return;
  }
}

/** One UPDATE for a batch: each column set only on the rows whose rewrite names it. */
async function write(
  db: Kysely<unknown>,
  w: Walk,
  changed: { key: (string | null)[]; values: Record<string, unknown> }[],
): Promise<void> {
  const columns = Object.keys(w.types);
  const arrays: ReturnType<typeof sql>[] = [
    ...w.key.map((k, i) => sql`${changed.map((c) => c.key[i])}::${sql.raw(`${w.keyTypes[k]}[]`)}`),
    ...columns.flatMap((c) => [
      sql`${changed.map((x) => c in x.values)}::boolean[]`,
      sql`${changed.map((x) => (c in x.values ? x.values[c] : null))}::${sql.raw(`${w.types[c]}[]`)}`,
    ]),
  ];
  const names = [...w.key.map((k) => `k_${k}`), ...columns.flatMap((c) => [`s_${c}`, `v_${c}`])];
  const set = columns.map((c) => `${c} = CASE WHEN u.s_${c} THEN u.v_${c} ELSE t.${c} END`);
  const match = w.key.map((k) => `t.${k} = u.k_${k}`).join(' AND ');
  await sql`
    UPDATE ${sql.table(w.table)} t SET ${sql.raw(set.join(', '))}
    FROM unnest(${sql.join(arrays)}) AS u (${sql.raw(names.join(', '))})
    WHERE ${sql.raw(match)}`.execute(db);
}

/** The columns of `next` that differ from `row`. */
function changes(row: Row, next: Record<string, unknown>): Record<string, unknown> | null {
  const out = Object.fromEntries(Object.entries(next).filter(([k, v]) => v !== (row[k] ?? null)));
  return Object.keys(out).length > 0 ? out : null;
}

export async function up(db: Kysely<unknown>): Promise<void> {
  const recorded = await sql<{ value: string }>`
    SELECT value FROM stored_settings WHERE name = 'COMMIT_EMAILS'`.execute(db);
  const value = recorded.rows[0]?.value;
  if (value !== 'hash' && value !== 'drop') return;
  const mode: Mode = value;

  // The pushes' payloads: commits' addresses, and any address anywhere in them.
  await walk(db, {
    table: 'push_events',
    keyTypes: { repository_id: 'bigint', ref: 'text', before: 'text', head: 'text' },
    key: ['repository_id', 'ref', 'before', 'head'],
    candidate: `payload::text LIKE '%@%'`,
    read: `CASE WHEN payload::text LIKE '%@%' THEN payload::text END AS payload`,
    types: { payload: 'jsonb' },
    rewrite: (row) => {
      const next = jsonText(row.payload!, mode);
      return next === jsonText(row.payload!, 'keep') ? null : { payload: next };
    },
  });

  // Commits: the address columns, and addresses inside names and messages.
  const clear = (c: string) =>
    `(${c} IS NOT NULL AND ${mode === 'drop' ? 'true' : `${c} !~ '^sha256:[0-9a-f]{64}$'`})`;
  const at = (c: string) => `coalesce(${c} LIKE '%@%', false)`;
  const commitCandidate = [
    clear('author_email'),
    clear('committer_email'),
    at('author_name'),
    at('committer_name'),
    at('message'),
  ].join(' OR ');
  const ifCandidate = (c: string) => `CASE WHEN ${commitCandidate} THEN ${c} END AS ${c}`;
  await walk(db, {
    table: 'commits',
    keyTypes: { repository_id: 'bigint', sha: 'text' },
    key: ['repository_id', 'sha'],
    candidate: commitCandidate,
    read: ['author_email', 'committer_email', 'author_name', 'committer_name', 'message']
      .map(ifCandidate)
      .join(', '),
    types: {
      author_email: 'text',
      committer_email: 'text',
      author_name: 'text',
      committer_name: 'text',
      message: 'text',
    },
    rewrite: (row) =>
      changes(row, {
        author_email: address(row.author_email ?? null, mode),
        committer_email: address(row.committer_email ?? null, mode),
        author_name: text(row.author_name ?? null, mode),
        committer_name: text(row.committer_name ?? null, mode),
        message: text(row.message ?? null, mode),
      }),
  });

  // Rejected events: the event as kept, its message and the id as given.
  await walk(db, {
    table: 'rejected_events',
    keyTypes: { id: 'bigint' },
    key: ['id'],
    candidate: `raw::text LIKE '%@%' OR message LIKE '%@%' OR coalesce(event_id LIKE '%@%', false)`,
    read: `CASE WHEN raw::text LIKE '%@%' THEN raw::text END AS raw,
      message, event_id`,
    types: { raw: 'jsonb', raw_exact: 'boolean', message: 'text', event_id: 'text' },
    rewrite: (row) => {
      const next: Record<string, unknown> = {
        message: text(row.message ?? null, mode),
        event_id: text(row.event_id ?? null, mode),
      };
      if (row.raw !== null) {
        const raw = jsonText(row.raw!, mode);
        // An address put under the policy: no longer the event exactly as read.
        if (raw !== jsonText(row.raw!, 'keep')) Object.assign(next, { raw, raw_exact: false });
      }
      return changes(row, next);
    },
  });

  // Webhook deliveries keep why one was rejected, which may quote the delivery.
  await walk(db, {
    table: 'webhook_deliveries',
    keyTypes: { delivery_id: 'text' },
    key: ['delivery_id'],
    candidate: `coalesce(detail LIKE '%@%', false)`,
    read: `detail`,
    types: { detail: 'text' },
    rewrite: (row) => changes(row, { detail: text(row.detail ?? null, mode) }),
  });

  // Profiles enrichment stored: the whole answer and the text columns beside it.
  const profiles: { table: string; columns: string[] }[] = [
    { table: 'actors', columns: ['name', 'company', 'blog', 'location', 'bio'] },
    { table: 'repositories', columns: ['description'] },
  ];
  for (const { table, columns } of profiles) {
    const at = (c: string) => `coalesce(${c} LIKE '%@%', false)`;
    const candidate = [at('profile::text'), ...columns.map(at)].join(' OR ');
    await walk(db, {
      table,
      keyTypes: { id: 'bigint' },
      key: ['id'],
      candidate,
      read: [
        `CASE WHEN ${at('profile::text')} THEN profile::text END AS profile`,
        ...columns.map((c) => `CASE WHEN ${candidate} THEN ${c} END AS ${c}`),
      ].join(', '),
      types: { profile: 'jsonb', ...Object.fromEntries(columns.map((c) => [c, 'text'])) },
      rewrite: (row) => {
        const next: Record<string, unknown> = Object.fromEntries(
          columns.map((c) => [c, text(row[c] ?? null, mode)]),
        );
        if (row.profile !== null && row.profile !== undefined) {
          const profile = jsonText(row.profile, mode);
          if (profile !== jsonText(row.profile, 'keep')) next.profile = profile;
        }
        return changes(row, next);
      },
    });
  }
}

export async function down(): Promise<void> {
  // An address hashed or dropped is not put back.
}
