/**
 * The fake GitHub's commit graphs: ONE store that both the REST compare
 * (fake-compare.ts) and `POST /graphql` (fake-graphql*.ts) answer from, so a test can hold
 * both transports to the same truth. The git semantics are git's own:
 *
 * - a range `base...head` is the commits reachable from head and not from base (REST
 *   compare, `Ref.compare`), oldest first: parents before children (the order commits
 *   were added, which addCommits requires to be parents first), ahead/behind counted as
 *   `git rev-list --left-right --count`;
 * - a history (`Commit.history`) is `git log`'s default walk: newest committer date
 *   first, ties in the order the walk reached them (git's priority queue), the commit
 *   itself included;
 * - a revision (`object(expression:)`, compare's base and head) is a subset of
 *   `git rev-parse`: a full or unique abbreviated sha, `HEAD`, a branch by short or
 *   qualified name, each followed by any `~N` / `^N`.
 *
 * Graphs are filed by repository full name (case-insensitive) and follow renames.
 */

export interface FakeActor {
  name: string;
  email: string;
  /** ISO 8601, `Z` or an offset such as `+02:00` (kept as git keeps it). */
  date: string;
}

export interface FakeCommit {
  sha: string;
  parents: string[];
  message?: string;
  author?: FakeActor;
  /** Default: the author. */
  committer?: FakeActor;
  /** The GitHub account the author email is linked to (null: none). */
  account?: { id: number; login: string } | null;
  /** The account of the committer email (default: `account`). */
  committerAccount?: { id: number; login: string } | null;
}

export interface StoredCommit extends FakeCommit {
  /** Position in the order commits were added (a topological order). */
  index: number;
  /** Committer date, epoch ms. */
  committedMs: number;
}

export interface Graph {
  commits: Map<string, StoredCommit>;
  branches: Map<string, string>;
  /** For a graph without a repository profile (the profile's default_branch wins). */
  defaultBranch: string;
  next: number;
  /** Bumped on every change: cached walks of an older version are dropped. */
  version: number;
  cache: Map<string, { version: number; value: unknown }>;
}

export type CompareStatus = 'ahead' | 'behind' | 'diverged' | 'identical';

export interface Range {
  /** Reachable from head, not from base; oldest first, parents before children. */
  commits: StoredCommit[];
  aheadBy: number;
  behindBy: number;
  status: CompareStatus;
  /** The best common ancestor, null when the histories are unrelated. */
  mergeBase: string | null;
}

export const DEFAULT_DATE = '2011-04-14T16:00:49Z';
export const FULL_SHA = /^[0-9a-f]{40}$/;

export function committerOf(c: FakeCommit): FakeActor {
  return (
    c.committer ??
    c.author ?? { name: 'Monalisa Octocat', email: 'mona@github.com', date: DEFAULT_DATE }
  );
}

function cached<T>(g: Graph, key: string, make: () => T): T {
  const hit = g.cache.get(key);
  if (hit && hit.version === g.version) return hit.value as T;
  const value = make();
  if (g.cache.size > 2000) g.cache.clear();
  g.cache.set(key, { version: g.version, value });
  return value;
}

/** Every commit reachable from `sha`, itself included. */
export function ancestors(g: Graph, sha: string): Set<string> {
  return cached(g, `anc ${sha}`, () => {
    const seen = new Set<string>();
    const stack = [sha];
    while (stack.length > 0) {
      const s = stack.pop()!;
      if (seen.has(s) || !g.commits.has(s)) continue;
      seen.add(s);
      stack.push(...g.commits.get(s)!.parents);
    }
    return seen;
  });
}

export function range(g: Graph, base: string, head: string): Range {
  return cached(g, `range ${base} ${head}`, () => {
    const behind = ancestors(g, base);
    const ahead = ancestors(g, head);
    const commits = [...ahead]
      .filter((s) => !behind.has(s))
      .map((s) => g.commits.get(s)!)
      .sort((a, b) => a.index - b.index);
    let behindBy = 0;
    let mergeBase: StoredCommit | null = null;
    for (const s of behind) {
      if (!ahead.has(s)) behindBy++;
      else {
        const c = g.commits.get(s)!;
        // The newest common ancestor is an ancestor of no other common ancestor.
        if (!mergeBase || c.index > mergeBase.index) mergeBase = c;
      }
    }
    const status: CompareStatus =
      commits.length === 0
        ? behindBy === 0
          ? 'identical'
          : 'behind'
        : behindBy === 0
          ? 'ahead'
          : 'diverged';
    return {
      commits,
      aheadBy: commits.length,
      behindBy,
      status,
      mergeBase: mergeBase?.sha ?? null,
    };
  });
}

/** `git log <head>`: newest committer date first, ties in the order the walk reached them. */
export function history(g: Graph, head: string): StoredCommit[] {
  return cached(g, `log ${head}`, () => {
    const out: StoredCommit[] = [];
    const start = g.commits.get(head);
    if (!start) return out;
    // A binary max-heap on (committer date, then earliest queued).
    const heap: { c: StoredCommit; ctr: number }[] = [];
    let ctr = 0;
    const before = (a: { c: StoredCommit; ctr: number }, b: { c: StoredCommit; ctr: number }) =>
      a.c.committedMs !== b.c.committedMs ? a.c.committedMs > b.c.committedMs : a.ctr < b.ctr;
    const push = (c: StoredCommit) => {
      heap.push({ c, ctr: ctr++ });
      let i = heap.length - 1;
      while (i > 0) {
        const p = (i - 1) >> 1;
        if (!before(heap[i]!, heap[p]!)) break;
        [heap[i], heap[p]] = [heap[p]!, heap[i]!];
        i = p;
      }
    };
    const pop = () => {
      const top = heap[0]!;
      const last = heap.pop()!;
      if (heap.length > 0) {
        heap[0] = last;
        let i = 0;
        for (;;) {
          const l = 2 * i + 1;
          const r = l + 1;
          let m = i;
          if (l < heap.length && before(heap[l]!, heap[m]!)) m = l;
          if (r < heap.length && before(heap[r]!, heap[m]!)) m = r;
          if (m === i) break;
          [heap[i], heap[m]] = [heap[m]!, heap[i]!];
          i = m;
        }
      }
      return top.c;
    };
    const seen = new Set([head]);
    push(start);
    while (heap.length > 0) {
      const c = pop();
      out.push(c);
      for (const p of c.parents) {
        if (seen.has(p)) continue;
        seen.add(p);
        const pc = g.commits.get(p);
        if (pc) push(pc);
      }
    }
    return out;
  });
}

