import { readFileSync } from 'node:fs';
import type { Json } from './github-factories.ts';

/**
 * The fake GitHub's commit graphs and its "compare two commits" endpoint, as GitHub
 * documents it (GET /repos/{owner}/{repo}/compare/{base}...{head}; base and head are a
 * sha or a branch name): the commits reachable from head and not from base, in
 * chronological order. Without `page`/`per_page` the answer holds the NEWEST 250 (the last
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

export interface FakeCommit {
  sha: string;
  parents: string[];
  message?: string;
  author?: { name: string; email: string; date: string };
  committer?: { name: string; email: string; date: string };
  /** The GitHub account the commit is linked to (null: none). */
  account?: { id: number; login: string } | null;
}

interface Graph {
  commits: Map<string, FakeCommit & { index: number }>;
  branches: Map<string, string>;
  next: number;
}

export interface CompareAnswer {
  status: number;
  body: unknown;
  headers?: Record<string, string>;
}

const UNPAGED_MAX = 250;

export function commitGraphs() {
  let graphs = new Map<string, Graph>(); // lower(full_name)

  const graph = (fullName: string) => {
    let g = graphs.get(fullName.toLowerCase());
    if (!g) {
      g = { commits: new Map(), branches: new Map(), next: 0 };
      graphs.set(fullName.toLowerCase(), g);
    }
    return g;
  };

  function ancestors(g: Graph, sha: string): Set<string> {
    const seen = new Set<string>();
    const stack = [sha];
    while (stack.length > 0) {
      const s = stack.pop()!;
      if (seen.has(s)) continue;
      const c = g.commits.get(s);
      if (!c) continue;
      seen.add(s);
      stack.push(...c.parents);
    }
    return seen;
  }

  function resolve(g: Graph, ref: string): string | null {
    if (g.commits.has(ref)) return ref;
    return g.branches.get(ref) ?? null;
  }

  function commitJson(fullName: string, c: FakeCommit): Json {
    const t = COMMIT_TEMPLATE as Json & { commit: Json };
    const api = `https://api.github.com/repos/${fullName}`;
    const who = c.author ?? {
      name: 'Monalisa Octocat',
      email: 'mona@github.com',
      date: '2011-04-14T16:00:49Z',
    };
    const account =
      c.account === undefined
        ? (t.author as Json)
        : c.account === null
          ? null
          : { ...(t.author as Json), ...c.account };
    return {
      ...t,
      url: `${api}/commits/${c.sha}`,
      sha: c.sha,
      html_url: `https://github.com/${fullName}/commit/${c.sha}`,
      comments_url: `${api}/commits/${c.sha}/comments`,
      commit: {
        ...t.commit,
        url: `${api}/git/commits/${c.sha}`,
        author: who,
        committer: c.committer ?? who,
        message: c.message ?? `commit ${c.sha.slice(0, 7)}`,
      },
      author: account,
      committer: account,
      parents: c.parents.map((p) => ({
        url: `${api}/commits/${p}`,
        html_url: `https://github.com/${fullName}/commit/${p}`,
        sha: p,
      })),
    };
  }

  return {
    /** Commits in the order they were made (parents first). */
    addCommits(fullName: string, commits: FakeCommit[]): void {
      const g = graph(fullName);
      for (const c of commits) g.commits.set(c.sha, { ...c, index: g.next++ });
    },
    setBranch(fullName: string, branch: string, sha: string): void {
      graph(fullName).branches.set(branch, sha);
    },
    has(fullName: string): boolean {
      return graphs.has(fullName.toLowerCase());
    },
    reset(): void {
      graphs = new Map();
    },
    /** The answer to GET /repos/{fullName}/compare/{basehead}, or null when it is not ours. */
    compare(fullName: string, basehead: string, url: URL, baseUrl: string): CompareAnswer | null {
      const g = graphs.get(fullName.toLowerCase());
      const at = basehead.indexOf('...');
      if (!g || at < 0) return null;
      const base = resolve(g, basehead.slice(0, at));
      const head = resolve(g, basehead.slice(at + 3));
      if (!base || !head) return null;
      const behind = ancestors(g, base);
      const ahead = ancestors(g, head);
      const range = [...ahead]
        .filter((s) => !behind.has(s))
        .map((s) => g.commits.get(s)!)
        .sort((a, b) => a.index - b.index);
      const behindBy = [...behind].filter((s) => !ahead.has(s)).length;
      const paged = url.searchParams.has('page') || url.searchParams.has('per_page');
      let list = range;
      const headers: Record<string, string> = {};
      if (!paged) {
        list = range.slice(-UNPAGED_MAX);
      } else {
        const perPage = Math.min(
          100,
          Math.max(1, Number(url.searchParams.get('per_page') ?? 30) || 30),
        );
        const page = Math.max(1, Number(url.searchParams.get('page') ?? 1) || 1);
        list = range.slice((page - 1) * perPage, page * perPage);
        const last = Math.max(1, Math.ceil(range.length / perPage));
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
      const status =
        range.length === 0 && behindBy === 0
          ? 'identical'
          : behindBy === 0
            ? 'ahead'
            : range.length === 0
              ? 'behind'
              : 'diverged';
      const api = `https://api.github.com/repos/${fullName}`;
      const body = {
        ...EXAMPLE,
        url: `${api}/compare/${basehead}`,
        html_url: `https://github.com/${fullName}/compare/${basehead}`,
        base_commit: commitJson(fullName, g.commits.get(base)!),
        merge_base_commit: commitJson(fullName, g.commits.get(base)!),
        status,
        ahead_by: range.length,
        behind_by: behindBy,
        total_commits: range.length,
        commits: list.map((c) => commitJson(fullName, c)),
        files: !paged || url.searchParams.get('page') === '1' ? EXAMPLE.files : [],
      };
      return { status: 200, body, headers };
    },
  };
}
