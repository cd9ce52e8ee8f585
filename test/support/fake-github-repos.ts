import type http from 'node:http';
import { commitGraphs, type FakeCommit, type Graph } from './fake-commit-graph.ts';
import { compareAnswer } from './fake-compare.ts';
import {
  type Answer,
  bodyHash,
  conditional,
  json,
  movedPermanently,
  notFound,
} from './fake-github-http.ts';
import type { RepoLookup } from './fake-graphql-resolvers.ts';
import type { Json } from './github-factories.ts';

/**
 * The fake GitHub's accounts and repositories: profiles (/users/{login}, /repos/{o}/{n},
 * /repositories/{id}; a renamed repository's old name answers 301 to /repositories/{id}),
 * each repository's commit graph (fake-commit-graph.ts) and its REST compare, and the
 * repository lookup `POST /graphql` resolves `repository(owner:, name:)` with. A graph
 * filed under a name with no profile still answers (compare and GraphQL), with a stable
 * made-up id and `main` unless told otherwise.
 */

type Profile = Json & { id: number; full_name: string };

export function fakeRepos() {
  let users = new Map<string, Json & { id: number; login: string }>(); // lower(login)
  let repos = new Map<string, Profile>(); // lower(full_name)
  let reposById = new Map<number, Profile>();
  let movedRepos = new Map<string, number>(); // lower(old full_name) → id
  const graphs = commitGraphs();

  function defaultBranchOf(fullName: string): string {
    const branch = repos.get(fullName.toLowerCase())?.default_branch;
    return typeof branch === 'string' ? branch : (graphs.get(fullName)?.defaultBranch ?? 'main');
  }

  function compare(fullName: string, basehead: string, url: URL, baseUrl: string): Answer {
    const g = graphs.get(fullName);
    const name = repos.get(fullName.toLowerCase())?.full_name ?? fullName;
    const answer = g && compareAnswer(g, name, defaultBranchOf(name), basehead, url, baseUrl);
    return answer ? json(answer.status, answer.body, answer.headers) : notFound();
  }

  function setRepo(profile: Profile): void {
    const old = reposById.get(profile.id);
    if (old) repos.delete(old.full_name.toLowerCase());
    repos.set(profile.full_name.toLowerCase(), profile);
    reposById.set(profile.id, profile);
    movedRepos.delete(profile.full_name.toLowerCase());
  }

  return {
    /** The answer for a profile or compare path, or null when the path is not one. */
    route(req: http.IncomingMessage, url: URL, baseUrl: string): Answer | null {
      const segs = url.pathname.split('/').slice(1).map(decodeURIComponent);
      const [a, b, c, d] = segs;
      if (segs.length === 2 && a === 'users') {
        const u = users.get(b!.toLowerCase());
        return u ? conditional(req, u) : notFound();
      }
      if (a === 'repos' && (segs.length === 3 || (segs.length >= 5 && d === 'compare'))) {
        const name = `${b}/${c}`.toLowerCase();
        const r = repos.get(name);
        const movedTo = r ? undefined : movedRepos.get(name);
        if (movedTo !== undefined) {
          const rest = url.pathname.split('/').slice(4).join('/');
          return movedPermanently(
            `${baseUrl}/repositories/${movedTo}${rest ? `/${rest}` : ''}${url.search}`,
          );
        }
        if (segs.length >= 5) return compare(`${b}/${c}`, segs.slice(4).join('/'), url, baseUrl);
        return r ? conditional(req, r) : notFound();
      }
      if (a === 'repositories' && /^\d+$/.test(b ?? '')) {
        const r = reposById.get(Number(b));
        if (segs.length === 2) return r ? conditional(req, r) : notFound();
        if (segs.length >= 4 && c === 'compare')
          return r ? compare(r.full_name, segs.slice(3).join('/'), url, baseUrl) : notFound();
      }
      return null;
    },

    /** Query.repository: by its name, by an old name (moved), or an unprofiled graph. */
    lookup(owner: string, name: string): RepoLookup {
      const key = `${owner}/${name}`.toLowerCase();
      let profile = repos.get(key);
      const movedId = profile ? undefined : movedRepos.get(key);
      if (movedId !== undefined) profile = reposById.get(movedId);
      if (profile) {
        const fullName = profile.full_name;
        const repo = {
          id: profile.id,
          fullName,
          defaultBranch: defaultBranchOf(fullName),
          graph: graphs.graph(fullName),
        };
        return movedId === undefined ? { repo } : { repo, movedFrom: key };
      }
      const g = graphs.get(key);
      if (!g) return null;
      const id = 800_000_000 + (Number.parseInt(bodyHash(key).slice(0, 7), 16) % 100_000_000);
      return {
        repo: { id, fullName: `${owner}/${name}`, defaultBranch: g.defaultBranch, graph: g },
      };
    },

    setUser(profile: Json & { id: number; login: string }): void {
      for (const [k, u] of users) if (u.id === profile.id) users.delete(k);
      users.set(profile.login.toLowerCase(), profile);
    },
    removeUser(login: string): void {
      users.delete(login.toLowerCase());
    },
    setRepo,
    removeRepo(fullName: string): void {
      const r = repos.get(fullName.toLowerCase());
      if (!r) return;
      repos.delete(fullName.toLowerCase());
      reposById.delete(r.id);
      // Gone: its commits and its old names with it (REST 404, GraphQL NOT_FOUND).
      graphs.remove(fullName);
      for (const [old, id] of movedRepos) if (id === r.id) movedRepos.delete(old);
    },
    renameRepo(oldFullName: string, newFullName: string): void {
      const r = repos.get(oldFullName.toLowerCase());
      if (!r) throw new Error(`fake GitHub: no repository ${oldFullName} to rename`);
      graphs.rename(oldFullName, newFullName);
      const [owner, name] = newFullName.split('/') as [string, string];
      const ownerObj = (r.owner ?? {}) as Json;
      setRepo({
        ...r,
        full_name: newFullName,
        name,
        owner: { ...ownerObj, login: owner },
        url: `https://api.github.com/repos/${newFullName}`,
        html_url: `https://github.com/${newFullName}`,
      });
      movedRepos.set(oldFullName.toLowerCase(), r.id);
    },

    addCommits: (fullName: string, commits: FakeCommit[]) => graphs.addCommits(fullName, commits),
    setBranch: (fullName: string, branch: string, sha: string) =>
      graphs.setBranch(fullName, branch, sha),
    deleteBranch: (fullName: string, branch: string) => graphs.deleteBranch(fullName, branch),
    renameBranch(fullName: string, from: string, to: string): void {
      const isDefault = defaultBranchOf(fullName) === from;
      graphs.renameBranch(fullName, from, to);
      const r = repos.get(fullName.toLowerCase());
      if (isDefault && r) setRepo({ ...r, default_branch: to });
      else if (isDefault) graphs.setDefaultBranch(fullName, to);
    },
    commitGraph: (fullName: string): Graph | undefined => graphs.get(fullName),
    defaultBranch: defaultBranchOf,

    reset(): void {
      users = new Map();
      repos = new Map();
      reposById = new Map();
      movedRepos = new Map();
      graphs.reset();
    },
  };
}