/** A branch by short or qualified name. */
export function branchTip(g: Graph, name: string): string | null {
  const short = name.startsWith('refs/heads/') ? name.slice('refs/heads/'.length) : name;
  return g.branches.get(short) ?? null;
}

/**
 * The commit a revision names, or null; `unsupported` for syntax the fake does not
 * implement (a path, a reflog, a range), so a test never mistakes it for "no such commit".
 */
export function resolveRev(
  g: Graph,
  rev: string,
  defaultBranch: string,
): string | null | 'unsupported' {
  const m = /^(.*?)((?:[~^]\d*)*)$/.exec(rev);
  const name = m?.[1] ?? rev;
  const suffix = m?.[2] ?? '';
  if (name === '' || /[:@{}\s]|\.\./.test(name)) return 'unsupported';
  let sha: string | null;
  if (name === 'HEAD') sha = branchTip(g, defaultBranch);
  else if (FULL_SHA.test(name)) sha = g.commits.has(name) ? name : null;
  else {
    sha = branchTip(g, name);
    if (!sha && /^[0-9a-f]{4,39}$/.test(name)) {
      const hits = [...g.commits.keys()].filter((s) => s.startsWith(name));
      sha = hits.length === 1 ? hits[0]! : null;
    }
  }
  for (const step of suffix.match(/[~^]\d*/g) ?? []) {
    if (!sha) return null;
    const n = step.length > 1 ? Number(step.slice(1)) : 1;
    if (step[0] === '^') {
      if (n === 0) continue;
      sha = g.commits.get(sha)!.parents[n - 1] ?? null;
    } else {
      for (let i = 0; i < n && sha; i++) sha = g.commits.get(sha)!.parents[0] ?? null;
    }
  }
  return sha;
}

export function commitGraphs() {
  let graphs = new Map<string, Graph>(); // lower(full_name)

  const newGraph = (): Graph => ({
    commits: new Map(),
    branches: new Map(),
    defaultBranch: 'main',
    next: 0,
    version: 0,
    cache: new Map(),
  });

  /** The repository's graph, created empty on first use. */
  function graph(fullName: string): Graph {
    let g = graphs.get(fullName.toLowerCase());
    if (!g) {
      g = newGraph();
      graphs.set(fullName.toLowerCase(), g);
    }
    return g;
  }

  return {
    graph,
    get: (fullName: string): Graph | undefined => graphs.get(fullName.toLowerCase()),
    has: (fullName: string): boolean => graphs.has(fullName.toLowerCase()),
    /** Commits in the order they were made: each one's parents are already in the graph. */
    addCommits(fullName: string, commits: FakeCommit[]): void {
      const g = graph(fullName);
      for (const c of commits) {
        if (!FULL_SHA.test(c.sha)) throw new Error(`fake GitHub: ${c.sha} is not a 40-hex sha`);
        // Parents first, so that the order commits are added in is a topological order.
        for (const p of c.parents) {
          if (!g.commits.has(p))
            throw new Error(`fake GitHub: ${c.sha}'s parent ${p} is not (yet) in ${fullName}`);
        }
        const ms = Date.parse(committerOf(c).date);
        if (Number.isNaN(ms)) throw new Error(`fake GitHub: ${c.sha} has an invalid date`);
        g.commits.set(c.sha, { ...c, index: g.next++, committedMs: ms });
      }
      g.version++;
    },
    setBranch(fullName: string, branch: string, sha: string): void {
      const g = graph(fullName);
      if (!g.commits.has(sha)) throw new Error(`fake GitHub: no commit ${sha} in ${fullName}`);
      g.branches.set(branch, sha);
      g.version++;
    },
    deleteBranch(fullName: string, branch: string): void {
      graph(fullName).branches.delete(branch);
    },
    /** The old name stops resolving, as on GitHub (its compare answers 404). */
    renameBranch(fullName: string, from: string, to: string): void {
      const g = graph(fullName);
      const tip = g.branches.get(from);
      if (!tip) throw new Error(`fake GitHub: no branch ${from} in ${fullName}`);
      g.branches.delete(from);
      g.branches.set(to, tip);
      if (g.defaultBranch === from) g.defaultBranch = to;
    },
    setDefaultBranch(fullName: string, branch: string): void {
      graph(fullName).defaultBranch = branch;
    },
    rename(oldFullName: string, newFullName: string): void {
      const g = graphs.get(oldFullName.toLowerCase());
      if (!g) return;
      graphs.delete(oldFullName.toLowerCase());
      graphs.set(newFullName.toLowerCase(), g);
    },
    remove(fullName: string): void {
      graphs.delete(fullName.toLowerCase());
    },
    reset(): void {
      graphs = new Map();
    },
  };
}

export type CommitGraphs = ReturnType<typeof commitGraphs>;
