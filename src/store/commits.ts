import { CompiledQuery } from 'kysely';
import type pg from 'pg';
import type { CommitEmailMode } from '../platform/config/config.ts';
import type { CommitSource, CommitsState } from '../platform/db/columns.ts';
import type { Db } from '../platform/db/pool.ts';
import { compareIds } from '../platform/json/exact.ts';
import { addressUnderPolicy, textUnderPolicy } from './commit-emails.ts';

/**
 * Writing commits (ADR 0070), shared by every path that has them: inline commits of pushes
 * (poll pages, webhook deliveries, archive chunks) and compare answers (commits-fetch).
 * One statement per call, whatever its size: the rows travel as parameter arrays, commits
 * go in by (repository_id, sha) and the pushes' lists by key (the lock order of every writer),
 * and commit authors or committers GitHub names by id become actors pending enrichment.
 *
 * A commit's content never changes, but who told it does: each row records its `source`,
 * and a better source rewrites a row a lesser one wrote — GitHub's answer (`github`) over a
 * webhook's, a webhook's over an archive's, any of them over a mirror's or a row of unknown
 * source (written before sources were recorded). A row held from a source as good is not
 * rewritten, but columns it still lacks (an inline commit knows no author id, parents or
 * dates) are filled from a richer answer. Addresses, and addresses inside names and
 * messages, are stored under COMMIT_EMAILS (src/store/commit-emails.ts).
 *
 * A push's list is held in its own row (push_events.commit_flags and the columns
 * beside it; push_commits is a view of them). It is written only for pushes that are stored
 * (joined on push_events' natural key) — inline ones only while the push is in the state
 * their plan gave it — and an inline list only adds the positions the push does not hold, so
 * storing the same answer twice is a no-op. A fetched answer (`replace`) is the push's list:
 * it replaces whatever list the push held (a mirror's).
 */

export interface CommitRow {
  sha: string;
  authorName?: string | null;
  /** As given: storeCommits applies COMMIT_EMAILS. */
  authorEmail?: string | null;
  /** GitHub account ids are decimal strings (64-bit). */
  authorId?: string | null;
  authorLogin?: string | null;
  committerName?: string | null;
  committerEmail?: string | null;
  committerId?: string | null;
  committerLogin?: string | null;
  authoredAt?: Date | null;
  committedAt?: Date | null;
  message?: string | null;
  parents?: string[] | null;
  /** The list's `distinct` (push_commits.distinct): null when the source does not say. */
  distinct?: boolean | null;
}

export interface PushKey {
  repositoryId: string;
  ref: string;
  before: string;
  head: string;
}

/** The commits of one push, oldest first: position = index + `firstPosition` (default 0). */
export interface PushCommits {
  push: PushKey;
  commits: readonly CommitRow[];
  firstPosition?: number;
  /** Where the commits' text came from; default `github` (an answer from GitHub). */
  source?: CommitSource;
  /** Inline commits: the rows join the push only while it is in this state (its plan's). */
  ifState?: CommitsState;
}

export interface StoreCommitsOptions {
  emails: CommitEmailMode;
  /**
   * The list is the push's whole answer from GitHub: rows the push held at other positions
   * or with other commits (a mirror's) are replaced. One push per call.
   */
  replace?: boolean;
  /**
   * Every push's list is written already, as these commits make it (an archive chunk's new
   * pushes, inserted with insertedList's columns): only the commits' rows are stored, and
   * no push is read or locked. Each commit must then say its `distinct`.
   */
  listsWritten?: boolean;
}

export interface StoreCommitsResult {
  /** commits rows inserted (a commit held already is not counted). */
  commits: number;
  pushCommits: number;
  /** Actors inserted for commit authors / committers (pending enrichment: hint after COMMIT). */
  newActors: number;
}

const NOTHING: StoreCommitsResult = { commits: 0, pushCommits: 0, newActors: 0 };

