/**
 * One stored push → one line of a GH Archive hour file (ADR 0130): a PushEvent as the
 * Events API served it before 2025-10, with `size`, `distinct_size` and up to 20 commits
 * back. Built by hand, key by key, so the bytes depend on the row alone: the same row is
 * the same line on every machine and every run (JSON.stringify only ever sees strings).
 *
 * Ids arrive as Postgres bigint text (canonical decimal digits, 64-bit) and are written
 * as JSON numbers with every digit, as GitHub writes them.
 */

/** At most this many commits in a line: the Events API's cap (GitHub's docs). */
export const MAX_LINE_COMMITS = 20;

const API = 'https://api.github.com';
const AVATARS = 'https://avatars.githubusercontent.com/u';

/** One commit of a push, as the tables hold it (position order, oldest first). */
export interface LineCommit {
  sha: string;
  authorName: string | null;
  /** As COMMIT_EMAILS stored it: 'sha256:<hex>', the address, or null. */
  authorEmail: string | null;
  message: string | null;
  distinct: boolean | null;
}

/** What one line is built from: a push_events row and what it joins to. */
export interface ExportRow {
  /** The GitHub event id (decimal text), or null: a push known only by webhook. */
  id: string | null;
  /** null: a push whose line named its actor by login only (a timeline-format archive line). */
  actorId: string | null;
  login: string;
  repositoryId: string;
  fullName: string;
  /** The repository's owner when enrichment says it is an organization. */
  org: { id: string; login: string } | null;
  pushId: string | null;
  ref: string;
  head: string;
  /** null: the push's old tip is not known in full (a timeline-format archive line). */
  before: string | null;
  /** `YYYY-MM-DDTHH:MM:SSZ`, with a fraction only when the instant has one. */
  createdAt: string;
  /** `size`: the push's commit count; null leaves `size` and `commits` out (unknown). */
  size: number | null;
  /** null leaves `distinct_size` out (unknown). */
  distinctSize: number | null;
  /** The commits to list (at most MAX_LINE_COMMITS); null leaves `commits` out. */
  commits: LineCommit[] | null;
}

const str = JSON.stringify;
const DIGITS = /^\d{1,20}$/;

/** A bigint's text as a JSON number; anything else is a bug upstream, never written. */
function id(digits: string): string {
  if (!DIGITS.test(digits)) throw new Error(`not an id: ${str(digits)}`);
  return digits;
}

/** GitHub's display_login: a bot's login without its `[bot]` suffix. */
function displayLogin(login: string): string {
  return login.endsWith('[bot]') ? login.slice(0, -5) : login;
}

function commitJson(repoName: string, c: LineCommit): string {
  return (
    `{"sha":${str(c.sha)},"author":{"email":${str(c.authorEmail)},"name":${str(c.authorName)}},` +
    `"message":${str(c.message)},"distinct":${str(c.distinct)},` +
    `"url":${str(`${API}/repos/${repoName}/commits/${c.sha}`)}}`
  );
}

/** The line's JSON (no newline). Keys in GH Archive's order; unknown values left out. */
export function exportLine(row: ExportRow): string {
  // An actor known by login only has no id, and so no avatar address to write.
  const actor =
    `{"id":${row.actorId === null ? 'null' : id(row.actorId)},"login":${str(row.login)},"display_login":${str(displayLogin(row.login))},` +
    `"gravatar_id":"","url":${str(`${API}/users/${row.login}`)},` +
    `"avatar_url":${row.actorId === null ? 'null' : str(`${AVATARS}/${row.actorId}?`)}}`;
  const repo = `{"id":${id(row.repositoryId)},"name":${str(row.fullName)},"url":${str(`${API}/repos/${row.fullName}`)}}`;
  let payload = `{"repository_id":${id(row.repositoryId)}`;
  if (row.pushId !== null) payload += `,"push_id":${id(row.pushId)}`;
  if (row.size !== null) {
    payload += `,"size":${row.size}`;
    if (row.distinctSize !== null) payload += `,"distinct_size":${row.distinctSize}`;
  }
  payload += `,"ref":${str(row.ref)},"head":${str(row.head)},"before":${str(row.before)}`;
  if (row.size !== null && row.commits !== null) {
    const listed = row.commits.slice(0, MAX_LINE_COMMITS);
    payload += `,"commits":[${listed.map((c) => commitJson(row.fullName, c)).join(',')}]`;
  }
  payload += '}';
  let line =
    `{"id":${row.id === null ? 'null' : str(id(row.id))},"type":"PushEvent","actor":${actor},` +
    `"repo":${repo},"payload":${payload},"public":true,"created_at":${str(row.createdAt)}`;
  if (row.org) {
    line +=
      `,"org":{"id":${id(row.org.id)},"login":${str(row.org.login)},"gravatar_id":"",` +
      `"url":${str(`${API}/orgs/${row.org.login}`)},"avatar_url":${str(`${AVATARS}/${row.org.id}?`)}}`;
  }
  return `${line}}`;
}
