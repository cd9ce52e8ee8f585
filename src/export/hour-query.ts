import { CompiledQuery } from 'kysely';
import type { CommitsState, PushOrigin } from '../platform/db/columns.ts';
import type { Db } from '../platform/db/pool.ts';
import { type ExportRow, MAX_LINE_COMMITS } from './line.ts';

/**
 * What an hour file is read from (ADR 0130): the pushes whose created_at falls in the hour,
 * with their actor, repository and first commits, in one statement that a cursor walks.
 *
 * - Order: (created_at, id NULLS LAST, repository_id, ref, before, head), text compared
 *   byte-wise (COLLATE "C"): the natural key breaks every tie, so the order is total and
 *   the same on every database, whatever its collation — and never relies on event ids
 *   being unique (they repeat across GitHub's eras).
 * - Which pushes: every stored one except those of a repository enrichment knows to be
 *   private, and, of a push known only by webhook (no event id, first arrived by webhook),
 *   only one whose repository enrichment knows to be public: a webhook may come from a
 *   private repository, and GH Archive is the public timeline. (`VISIBLE`; every query of
 *   src/export uses it, so counts and lines agree.)
 */

/** One statement on the snapshot's connection (see src/export/snapshot.ts). */
export type Run = <R>(text: string, params?: readonly unknown[]) => Promise<R[]>;

export function runOn(trx: Db): Run {
  return async <R>(text: string, params: readonly unknown[] = []) =>
    (await trx.executeQuery<R>(CompiledQuery.raw(text, [...params]))).rows as R[];
}

/** The push (alias p) may be written to an hour file; r is its repository. */
export const VISIBLE = `coalesce(r.profile->>'private', '') <> 'true'
  AND (p.id IS NOT NULL OR p.origin <> 'webhook' OR r.profile->>'private' = 'false')`;

/** created_at as GH Archive writes it: seconds and Z, a fraction only when there is one. */
const CREATED_AT = `to_char(p.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS')
    || CASE WHEN date_trunc('second', p.created_at) = p.created_at THEN ''
            ELSE rtrim(to_char(p.created_at AT TIME ZONE 'UTC', '.US'), '0') END || 'Z'`;

/**
 * The names a line writes: those the event carried (stored with the push), so that a line
 * says what GitHub said at the time, a renamed repository under the name it had then. A
 * push stored before the store kept them (repo_name NULL: every path fills it) falls back
 * to what the store knows: the actor's login, the repository's name, and as `org` the
 * repository's owner when enrichment says it is an organization.
 */
const LOGIN = 'coalesce(p.actor_login, a.login)';
const FULL_NAME = 'coalesce(p.repo_name, r.full_name)';
const ORG = (field: 'id' | 'login') =>
  `CASE WHEN p.repo_name IS NOT NULL THEN p.org_${field}::text
    WHEN r.profile->'owner'->>'type' = 'Organization' THEN r.profile->'owner'->>'${field}' END`;

/**
 * `before` when it is a full object name; NULL for a timeline-format push, whose key holds
 * the compare URL's abbreviation or '' (src/store/timeline-key.ts): not a `before` at all.
 */
const KNOWN_BEFORE = `CASE WHEN p.before ~ '^([0-9a-f]{40}|[0-9a-f]{64})$' THEN p.before END`;

export const PUSH_ORDER = `p.created_at, p.id NULLS LAST, p.repository_id, p.ref COLLATE "C",
  p.before COLLATE "C", p.head COLLATE "C"`;

/**
 * The hour's rows ($1 = the hour's start, $2 = its end), unordered. One lateral subquery a
 * push unpacks the list its own row holds (position, sha, distinct; src/store/commits.ts) for the counts
 * that decide distinct_size, and joins commits (the messages) for the first 20 only: a push of
 * 2,048 commits never builds arrays of 2,048 messages. Only for the states whose commits a
 * line lists.
 */
const HOUR_SELECT = `
  SELECT p.id::text AS id, p.actor_id::text AS actor_id, ${LOGIN} AS login,
    p.repository_id::text AS repository_id, ${FULL_NAME} AS full_name,
    ${ORG('id')} AS org_id, ${ORG('login')} AS org_login, p.origin,
    p.push_id::text AS push_id, p.ref, p.head, ${KNOWN_BEFORE} AS before, ${CREATED_AT} AS created_at,
    p.commits_state, p.commit_count, p.distinct_size,
    f.shas, f.names, f.emails, f.messages, f.distincts,
    f.stored, f.distinct_known, f.distinct_true
  FROM push_events p
  LEFT JOIN actors a ON a.id = p.actor_id
  JOIN repositories r ON r.id = p.repository_id
  LEFT JOIN LATERAL (
    SELECT array_agg(x.sha ORDER BY x.position) FILTER (WHERE x.n <= ${MAX_LINE_COMMITS}) AS shas,
      array_agg(c.author_name ORDER BY x.position) FILTER (WHERE x.n <= ${MAX_LINE_COMMITS}) AS names,
      array_agg(c.author_email ORDER BY x.position) FILTER (WHERE x.n <= ${MAX_LINE_COMMITS}) AS emails,
      array_agg(c.message ORDER BY x.position) FILTER (WHERE x.n <= ${MAX_LINE_COMMITS}) AS messages,
      array_agg(x."distinct" ORDER BY x.position) FILTER (WHERE x.n <= ${MAX_LINE_COMMITS}) AS distincts,
      count(*)::int AS stored, count(x."distinct")::int AS distinct_known,
      (count(*) FILTER (WHERE x."distinct"))::int AS distinct_true
    FROM (
      SELECT l.position, l.sha, l."distinct", row_number() OVER (ORDER BY l.position) AS n
      FROM push_commit_list(p.commit_flags, p.commit_first_position, p.commit_shas,
        p.commit_sha_texts) l
    ) x
    -- A lateral, so that past the 20th the one-time filter skips the lookup altogether;
    -- OFFSET 0 keeps it one (a pulled-up join may be hashed over every stored commit).
    LEFT JOIN LATERAL (
      SELECT c.author_name, commit_address_text(c.author_email) AS author_email, c.message
      FROM stored_commits c
      WHERE x.n <= ${MAX_LINE_COMMITS} AND c.repository_id = p.repository_id
        AND c.sha = commit_sha_bytes(x.sha)
      OFFSET 0
    ) c ON true
  ) f ON p.commits_state IN ('complete', 'partial', 'none')
  WHERE p.created_at >= $1 AND p.created_at < $2 AND ${VISIBLE}`;