/** COMMIT_EMAILS applied to one address (the rule itself: src/store/commit-emails.ts). */
export const emailFor = addressUnderPolicy;

/** How much a source is believed: a better one rewrites a lesser one's row. */
const SOURCE_RANK: Record<CommitSource, number> = { github: 3, webhook: 2, archive: 1, mirror: 0 };
// stored_commits.source is the rank itself (commit_source_code: mirror 0 … github 3); a row
// of unknown source (NULL) ranks as a mirror's.
const BETTER = 'coalesce(excluded.source, 0) > coalesce(sc.source, 0)';
/** Columns a better source's row replaces (its null included: a mirror's address is no fallback). */
const TEXT_COLUMNS = ['author_name', 'author_email', 'message'];
/** Columns only ever filled: a source that lacks one never takes it away. */
const FILLED_COLUMNS = [
  'author_id',
  'author_login',
  'committer_name',
  'committer_email',
  'committer_id',
  'committed_at',
  'authored_at',
  'parents',
];

/**
 * A commit's `distinct` when its source did not say (compare and GraphQL answers, polled
 * pushes since 2025-10): distinct in the first stored push of its repository that contains
 * it (docs/export.md). Not distinct when its commits row existed before this statement and is not
 * only this push's — first seen before the push was stored, or not in the push's list — nor
 * when a push before it in this statement lists it. Decided when the push's commits are
 * stored; a push of the same repository stored later never changes it, so it is exact when
 * the repository's earlier pushes were stored first and an upper bound otherwise
 * (docs/export.md).
 */
const DERIVED_DISTINCT = `(NOT EXISTS (
        SELECT 1 FROM stored_commits h
        WHERE h.repository_id = pc.repository_id AND h.sha = commit_sha_bytes(pc.sha)
          AND (h.first_seen_at < t.ingested_at OR NOT pc.sha = ANY (t.held_shas)))
      AND pc.first_told)`;

/**
 * Whether every row of pc before this one (by ord) with its commit is of its push: then no
 * push before it in this statement lists the commit. Counted by window, not a subquery per
 * row over pc (a scan of the whole statement for each row); a partition is null-safe, as
 * IS DISTINCT FROM is on the key.
 */
const FIRST_TOLD = `row_number() OVER (PARTITION BY pc.repository_id, pc.sha ORDER BY pc.ord)
        = row_number() OVER (PARTITION BY pc.repository_id, pc.sha, pc.ref, pc.before, pc.head
          ORDER BY pc.ord)`;

const KEY = (a: string) => `(${a}.repository_id, ${a}.ref, ${a}.before, ${a}.head)`;
const LIST_OF = (a: string) =>
  `${a}.commit_flags, ${a}.commit_first_position, ${a}.commit_shas, ${a}.commit_sha_texts`;

/**
 * The list columns of each push of `entries` (push_commits' columns, a position at most once
 * a push): aggregates for a list without holes, push_commit_list_encode (migration
 * 2026-12-05T1110_inline_commit_lists) for one with.
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
    SELECT * FROM push_commit_list_encode(g.positions, g.shas, g.distincts) WHERE NOT g.whole
    OFFSET 0
  ) x ON true`;

/**
 * The commits' rows and the actors they name: the part of every form of the statement that
 * writes stored_commits. c's first thirteen columns are $1…$13 in every form; the caller
 * names the parameters of its source column and of people's ids and logins.
 */
