import { createHash } from 'node:crypto';
import { CompiledQuery } from 'kysely';
import type pg from 'pg';
import type { CommitEmailMode } from '../config.ts';
import type { Db } from '../db/pool.ts';
import { compareIds } from '../json/exact.ts';

/**
 * Writing commits (ADR 0070), shared by every path that has them: inline commits of pushes
 * (poll pages, webhook deliveries, archive chunks) and compare answers (commits-fetch).
 * One statement per call, whatever its size: the rows travel as parameter arrays, commits
 * go in by (repository_id, sha) and push_commits by key (the lock order of every writer),
 * and commit authors or committers GitHub names by id become actors pending enrichment.
 *
 * A commit's content never changes: a commit held already is not rewritten, but columns
 * it still lacks (an inline commit knows no author id, parents or dates) are filled from a
 * richer answer. push_commits rows are written only for pushes that are stored (joined on
 * push_events' natural key), ON CONFLICT DO NOTHING, so storing the same answer twice is a
 * no-op.
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
  /** push_commits.distinct: null when the source does not say. */
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
}

export interface StoreCommitsOptions {
  emails: CommitEmailMode;
}

export interface StoreCommitsResult {
  /** commits rows inserted (a commit held already is not counted). */
  commits: number;
  pushCommits: number;
  /** Actors inserted for commit authors / committers (pending enrichment: hint after COMMIT). */
  newActors: number;
}

const NOTHING: StoreCommitsResult = { commits: 0, pushCommits: 0, newActors: 0 };

const HASHED = /^sha256:[0-9a-f]{64}$/;

/** COMMIT_EMAILS applied to one address: a stable hash joins an address to itself only. */
export function emailFor(address: string | null | undefined, mode: CommitEmailMode): string | null {
  if (address === null || address === undefined || mode === 'drop') return null;
  if (mode === 'keep') return address;
  // Hashed already (another instance's hour file, ADR 0130): hashing it again would join
  // it to nothing, where as it is it joins the same address hashed here.
  if (HASHED.test(address)) return address;
  const normal = address.trim().toLowerCase();
  if (normal === '') return null;
  return `sha256:${createHash('sha256').update(normal, 'utf8').digest('hex')}`;
}

const STATEMENT = `
  WITH c AS MATERIALIZED (
    SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::bigint[],
      $6::text[], $7::text[], $8::text[], $9::bigint[], $10::timestamptz[], $11::text[],
      $12::timestamptz[], $13::text[])
      AS u (repository_id, sha, author_name, author_email, author_id, author_login,
        committer_name, committer_email, committer_id, committed_at, message, authored_at,
        parents)
  ), pc AS MATERIALIZED (
    SELECT * FROM unnest($14::bigint[], $15::text[], $16::text[], $17::text[], $18::int[],
      $19::text[], $20::boolean[])
      AS u (repository_id, ref, before, head, position, sha, "distinct")
  ), people AS MATERIALIZED (
    SELECT * FROM unnest($21::bigint[], $22::text[]) AS u (id, login)
  ), a AS (
    INSERT INTO actors (id, login)
    SELECT id, login FROM people ORDER BY id
    ON CONFLICT (id) DO NOTHING
    RETURNING 1
  ), ins AS (
    INSERT INTO commits (repository_id, sha, author_name, author_email, author_id,
      author_login, committer_name, committer_email, committer_id, committed_at, message,
      authored_at, parents)
    SELECT repository_id, sha, author_name, author_email, author_id, author_login,
      committer_name, committer_email, committer_id, committed_at, message, authored_at,
      -- Parents travel as one '{…}' text per commit (arrays of arrays must be rectangular).
      parents::text[]
    FROM c ORDER BY repository_id, sha
    ON CONFLICT (repository_id, sha) DO UPDATE SET
      author_id = coalesce(commits.author_id, excluded.author_id),
      author_login = coalesce(commits.author_login, excluded.author_login),
      committer_name = coalesce(commits.committer_name, excluded.committer_name),
      committer_email = coalesce(commits.committer_email, excluded.committer_email),
      committer_id = coalesce(commits.committer_id, excluded.committer_id),
      committed_at = coalesce(commits.committed_at, excluded.committed_at),
      authored_at = coalesce(commits.authored_at, excluded.authored_at),
      parents = coalesce(commits.parents, excluded.parents)
      WHERE (commits.author_id IS NULL AND excluded.author_id IS NOT NULL)
         OR (commits.author_login IS NULL AND excluded.author_login IS NOT NULL)
         OR (commits.committer_name IS NULL AND excluded.committer_name IS NOT NULL)
         OR (commits.committer_email IS NULL AND excluded.committer_email IS NOT NULL)
         OR (commits.committer_id IS NULL AND excluded.committer_id IS NOT NULL)
         OR (commits.committed_at IS NULL AND excluded.committed_at IS NOT NULL)
         OR (commits.authored_at IS NULL AND excluded.authored_at IS NOT NULL)
         OR (commits.parents IS NULL AND excluded.parents IS NOT NULL)
    RETURNING xmax = 0 AS inserted
  ), pi AS (
    INSERT INTO push_commits (repository_id, ref, before, head, position, sha, "distinct")
    SELECT pc.repository_id, pc.ref, pc.before, pc.head, pc.position, pc.sha, pc."distinct"
    FROM pc JOIN push_events p
      ON (p.repository_id, p.ref, p.before, p.head) = (pc.repository_id, pc.ref, pc.before, pc.head)
    ORDER BY pc.repository_id, pc.ref, pc.before, pc.head, pc.position
    ON CONFLICT DO NOTHING
    RETURNING 1
  )
  SELECT (SELECT count(*) FILTER (WHERE inserted) FROM ins) AS commits,
         (SELECT count(*) FROM pi) AS push_commits,
         (SELECT count(*) FROM a) AS actors`;