/**
 * The hour's rows in file order, for the cursor. A column this reads is one a write to must
 * change the hour's state for /archive: the triggers of migration
 * 2026-12-04T1100_archive_hour_state watch them (WATCHED there; test/integration/
 * archive-hour-state.test.ts holds the two together).
 */
export const HOUR_ROWS = `${HOUR_SELECT}
  ORDER BY ${PUSH_ORDER}`;

export interface HourRow {
  id: string | null;
  /** null: a timeline-format push, its actor named by login only. */
  actor_id: string | null;
  login: string;
  repository_id: string;
  full_name: string;
  org_id: string | null;
  org_login: string | null;
  origin: PushOrigin;
  push_id: string | null;
  ref: string;
  head: string;
  /** null when the push's key holds no full `before` (a timeline-format push). */
  before: string | null;
  created_at: string;
  commits_state: CommitsState;
  commit_count: number | null;
  distinct_size: number | null;
  shas: string[] | null;
  names: (string | null)[] | null;
  emails: (string | null)[] | null;
  messages: (string | null)[] | null;
  distincts: (boolean | null)[] | null;
  stored: number | null;
  distinct_known: number | null;
  distinct_true: number | null;
}

/** States whose stored commits are the push's commits as far as they go (the line lists them). */
const LISTED: ReadonlySet<CommitsState> = new Set(['complete', 'partial', 'none']);

/** States whose count and commits are nobody's yet: waiting for GitHub, or a mirror's claim. */
const UNSAID: ReadonlySet<CommitsState> = new Set(['pending', 'unverified']);

/**
 * A row → what its line says. A pending push says nothing of its commits (no `size`, no
 * `commits`) rather than something wrong, and neither does an unverified one: what a mirror
 * claimed is not passed on as this store's. A push whose count is unknown has no `size`;
 * `commits` are listed only when what is stored is the push's list (complete, partial: the
 * ones we hold, none: an empty one). `distinct_size` is the source's when it gave one no
 * larger than the count, else counted from the push's list when every commit is stored and
 * says whether it is distinct, else left out.
 */
export function toExportRow(r: HourRow): ExportRow {
  const size = UNSAID.has(r.commits_state) ? null : r.commit_count;
  const listed = size !== null && LISTED.has(r.commits_state);
  let distinctSize: number | null = null;
  if (size !== null) {
    if (r.distinct_size !== null && r.distinct_size <= size) distinctSize = r.distinct_size;
    else if (listed && r.stored === size && r.distinct_known === size) {
      distinctSize = r.distinct_true;
    }
  }
  const shas = r.shas ?? [];
  return {
    id: r.id,
    actorId: r.actor_id,
    login: r.login,
    repositoryId: r.repository_id,
    fullName: r.full_name,
    org: r.org_id !== null && r.org_login !== null ? { id: r.org_id, login: r.org_login } : null,
    pushId: r.push_id,
    ref: r.ref,
    head: r.head,
    before: r.before,
    createdAt: r.created_at,
    size,
    distinctSize,
    commits: listed
      ? shas.map((sha, i) => ({
          sha,
          authorName: r.names?.[i] ?? null,
          authorEmail: r.emails?.[i] ?? null,
          message: r.messages?.[i] ?? null,
          distinct: r.distincts?.[i] ?? null,
        }))
      : null,
  };
}

/** How many lines the hour's file has (a progress bar's total). */
export async function hourLines(run: Run, from: Date, to: Date): Promise<number> {
  const rows = await run<{ n: string }>(
    `SELECT count(*) AS n FROM push_events p JOIN repositories r ON r.id = p.repository_id
     WHERE p.created_at >= $1 AND p.created_at < $2 AND ${VISIBLE}`,
    [from, to],
  );
  return Number(rows[0]?.n ?? 0);
}

/**
 * Whether the store knows anything of the hour [from, to): a push in it, an archive file of
 * it read completely, or the hour lies after this instance began to watch (its first poll
 * run or webhook delivery): then an hour without pushes is an empty hour, not an unknown one.
 */
export async function hourKnown(run: Run, from: Date, to: Date): Promise<boolean> {
  const rows = await run<{ known: boolean }>(
    `SELECT EXISTS (
        SELECT 1 FROM push_events p JOIN repositories r ON r.id = p.repository_id
        WHERE p.created_at >= $1 AND p.created_at < $2 AND ${VISIBLE})
      OR EXISTS (SELECT 1 FROM backfill_files WHERE hour = $1 AND state = 'completed')
      OR $2 > (SELECT least(
            (SELECT min(started_at) FROM ingestion_runs),
            (SELECT min(received_at) FROM webhook_deliveries))) AS known`,
    [from, to],
  );
  return rows[0]?.known === true;
}