function commitRowsCtes(source: string, peopleIds: string, peopleLogins: string): string {
  const set = [
    ...TEXT_COLUMNS.map((c) => `${c} = CASE WHEN ${BETTER} THEN excluded.${c} ELSE sc.${c} END`),
    ...FILLED_COLUMNS.map(
      (c) =>
        `${c} = CASE WHEN ${BETTER} THEN coalesce(excluded.${c}, sc.${c}) ELSE coalesce(sc.${c}, excluded.${c}) END`,
    ),
    `source = CASE WHEN ${BETTER} THEN excluded.source ELSE sc.source END`,
  ].join(',\n      ');
  const fills = FILLED_COLUMNS.map((c) => `(sc.${c} IS NULL AND excluded.${c} IS NOT NULL)`).join(
    '\n         OR ',
  );
  return `c AS MATERIALIZED (
    SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::bigint[],
      $6::text[], $7::text[], $8::text[], $9::bigint[], $10::timestamptz[], $11::text[],
      $12::timestamptz[], $13::text[], ${source}::text[])
      AS u (repository_id, sha, author_name, author_email, author_id, author_login,
        committer_name, committer_email, committer_id, committed_at, message, authored_at,
        parents, source)
  ), people AS MATERIALIZED (
    SELECT * FROM unnest(${peopleIds}::bigint[], ${peopleLogins}::text[]) AS u (id, login)
  ), a AS (
    INSERT INTO actors (id, login)
    SELECT id, login FROM people ORDER BY id
    ON CONFLICT (id) DO NOTHING
    RETURNING 1
  ), ins AS (
    INSERT INTO stored_commits AS sc (repository_id, sha, author_name, author_email, author_id,
      author_login, committer_name, committer_email, committer_id, committed_at, message,
      authored_at, parents, source)
    SELECT repository_id, commit_sha_bytes(sha), author_name,
      commit_address_bytes(author_email), author_id, author_login, committer_name,
      commit_address_bytes(committer_email), committer_id, committed_at, message,
      -- Parents travel as one '{…}' text per commit (arrays of arrays must be rectangular).
      authored_at, parents::text[], commit_source_code(source)
    FROM c ORDER BY repository_id, commit_sha_bytes(sha)
    ON CONFLICT (repository_id, sha) DO UPDATE SET
      ${set}
      WHERE ${BETTER}
         OR ${fills}
    RETURNING xmax = 0 AS inserted
  )`;
}