function textArray(values: readonly string[] | null | undefined): string | null {
  if (!values) return null;
  return `{${values.map((v) => `"${v.replace(/["\\]/g, '\\$&')}"`).join(',')}}`;
}

/** Keeps, per (repository, sha), the row that knows most (an id, dates, parents). */
function richer(a: CommitRow, b: CommitRow): CommitRow {
  const score = (c: CommitRow) =>
    (c.authorId ? 4 : 0) + (c.authoredAt ? 2 : 0) + (c.parents ? 1 : 0) + (c.committerId ? 1 : 0);
  return score(b) > score(a) ? b : a;
}

/** The statement and its parameters (run through Kysely or on a raw pg client). */
export function storeCommitsQuery(
  pushes: readonly PushCommits[],
  opts: StoreCommitsOptions,
): { sql: string; parameters: unknown[] } | null {
  const commits = new Map<string, { repositoryId: string; row: CommitRow }>();
  const people = new Map<string, string>();
  const pc: unknown[][] = [[], [], [], [], [], [], []];
  for (const { push, commits: rows, firstPosition = 0 } of pushes) {
    rows.forEach((row, i) => {
      const key = `${push.repositoryId}\u0000${row.sha}`;
      const held = commits.get(key);
      commits.set(key, {
        repositoryId: push.repositoryId,
        row: held ? richer(held.row, row) : row,
      });
      pc[0]!.push(push.repositoryId);
      pc[1]!.push(push.ref);
      pc[2]!.push(push.before);
      pc[3]!.push(push.head);
      pc[4]!.push(firstPosition + i);
      pc[5]!.push(row.sha);
      pc[6]!.push(row.distinct ?? null);
      if (row.authorId && row.authorLogin) people.set(row.authorId, row.authorLogin);
      if (row.committerId && row.committerLogin) people.set(row.committerId, row.committerLogin);
    });
  }
  if (commits.size === 0) return null;
  const c: unknown[][] = Array.from({ length: 13 }, () => []);
  for (const { repositoryId, row } of commits.values()) {
    const values = [
      repositoryId,
      row.sha,
      row.authorName ?? null,
      emailFor(row.authorEmail, opts.emails),
      row.authorId ?? null,
      row.authorLogin ?? null,
      row.committerName ?? null,
      emailFor(row.committerEmail, opts.emails),
      row.committerId ?? null,
      row.committedAt ?? null,
      row.message ?? null,
      row.authoredAt ?? null,
      textArray(row.parents),
    ];
    for (const [i, v] of values.entries()) c[i]!.push(v);
  }
  const ids = [...people.keys()].sort(compareIds);
  return {
    sql: STATEMENT,
    parameters: [...c, ...pc, ids, ids.map((id) => people.get(id)!)],
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
