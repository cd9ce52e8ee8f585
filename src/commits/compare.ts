import { AppError } from '../platform/errors.ts';
import { exactId } from '../platform/json/exact.ts';
import { inspectJson } from '../platform/json/walk.ts';
import { commitListProblem } from '../store/commit-list.ts';
import { answerObject, answerText, answerTime } from './answer-values.ts';

/**
 * GitHub's "compare two commits" (GET /repos/{owner}/{repo}/compare/{base}...{head}), read
 * defensively (ADR 0071). Without `page`/`per_page` it answers the NEWEST 250 commits of
 * the range, in chronological order (the last one is the head), and `total_commits` is the
 * range's true size; with them it pages chronologically from the oldest. A 200 whose body
 * is not that shape, or is larger than any real answer, is CompareInvalid: a transient
 * failure of the attempt (the retry ladder), never a row of garbage.
 */

export class CompareInvalid extends AppError {
  constructor(path: string, problem: string) {
    super('COMPARE_INVALID', `compare answer from ${path} is not usable: ${problem}`, { path });
  }
}

/** What one request without paging returns at most (GitHub's documented cap). */
export const COMPARE_UNPAGED_MAX = 250;
/** The largest page GitHub serves with per_page. */
export const COMPARE_PAGE_MAX = 100;

// Bounds on what one commit may bring. A real message is a few KB; anything longer is cut
// at 65,536 characters, as docs/commits.md says and as every other path cuts it (inline
// commits, GraphQL answers).
export const MESSAGE_MAX = 65_536;
const NAME_MAX = 1_000;
const PARENTS_MAX = 64;
const SHA = /^[0-9a-f]{40}([0-9a-f]{24})?$/;

export const ZERO_SHA = /^0+$/;

/** One commit as the compare answer gives it (emails in clear: the store applies COMMIT_EMAILS). */
export interface FetchedCommit {
  sha: string;
  authorName: string | null;
  authorEmail: string | null;
  authoredAt: Date | null;
  /** The GitHub account GitHub links the commit's author to, or null. */
  authorId: string | null;
  authorLogin: string | null;
  committerName: string | null;
  committerEmail: string | null;
  committedAt: Date | null;
  committerId: string | null;
  committerLogin: string | null;
  message: string | null;
  parents: string[];
}

export interface CompareAnswer {
  /** The range's true number of commits. */
  totalCommits: number;
  /** Chronological (oldest first), as GitHub sends them. */
  commits: FetchedCommit[];
}

/** The path of a comparison; each part is escaped (a branch may hold `/`, `#`, `%`). */
export function comparePath(
  fullName: string,
  base: string,
  head: string,
  page?: { page: number; perPage: number },
): string {
  const [owner, repo] = fullName.split('/') as [string, string];
  const basehead = `${encodeURIComponent(base)}...${encodeURIComponent(head)}`;
  const query = page ? `?per_page=${page.perPage}&page=${page.page}` : '';
  return `/repos/${encodeURIComponent(owner)}/${encodeURIComponent(repo)}/compare/${basehead}${query}`;
}

const obj = answerObject;
const text = answerText;
const time = answerTime;

function account(v: unknown): { id: string | null; login: string | null } {
  const o = obj(v);
  if (!o) return { id: null, login: null };
  const id = typeof o.id === 'string' ? null : exactId(o.id);
  return { id: id === '0' ? null : id, login: text(o.login, NAME_MAX) };
}

function commitOf(v: unknown, path: string, i: number): FetchedCommit {
  const o = obj(v);
  if (!o) throw new CompareInvalid(path, `commits[${i}] is not an object`);
  const sha = typeof o.sha === 'string' ? o.sha : '';
  if (!SHA.test(sha)) throw new CompareInvalid(path, `commits[${i}] has no hex "sha"`);
  const git = obj(o.commit) ?? {};
  const author = obj(git.author) ?? {};
  const committer = obj(git.committer) ?? {};
  const parents = Array.isArray(o.parents) ? o.parents : [];
  if (parents.length > PARENTS_MAX) {
    throw new CompareInvalid(path, `commits[${i}] has ${parents.length} parents`);
  }
  const linkedAuthor = account(o.author);
  const linkedCommitter = account(o.committer);
  return {
    sha,
    authorName: text(author.name, NAME_MAX),
    authorEmail: text(author.email, NAME_MAX),
    authoredAt: time(author.date),
    authorId: linkedAuthor.id,
    authorLogin: linkedAuthor.login,
    committerName: text(committer.name, NAME_MAX),
    committerEmail: text(committer.email, NAME_MAX),
    committedAt: time(committer.date),
    committerId: linkedCommitter.id,
    committerLogin: linkedCommitter.login,
    message: text(git.message, MESSAGE_MAX),
    parents: parents.flatMap((p) => {
      const s = obj(p)?.sha;
      return typeof s === 'string' && SHA.test(s) ? [s] : [];
    }),
  };
}

/**
 * Reads a compare answer. `maxCommits` is what the request can return (250 unpaged, the
 * page size paged): more than that is not GitHub.
 */
export function parseCompare(data: unknown, path: string, maxCommits: number): CompareAnswer {
  const o = obj(data);
  if (!o) throw new CompareInvalid(path, 'body is not a JSON object');
  const total = o.total_commits;
  if (typeof total !== 'number' || !Number.isSafeInteger(total) || total < 0) {
    throw new CompareInvalid(path, 'no non-negative integer "total_commits"');
  }
  if (!Array.isArray(o.commits)) throw new CompareInvalid(path, 'no "commits" array');
  if (o.commits.length > maxCommits) {
    throw new CompareInvalid(path, `${o.commits.length} commits where at most ${maxCommits} fit`);
  }
  // Only the commits are read; a file list nested without end is no reason to refuse them.
  const deep = inspectJson(o.commits, 16, 'commits');
  if (deep.tooDeep) throw new CompareInvalid(path, `nested too deep at ${deep.tooDeep}`);
  const commits = o.commits.map((c, i) => commitOf(c, path, i));
  // A page is checked against itself here (no sha twice, no more than the total); against
  // the push by checkAgainstPush, with the rules every list of a push's commits meets.
  const problem = commitListProblem(
    commits.map((c) => c.sha),
    { total, countName: 'total_commits' },
  );
  if (problem) throw new CompareInvalid(path, problem);
  return { totalCommits: total, commits };
}

/**
 * An unpaged answer against the push it answers (the red team's lying compare), by the rules
 * every list of a push's commits meets (src/store/commit-list.ts): it holds every commit
 * of the range when the range fits (total ≤ what one answer holds), its shas are as long as
 * the head's, and its last commit is the push's head — a range is reachable from its head,
 * oldest first, and an answer cut to the newest 250 still ends there.
 */
export function checkAgainstPush(
  a: CompareAnswer,
  path: string,
  head: string,
  unpagedMax: number,
): CompareAnswer {
  const problem = commitListProblem(
    a.commits.map((c) => c.sha),
    {
      total: a.totalCommits,
      head,
      capacity: unpagedMax,
      cutFrom: 'oldest',
      countName: 'total_commits',
    },
  );
  if (problem) throw new CompareInvalid(path, problem);
  return a;
}