function statement(replace: boolean): string {
  // A fetched answer is the push's list; an inline list only adds the positions not held.
  const given = replace ? 'NOT m.held' : 'NOT m.held AND NOT m.taken';
  const listed = replace ? given : `m.held OR (${given})`;
  return `
  WITH ${commitRowsCtes('$23', '$21', '$22')}, pc AS MATERIALIZED (
    SELECT * FROM unnest($14::bigint[], $15::text[], $16::text[], $17::text[], $18::int[],
      $19::text[], $20::boolean[], $24::text[]) WITH ORDINALITY
      AS u (repository_id, ref, before, head, position, sha, "distinct", state, ord)
  ), t AS MATERIALIZED (
    -- The stored pushes whose list this statement writes (inline ones only while in their
    -- plan's state), locked in key order, the lock order of every writer.
    SELECT p.repository_id, p.ref, p.before, p.head, p.ingested_at, ${LIST_OF('p')},
      ARRAY(SELECT l.sha FROM push_commit_list(${LIST_OF('p')}) l) AS held_shas
    FROM (SELECT DISTINCT repository_id, ref, before, head, state FROM pc) k
    JOIN push_events p ON ${KEY('p')} = ${KEY('k')}
    WHERE k.state IS NULL OR k.state = p.commits_state
    ORDER BY p.repository_id, p.ref, p.before, p.head
    FOR NO KEY UPDATE OF p
  ), held AS MATERIALIZED (
    SELECT t.repository_id, t.ref, t.before, t.head, l.position, l.sha, l."distinct"
    FROM t CROSS JOIN LATERAL push_commit_list(${LIST_OF('t')}) l
  ), e AS MATERIALIZED (
    -- This statement's entries, a position once a push (the first given), distinct decided.
    SELECT DISTINCT ON (pc.repository_id, pc.ref, pc.before, pc.head, pc.position)
      pc.repository_id, pc.ref, pc.before, pc.head, pc.position, pc.sha,
      coalesce(pc."distinct", ${DERIVED_DISTINCT}) AS "distinct"
    FROM (SELECT pc.*, ${FIRST_TOLD} AS first_told FROM pc) pc
    JOIN t ON ${KEY('t')} = ${KEY('pc')}
    ORDER BY pc.repository_id, pc.ref, pc.before, pc.head, pc.position, pc.ord
  ), m AS MATERIALIZED (
    -- Each entry beside what its push holds at its position, in one sort: matching them by
    -- a join over CTEs (row estimates of 1) was planned as a nested loop, quadratic in the
    -- statement's size (51 million comparisons for a chunk of 5,000 pushes). A partition
    -- holds an entry (e: one a position) and what the push holds there (held), entry first.
    SELECT u.*, lead(u.held, 1, false) OVER w AS taken, lead(u.sha) OVER w AS held_sha,
      lead(u."distinct") OVER w AS held_distinct
    FROM (SELECT e.*, false AS held FROM e UNION ALL SELECT h.*, true FROM held h) u
    WINDOW w AS (PARTITION BY u.repository_id, u.ref, u.before, u.head, u.position
      ORDER BY u.held)
  ), n AS (${ENCODED(`(SELECT m.repository_id, m.ref, m.before, m.head, m.position, m.sha, m."distinct" FROM m WHERE ${listed})`)}
  ), pi AS (
    UPDATE push_events p SET commit_flags = n.flags, commit_first_position = n.first_position,
      commit_shas = n.sha_bytes, commit_sha_texts = n.sha_texts
    FROM n
    WHERE ${KEY('p')} = ${KEY('n')}
      AND (${LIST_OF('p')}) IS DISTINCT FROM (n.flags, n.first_position, n.sha_bytes, n.sha_texts)
    RETURNING 1
  )
  SELECT (SELECT count(*) FILTER (WHERE inserted) FROM ins) AS commits,
         (SELECT count(*) FROM m WHERE ${given} AND EXISTS (SELECT 1 FROM pi)
            AND (m.taken AND m.held_sha = m.sha AND m.held_distinct IS NOT DISTINCT FROM m."distinct")
              IS NOT TRUE) AS push_commits,
         (SELECT count(*) FROM a) AS actors`;
}

/**
 * The statement for pushes whose lists are written already (`listsWritten`): the commits'
 * rows and the actors they name, nothing else.
 */
const ROWS_ONLY = `
  WITH ${commitRowsCtes('$16', '$14', '$15')}
  SELECT (SELECT count(*) FILTER (WHERE inserted) FROM ins) AS commits, 0 AS push_commits,
         (SELECT count(*) FROM a) AS actors`;

const STATEMENTS = { inline: statement(false), replace: statement(true) };

/** A Postgres array literal of texts (each quoted, `"` and `\\` escaped), or null. */
export function textArray(values: readonly string[] | null | undefined): string | null {
  if (!values) return null;
  return `{${values.map((v) => `"${v.replace(/["\\]/g, '\\$&')}"`).join(',')}}`;
}

/** Keeps, per (repository, sha), the row of the better source, then the one that knows most. */
function richer(a: Sourced, b: Sourced): Sourced {
  const rank = SOURCE_RANK[b.source] - SOURCE_RANK[a.source];
  if (rank !== 0) return rank > 0 ? b : a;
  const score = (c: CommitRow) =>
    (c.authorId ? 4 : 0) + (c.authoredAt ? 2 : 0) + (c.parents ? 1 : 0) + (c.committerId ? 1 : 0);
  return score(b.row) > score(a.row) ? b : a;
}

interface Sourced {
  repositoryId: string;
  row: CommitRow;
  source: CommitSource;
}

