import { ZERO } from './commit-world.ts';
import { ancestors, type FakeCommit, range } from './fake-commit-graph.ts';
import type { FakeGitHub } from './fake-github-types.ts';
import { repoProfile } from './github-factories.ts';

/**
 * Git histories and the pushes that made them, in the fake GitHub (one graph that REST
 * compare and `POST /graphql` both answer from), each push with the commits a fetcher
 * must store for it. Not a test file.
 *
 *   const w = gitWorld(fake);
 *   const repo = w.repo('octo/app', { id: 42 });
 *   repo.commit(5, { unpushed: true });  // history before the first push
 *   const first = repo.push('main', 2);  // first push: expected = all 7, oldest first
 *   const topic = repo.push('topic', 3); // new branch off main: its 3
 *   repo.merge('main', 'topic');         // merged before the fetch: topic's push keeps its 3
 *   const forced = repo.forcePush('main', { drop: 1, add: 2 });
 *   await insertPushes(db, [first, topic, forced]); // a WorldPush is a PushSeed
 *
 * Commits are dated one minute apart from `start` (default 2026-11-30T00:00:00Z), in the
 * order they are made, so git's date order and topological order agree.
 */

export type PushKind = 'first' | 'linear' | 'new-branch' | 'merge' | 'force';

export interface WorldPush {
  repositoryId: number;
  ref: string;
  before: string;
  head: string;
  /** When the push happened (a second after its head was made): its created_at. */
  dueAt: Date;
  kind: PushKind;
  /**
   * The push's commits, oldest first, parents before children: reachable from `head` and
   * not from `before` (for a new branch: not from the default branch as it was at the
   * push; for the first push of the default branch: its whole history).
   */
  expected: string[];
}

export interface CommitOptions {
  /** A branch to build on and move (default: the default branch). */
  on?: string;
  /** Build on this commit instead of the branch's tip (null: a root); the branch moves. */
  from?: string | null;
  /**
   * Made but not pushed (a clone's local work): GitHub has the commits but its branch
   * does not move; the next push of the branch brings them.
   */
  unpushed?: boolean;
  message?: (i: number) => string;
  /** The account of commit i (null: an email linked to no account). */
  account?: (i: number) => { id: number; login: string } | null;
}

let seq = 0;
/** A fresh 40-hex sha, distinct from commit-world's newSha() range. */
export function worldSha(): string {
  seq++;
  return (0xa11ce0000000 + seq).toString(16).padStart(40, '0');
}

const WEB_FLOW = { id: 19864447, login: 'web-flow' };

