import { PUSH_ORDER, VISIBLE } from './hour-query.ts';

/**
 * What the push_commits table of an hour is read from (ADR 0195): every stored commit of
 * every visible push of the hour whose stored commits are its list (the states a JSON line
 * lists commits for), all of them and not only the first 20, in the hour file's push order
 * and then by position. The pushes table is read from the hour file's own statement
 * (hour-query.ts), so both formats say the same of every push.
 *
 * Times come as microseconds since the epoch (decimal text, exact): DuckDB's appender
 * takes them as such, and no time zone or date style can change them.
 */

export const COMMIT_ROWS = `
  SELECT p.id::text AS event_id, p.repository_id::text AS repo_id, p.push_id::text AS push_id,
    p.ref, p.head, pc.position, pc.sha, c.author_name,
    commit_address_text(c.author_email) AS author_email,
    c.author_id::text AS author_id, c.author_login, c.message, pc."distinct",
    (extract(epoch FROM c.authored_at) * 1000000)::bigint::text AS authored_us,
    (extract(epoch FROM c.committed_at) * 1000000)::bigint::text AS committed_us
  FROM push_events p
  JOIN repositories r ON r.id = p.repository_id
  CROSS JOIN LATERAL push_commit_list(p.commit_flags, p.commit_first_position, p.commit_shas,
    p.commit_sha_texts) pc
  -- One key lookup a commit, whatever the planner thinks of the hour's size: OFFSET 0 keeps
  -- the lateral from being pulled up into a join it could hash over every stored commit.
  LEFT JOIN LATERAL (
    SELECT c.author_name, c.author_email, c.author_id, c.author_login, c.message,
      c.authored_at, c.committed_at
    FROM stored_commits c
    WHERE c.repository_id = p.repository_id AND c.sha = commit_sha_bytes(pc.sha)
    OFFSET 0
  ) c ON true
  WHERE p.created_at >= $1 AND p.created_at < $2 AND ${VISIBLE}
    AND p.commits_state IN ('complete', 'partial', 'none')
  ORDER BY ${PUSH_ORDER}, pc.position`;

export interface CommitRow {
  event_id: string | null;
  repo_id: string;
  push_id: string | null;
  ref: string;
  head: string;
  position: number;
  sha: string;
  author_name: string | null;
  author_email: string | null;
  author_id: string | null;
  author_login: string | null;
  message: string | null;
  distinct: boolean | null;
  authored_us: string | null;
  committed_us: string | null;
}

/** A line's `created_at` (`YYYY-MM-DDTHH:MM:SS[.f]Z`, UTC) as microseconds since the epoch. */
export function createdAtMicros(text: string): bigint {
  const m = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d{1,6}))?Z$/.exec(text);
  if (!m) throw new Error(`not a created_at: ${JSON.stringify(text)}`);
  const seconds = Date.parse(`${m[1]}Z`);
  return BigInt(seconds) * 1000n + BigInt((m[2] ?? '').padEnd(6, '0'));
}
