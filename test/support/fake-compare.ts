import { readFileSync } from 'node:fs';
import {
  committerOf,
  DEFAULT_DATE,
  type FakeCommit,
  type Graph,
  range,
  resolveRev,
} from './fake-commit-graph.ts';
import type { Json } from './github-factories.ts';

export type { FakeCommit } from './fake-commit-graph.ts';

/**
 * The fake GitHub's "compare two commits" endpoint, as GitHub documents it
 * (GET /repos/{owner}/{repo}/compare/{base}...{head}; base and head are a sha or a branch
 * name), over the commit graph that `POST /graphql` answers from too
 * (fake-commit-graph.ts): the commits reachable from head and not from base, oldest
 * first (parents before children); `status` ahead, behind, diverged or identical;
 * `ahead_by`, `behind_by` and `merge_base_commit` as git counts them. Without `page`/`per_page` the answer holds the NEWEST 250 (the last
 * is the head) and `total_commits` the true count; with them it pages chronologically from
 * the oldest (per_page ≤ 100, default 30) with a Link header. Unknown repository or
 * commit: 404. Each answer is built from GitHub's own example
 * (test/fixtures/github/compare/commit-comparison.json).
 */

const EXAMPLE = JSON.parse(
  readFileSync(
    new URL('../fixtures/github/compare/commit-comparison.json', import.meta.url),
    'utf8',
  ),
) as Json & { commits: Json[] };
const COMMIT_TEMPLATE = EXAMPLE.commits[0]!;

export interface CompareAnswer {
  status: number;
  body: unknown;
  headers?: Record<string, string>;
}

const UNPAGED_MAX = 250;

function commitJson(fullName: string, c: FakeCommit): Json {
  const t = COMMIT_TEMPLATE as Json & { commit: Json };
  const api = `https://api.github.com/repos/${fullName}`;
  const author = c.author ?? {
    name: 'Monalisa Octocat',
    email: 'mona@github.com',
    date: DEFAULT_DATE,
  };
  const linked = (account: FakeCommit['account']) =>
    account === undefined
      ? (t.author as Json)
      : account === null
        ? null
        : { ...(t.author as Json), ...account };
  return {
    ...t,
    url: `${api}/commits/${c.sha}`,
    sha: c.sha,
    html_url: `https://github.com/${fullName}/commit/${c.sha}`,
    comments_url: `${api}/commits/${c.sha}/comments`,
    commit: {
      ...t.commit,
      url: `${api}/git/commits/${c.sha}`,
      author,
      committer: committerOf(c),
      message: c.message ?? `commit ${c.sha.slice(0, 7)}`,
    },
    author: linked(c.account),
    committer: linked(c.committerAccount === undefined ? c.account : c.committerAccount),
    parents: c.parents.map((p) => ({
      url: `${api}/commits/${p}`,
      html_url: `https://github.com/${fullName}/commit/${p}`,
      sha: p,
    })),
  };
}

/**
 * The answer to GET /repos/{fullName}/compare/{basehead}, or null for a 404 (a revision
 * that names no commit, histories with no common ancestor, no `...`).
 */
export function compareAnswer(
  g: Graph,
  fullName: string,
  defaultBranch: string,
  basehead: string,
  url: URL,
  baseUrl: string,
): CompareAnswer | null {
  const at = basehead.indexOf('...');
  if (at < 0) return null;
  const base = resolveRev(g, basehead.slice(0, at), defaultBranch);
  const head = resolveRev(g, basehead.slice(at + 3), defaultBranch);
  if (!base || !head || base === 'unsupported' || head === 'unsupported') return null;
  const r = range(g, base, head);
  if (!r.mergeBase) return null;
  const paged = url.searchParams.has('page') || url.searchParams.has('per_page');
  let list = r.commits;
  const headers: Record<string, string> = {};
  if (!paged) {
    list = r.commits.slice(-UNPAGED_MAX);
  } else {
    const perPage = Math.min(
      100,
      Math.max(1, Number(url.searchParams.get('per_page') ?? 30) || 30),
    );
    const page = Math.max(1, Number(url.searchParams.get('page') ?? 1) || 1);
    list = r.commits.slice((page - 1) * perPage, page * perPage);
    const last = Math.max(1, Math.ceil(r.commits.length / perPage));
    if (page < last) {
      const link = (p: number) => {
        const u = new URL(url.pathname, baseUrl);
        u.searchParams.set('per_page', String(perPage));
        u.searchParams.set('page', String(p));
        return u.toString();
      };
      headers.link = `<${link(page + 1)}>; rel="next", <${link(last)}>; rel="last"`;
    }
  }
  const api = `https://api.github.com/repos/${fullName}`;
  const body = {
    ...EXAMPLE,
    url: `${api}/compare/${basehead}`,
    html_url: `https://github.com/${fullName}/compare/${basehead}`,
    base_commit: commitJson(fullName, g.commits.get(base)!),
    merge_base_commit: commitJson(fullName, g.commits.get(r.mergeBase)!),
    status: r.status,
    ahead_by: r.aheadBy,
    behind_by: r.behindBy,
    total_commits: r.aheadBy,
    commits: list.map((c) => commitJson(fullName, c)),
    files: !paged || url.searchParams.get('page') === '1' ? EXAMPLE.files : [],
  };
  return { status: 200, body, headers };
}