export function gitWorld(fake: FakeGitHub, o: { start?: Date } = {}) {
  let clock = (o.start ?? new Date('2026-11-30T00:00:00Z')).getTime();
  const tick = () => {
    clock += 60_000;
    return new Date(clock).toISOString().replace('.000Z', 'Z');
  };

  /**
   * A repository: its profile (`id`, `default_branch`) served by the fake, and an empty
   * graph. With `profile: false` only a graph (its default branch `main`), as tests that
   * never ask for the profile file one.
   */
  function repo(
    fullName: string,
    opts: { id?: number; defaultBranch?: string; profile?: boolean } = {},
  ) {
    let name = fullName;
    let repositoryId = opts.id ?? 0;
    if (opts.profile !== false) {
      const profile = repoProfile({
        ...(opts.id === undefined ? {} : { id: opts.id }),
        full_name: fullName,
        default_branch: opts.defaultBranch ?? 'main',
      });
      fake.setRepo(profile);
      repositoryId = profile.id;
    } else if (opts.defaultBranch && opts.defaultBranch !== 'main') {
      throw new Error('git-world: a repository without a profile has the default branch main');
    }
    const graph = () => fake.commitGraph(name);
    /** The branch on GitHub. */
    const tip = (branch: string) => graph()?.branches.get(branch) ?? null;
    /** The branch in the clone: ahead of GitHub's by the unpushed commits. */
    const local = new Map<string, string>();
    const localTip = (branch: string) => local.get(branch) ?? tip(branch);
    const defaultBranch = () => fake.defaultBranch(name);

    /** `n` commits in a line; returns their shas, oldest first. */
    function commit(n: number, c: CommitOptions = {}): string[] {
      const branch = c.on ?? defaultBranch();
      let parent = c.from !== undefined ? c.from : localTip(branch);
      const made: FakeCommit[] = [];
      for (let i = 0; i < n; i++) {
        const sha = worldSha();
        const date = tick();
        made.push({
          sha,
          parents: parent ? [parent] : [],
          message: c.message ? c.message(i) : `${branch}: change ${seq}\n\nBody of ${sha}.`,
          author: { name: `Dev ${seq % 5}`, email: `dev${seq % 5}@example.com`, date },
          account: c.account ? c.account(i) : { id: 7000 + (seq % 5), login: `dev${seq % 5}` },
        });
        parent = sha;
      }
      fake.addCommits(name, made);
      if (parent) local.set(branch, parent);
      if (parent && !c.unpushed) fake.setBranch(name, branch, parent);
      return made.map((m) => m.sha);
    }

    function pushOf(
      kind: PushKind,
      branch: string,
      before: string,
      head: string,
      expected: string[],
    ): WorldPush {
      return {
        repositoryId,
        ref: `refs/heads/${branch}`,
        before,
        head,
        dueAt: new Date(clock + 1000),
        kind,
        expected,
      };
    }
    const between = (before: string, head: string) =>
      range(graph()!, before, head).commits.map((c) => c.sha);

    return {
      get fullName() {
        return name;
      },
      repositoryId,
      tip,
      defaultBranch,
      commit,

      /**
       * `n` commits pushed to `branch`, with any unpushed ones before them. A new branch
       * starts at `from` (default: its unpushed commits, or the default branch's tip); the
       * default branch's first push brings its whole history.
       */
      push(branch: string, n: number, c: Omit<CommitOptions, 'on' | 'unpushed'> = {}): WorldPush {
        const before = tip(branch);
        if (before) {
          commit(n, { ...c, on: branch });
          const head = tip(branch)!;
          if (head === before) throw new Error('git-world: a push needs a commit');
          return pushOf('linear', branch, before, head, between(before, head));
        }
        const base = tip(defaultBranch());
        const from = c.from !== undefined ? c.from : (local.get(branch) ?? base);
        commit(n, { ...c, on: branch, from });
        const head = tip(branch);
        if (!head) throw new Error('git-world: a first push needs a commit');
        if (!base || branch === defaultBranch()) {
          const history = [...ancestors(graph()!, head)]
            .map((s) => graph()!.commits.get(s)!)
            .sort((a, b) => a.index - b.index)
            .map((x) => x.sha);
          return pushOf('first', branch, ZERO, head, history);
        }
        return pushOf('new-branch', branch, ZERO, head, between(base, head));
      },

      /**
       * `from` merged into `into` and pushed: a merge commit (parents: into's tip, then
       * from's), or with `fastForward` the branch simply moves to from's tip.
       */
      merge(into: string, from: string, m: { fastForward?: boolean } = {}): WorldPush {
        const before = tip(into);
        const side = tip(from);
        if (!before || !side) throw new Error(`git-world: no branch ${before ? from : into}`);
        if (m.fastForward) {
          fake.setBranch(name, into, side);
          local.set(into, side);
          return pushOf('linear', into, before, side, between(before, side));
        }
        const sha = worldSha();
        const date = tick();
        fake.addCommits(name, [
          {
            sha,
            parents: [before, side],
            message: `Merge branch '${from}' into ${into}`,
            author: { name: 'Dev 0', email: 'dev0@example.com', date },
            committer: { name: 'GitHub', email: 'noreply@github.com', date },
            account: { id: 7000, login: 'dev0' },
            committerAccount: WEB_FLOW,
          },
        ]);
        fake.setBranch(name, into, sha);
        local.set(into, sha);
        return pushOf('merge', into, before, sha, between(before, sha));
      },

      /** The branch reset `drop` first-parent commits back and `add` new ones pushed over it. */
      forcePush(branch: string, f: { drop: number; add: number }): WorldPush {
        const before = tip(branch);
        if (!before) throw new Error(`git-world: no branch ${branch}`);
        let base: string | null = before;
        for (let i = 0; i < f.drop && base; i++)
          base = graph()!.commits.get(base)!.parents[0] ?? null;
        const shas = commit(f.add, { on: branch, from: base });
        const head = shas.at(-1) ?? base;
        if (!head) throw new Error('git-world: a force push needs a commit to point at');
        if (shas.length === 0) {
          fake.setBranch(name, branch, head);
          local.set(branch, head);
        }
        return pushOf('force', branch, before, head, between(before, head));
      },

      renameBranch(from: string, to: string): void {
        fake.renameBranch(name, from, to);
        const mine = local.get(from);
        local.delete(from);
        if (mine) local.set(to, mine);
      },
      deleteBranch(branch: string): void {
        fake.deleteBranch(name, branch);
        local.delete(branch);
      },
      /** Renamed on GitHub: the old name follows (REST 301, GraphQL resolves it). */
      rename(newFullName: string): void {
        fake.renameRepo(name, newFullName);
        name = newFullName;
      },
      /** Deleted on GitHub: REST 404, GraphQL NOT_FOUND. */
      remove(): void {
        fake.removeRepo(name);
      },
    };
  }

  return { repo };
}

export type WorldRepo = ReturnType<ReturnType<typeof gitWorld>['repo']>;