/** The statement and its parameters (run through Kysely or on a raw pg client). */
export function storeCommitsQuery(
  pushes: readonly PushCommits[],
  opts: StoreCommitsOptions,
): { sql: string; parameters: unknown[] } | null {
  const commits = new Map<string, Sourced>();
  const people = new Map<string, string>();
  const pc: unknown[][] = [[], [], [], [], [], [], [], []];
  for (const { push, commits: rows, firstPosition = 0, source = 'github', ifState } of pushes) {
    rows.forEach((row, i) => {
      const key = `${push.repositoryId}\u0000${row.sha}`;
      const held = commits.get(key);
      const mine = { repositoryId: push.repositoryId, row, source };
      commits.set(key, held ? richer(held, mine) : mine);
      pc[0]!.push(push.repositoryId);
      pc[1]!.push(push.ref);
      pc[2]!.push(push.before);
      pc[3]!.push(push.head);
      pc[4]!.push(firstPosition + i);
      pc[5]!.push(row.sha);
      pc[6]!.push(row.distinct ?? null);
      pc[7]!.push(ifState ?? null);
      if (row.authorId && row.authorLogin) people.set(row.authorId, row.authorLogin);
      if (row.committerId && row.committerLogin) people.set(row.committerId, row.committerLogin);
    });
  }
  if (commits.size === 0) return null;
  const c: unknown[][] = Array.from({ length: 14 }, () => []);
  const mode = opts.emails;
  for (const { repositoryId, row, source } of commits.values()) {
    const values = [
      repositoryId,
      row.sha,
      textUnderPolicy(row.authorName ?? null, mode),
      addressUnderPolicy(row.authorEmail, mode),
      row.authorId ?? null,
      row.authorLogin ?? null,
      textUnderPolicy(row.committerName ?? null, mode),
      addressUnderPolicy(row.committerEmail, mode),
      row.committerId ?? null,
      row.committedAt ?? null,
      textUnderPolicy(row.message ?? null, mode),
      row.authoredAt ?? null,
      textArray(row.parents),
      source,
    ];
    for (const [i, v] of values.entries()) c[i]!.push(v);
  }
  const ids = [...people.keys()].sort(compareIds);
  const logins = ids.map((id) => people.get(id)!);
  if (opts.listsWritten) {
    // DERIVED_DISTINCT decides a missing `distinct` against the push's list: only the full
    // statement can do that.
    if (pc[6]!.some((d) => d === null)) {
      throw new Error('storeCommits: listsWritten needs every commit to say its distinct');
    }
    return { sql: ROWS_ONLY, parameters: [...c.slice(0, 13), ids, logins, c[13]] };
  }
  return {
    sql: opts.replace ? STATEMENTS.replace : STATEMENTS.inline,
    parameters: [...c.slice(0, 13), ...pc.slice(0, 7), ids, logins, c[13], pc[7]],
  };
}

function resultOf(row: {
  commits: string;
  push_commits: string;
  actors: string;
}): StoreCommitsResult {
  return {
    commits: Number(row.commits),
    pushCommits: Number(row.push_commits),
    newActors: Number(row.actors),
  };
}

/** Stores the commits of `pushes` (call inside the transaction that stores the pushes). */
export async function storeCommits(
  trx: Db,
  pushes: readonly PushCommits[],
  opts: StoreCommitsOptions,
): Promise<StoreCommitsResult> {
  const q = storeCommitsQuery(pushes, opts);
  if (!q) return NOTHING;
  const r = await trx.executeQuery<{ commits: string; push_commits: string; actors: string }>(
    CompiledQuery.raw(q.sql, q.parameters),
  );
  return resultOf(r.rows[0]!);
}

/** storeCommits on a raw pg client (the archive import's chunk transaction). */
export async function storeCommitsOn(
  client: pg.ClientBase,
  pushes: readonly PushCommits[],
  opts: StoreCommitsOptions,
): Promise<StoreCommitsResult> {
  const q = storeCommitsQuery(pushes, opts);
  if (!q) return NOTHING;
  const r = await client.query<{ commits: string; push_commits: string; actors: string }>(
    q.sql,
    q.parameters,
  );
  return resultOf(r.rows[0]!);
}
