import { describe, expect, it } from 'vitest';
import { GRAPHQL_QUERY_EXAMPLES } from '../../src/commits/graphql/queries.ts';
import { GITHUB_API_VERSION } from '../../src/github/transport.ts';
import { ZERO } from '../support/commit-world.ts';
import { ancestors } from '../support/fake-commit-graph.ts';
import { historyQuery, postGraphQL } from '../support/fake-graphql-http.ts';
import { gitWorld, type WorldPush } from '../support/git-world.ts';
import { useFakeGitHub } from '../support/use-fake-github.ts';

/**
 * REST compare and POST /graphql answer from one commit graph, built by git-world.ts, for
 * every kind of push docs/commits.md names; repositories renamed and gone; renamed branches.
 */

const fake = useFakeGitHub();
/** The fake, like GitHub, refuses a REST request without the pinned API version. */
const PINNED = { 'x-github-api-version': GITHUB_API_VERSION };

const compare = async (repo: string, basehead: string) => {
  const r = await fetch(`${fake.url}/repos/${repo}/compare/${basehead}?per_page=100&page=1`, {
    headers: PINNED,
  });
  return {
    status: r.status,
    body: r.status === 200 ? ((await r.json()) as Record<string, unknown>) : null,
  };
};
const shasOf = (commits: unknown) => (commits as { sha: string }[]).map((c) => c.sha);

/** Every kind of push, with the repository as a fetch would find it afterwards. */
function pushes() {
  const world = gitWorld(fake);
  const repo = world.repo('octo/app', { id: 42 });
  repo.commit(4, { unpushed: true }); // a history nobody pushed on its own
  const first = repo.push('main', 2);
  const linear = repo.push('main', 3);
  const merged = repo.push('feature', 2); // a new branch, merged into main before the fetch
  repo.push('main', 1);
  const merge = repo.merge('main', 'feature');
  const fastForwarded = repo.push('quick', 2); // a new branch main then fast-forwards to
  repo.merge('main', 'quick', { fastForward: true });
  const forced = repo.forcePush('main', { drop: 2, add: 3 });
  return { repo, first, linear, merged, merge, fastForwarded, forced };
}

describe('one graph for both transports', () => {
  it('each push’s commits are what REST compare and GraphQL history both say', async () => {
    const p = pushes();
    expect(p.first.expected).toHaveLength(6);
    expect(p.linear.expected).toHaveLength(3);
    expect(p.merge.expected).toHaveLength(3); // the side branch's two and the merge
    expect(p.forced.expected).toHaveLength(3);
    expect(p.merged.expected).toHaveLength(2);
    const graph = fake.commitGraph('octo/app')!;
    const all: WorldPush[] = [p.first, p.linear, p.merged, p.merge, p.fastForwarded, p.forced];
    for (const push of all) {
      // GraphQL: the history back from head, less what `before` (or, for a new ref, the
      // push's own expectation) already reaches.
      const r = await postGraphQL(fake, historyQuery(), { o: 'octo', n: 'app', h: push.head });
      const log = r.body.data.repository.object.history;
      const oids: string[] = log.nodes.map((n: { oid: string }) => n.oid);
      expect(log.totalCount).toBe(ancestors(graph, push.head).size);
      if (push.before !== ZERO) {
        const seen = ancestors(graph, push.before);
        expect(oids.filter((o) => !seen.has(o)).sort()).toEqual([...push.expected].sort());
        // REST: compare before...head is the same commits, oldest first.
        const c = await compare('octo/app', `${push.before}...${push.head}`);
        expect(c.status).toBe(200);
        expect(shasOf(c.body!.commits)).toEqual(push.expected);
        expect(c.body!.total_commits).toBe(push.expected.length);
      }
    }
    expect((await compare('octo/app', `${p.forced.before}...${p.forced.head}`)).body).toMatchObject(
      {
        status: 'diverged',
        ahead_by: 3,
        behind_by: 2,
      },
    );
    // The first push's history is the whole of it; GraphQL lists it newest first.
    const h = await postGraphQL(fake, historyQuery(), { o: 'octo', n: 'app', h: p.first.head });
    expect(
      h.body.data.repository.object.history.nodes.map((n: { oid: string }) => n.oid).reverse(),
    ).toEqual(p.first.expected);
  });

  it('Ref.compare and REST compare agree, and a branch merged before the fetch compares empty', async () => {
    const p = pushes();
    for (const push of [p.merged, p.fastForwarded, p.forced, p.linear]) {
      const rest = await compare('octo/app', `main...${push.head}`);
      const gql = await postGraphQL(
        fake,
        `query($h: String!) { repository(owner: "octo", name: "app") { ref(qualifiedName: "refs/heads/main") {
          compare(headRef: $h) { aheadBy behindBy status commits(first: 100) { totalCount nodes { oid } } } } } }`,
        { h: push.head },
      );
      const cmp = gql.body.data.repository.ref.compare;
      expect(cmp.aheadBy).toBe(rest.body!.ahead_by);
      expect(cmp.behindBy).toBe(rest.body!.behind_by);
      expect(cmp.status).toBe(String(rest.body!.status).toUpperCase());
      expect(cmp.commits.nodes.map((n: { oid: string }) => n.oid)).toEqual(
        shasOf(rest.body!.commits),
      );
    }
    // Merged into main before the fetch: against main now, nothing is ahead, though the
    // push brought two commits (what the fetcher must not store as complete and empty).
    const late = await compare('octo/app', `main...${p.merged.head}`);
    expect(late.body).toMatchObject({ status: 'behind', ahead_by: 0 });
    expect(p.merged.expected).toHaveLength(2);
  });

  it('pages a history by its cursors and refuses a cursor not its own', async () => {
    const p = pushes();
    const q = historyQuery(4);
    const a = await postGraphQL(fake, q, { o: 'octo', n: 'app', h: p.linear.head });
    const page1 = a.body.data.repository.object.history;
    expect(page1.pageInfo).toEqual({ hasNextPage: true, endCursor: `${p.linear.head} 3` });
    const b = await postGraphQL(fake, q, {
      o: 'octo',
      n: 'app',
      h: p.linear.head,
      after: page1.pageInfo.endCursor,
    });
    const page2 = b.body.data.repository.object.history;
    expect(page2.nodes).toHaveLength(4);
    expect(page2.pageInfo.hasNextPage).toBe(true);
    const bad = await postGraphQL(fake, q, {
      o: 'octo',
      n: 'app',
      h: p.linear.head,
      after: 'nonsense',
    });
    expect(bad.body.errors[0]).toMatchObject({ type: 'INVALID_CURSOR_ARGUMENTS' });
  });

  it('answers commits as GitHub does: GitTimestamp with its offset, a bot is no User, web-flow merges', async () => {
    const world = gitWorld(fake);
    const repo = world.repo('octo/bots', { id: 43 });
    const [sha] = repo.commit(1, { account: () => ({ id: 49699333, login: 'dependabot[bot]' }) });
    repo.push('topic', 1);
    const merge = repo.merge('main', 'topic');
    const r = await postGraphQL(
      fake,
      `query($a: GitObjectID!, $b: GitObjectID!) { repository(owner: "octo", name: "bots") {
        a: object(oid: $a) { ... on Commit { committedDate author { date user { login } } } }
        b: object(oid: $b) { ... on Commit { messageHeadline committer { name email user { login } } parents(first: 2) { totalCount } } }
        none: object(oid: "${'f'.repeat(40)}") { oid } } }`,
      { a: sha, b: merge.head },
    );
    const { a, b, none } = r.body.data.repository;
    expect(a.committedDate).toMatch(/^2026-11-30T\d\d:\d\d:00Z$/);
    expect(a.author.date).toMatch(/\+00:00$/);
    expect(a.author.user).toBeNull();
    expect(b).toEqual({
      messageHeadline: "Merge branch 'topic' into main",
      committer: { name: 'GitHub', email: 'noreply@github.com', user: { login: 'web-flow' } },
      parents: { totalCount: 2 },
    });
    expect(none).toBeNull();
  });
});

describe('renames and deletions', () => {
  const who = '{ databaseId nameWithOwner defaultBranchRef { name } }';

  it('follows a renamed repository by its old name (REST 301s), unless told not to', async () => {
    const world = gitWorld(fake);
    const repo = world.repo('octo/old', { id: 44 });
    const [a, b] = repo.commit(2);
    repo.rename('octo/new');
    const r = await postGraphQL(fake, `{ old: repository(owner: "octo", name: "old") ${who} }`);
    expect(r.body.data.old).toEqual({
      databaseId: 44,
      nameWithOwner: 'octo/new',
      defaultBranchRef: { name: 'main' },
    });
    const strict = await postGraphQL(
      fake,
      `{ repository(owner: "octo", name: "old", followRenames: false) ${who} }`,
    );
    expect(strict.body.errors[0]).toMatchObject({ type: 'NOT_FOUND', path: ['repository'] });
    const moved = await fetch(`${fake.url}/repos/octo/old/compare/${a}...${b}`, {
      headers: PINNED,
      redirect: 'manual',
    });
    expect(moved.status).toBe(301);
    expect(moved.headers.get('location')).toBe(`${fake.url}/repositories/44/compare/${a}...${b}`);
    const followed = await fetch(`${fake.url}/repos/octo/old/compare/${a}...${b}`, {
      headers: PINNED,
    });
    expect(((await followed.json()) as { total_commits: number }).total_commits).toBe(1);
  });

  it('a gone repository is NOT_FOUND with data.repository null; its compare is a 404', async () => {
    const world = gitWorld(fake);
    const gone = world.repo('octo/gone', { id: 45 });
    const [a, b] = gone.commit(2);
    world.repo('octo/here', { id: 46 }).commit(1);
    gone.remove();
    const r = await postGraphQL(
      fake,
      `{ g: repository(owner: "octo", name: "gone") { id } h: repository(owner: "octo", name: "here") { databaseId } }`,
    );
    expect(r.body.data).toEqual({ g: null, h: { databaseId: 46 } });
    expect(r.body.errors).toEqual([
      expect.objectContaining({
        type: 'NOT_FOUND',
        path: ['g'],
        message: "Could not resolve to a Repository with the name 'octo/gone'.",
      }),
    ]);
    expect((await compare('octo/gone', `${a}...${b}`)).status).toBe(404);
  });

  it('a renamed default branch: the new name everywhere, the old one resolves to nothing', async () => {
    const world = gitWorld(fake);
    const repo = world.repo('octo/legacy', { id: 47, defaultBranch: 'master' });
    const [a] = repo.commit(2);
    repo.renameBranch('master', 'main');
    const r = await postGraphQL(
      fake,
      `{ repository(owner: "octo", name: "legacy") { defaultBranchRef { name } old: ref(qualifiedName: "master") { name } new: ref(qualifiedName: "refs/heads/main") { name } } }`,
    );
    expect(r.body.data.repository).toEqual({
      defaultBranchRef: { name: 'main' },
      old: null,
      new: { name: 'main' },
    });
    const profile = (await (
      await fetch(`${fake.url}/repos/octo/legacy`, { headers: PINNED })
    ).json()) as {
      default_branch: string;
    };
    expect(profile.default_branch).toBe('main');
    expect((await compare('octo/legacy', `master...${a}`)).status).toBe(404);
    expect((await compare('octo/legacy', `main...${a}`)).status).toBe(200);
    expect((await compare('octo/legacy', `${'e'.repeat(40)}...${a}`)).status).toBe(404);
  });
});

describe('the project’s own queries', () => {
  it('the batched push-history example runs against the fake and finds each push’s commits', async () => {
    const world = gitWorld(fake);
    const one = world.repo('octo/one', { id: 48 });
    one.commit(2);
    const p0 = one.push('main', 3);
    const two = world.repo('octo/two', { id: 49 });
    two.commit(1);
    two.push('side', 1);
    const p1 = two.merge('main', 'side');
    const r = await postGraphQL(fake, GRAPHQL_QUERY_EXAMPLES[0]!, {
      o0: 'octo',
      n0: 'one',
      h0: p0.head,
      o1: 'octo',
      n1: 'two',
      h1: p1.head,
    });
    expect(r.body.errors).toBeUndefined();
    expect(r.body.data.rateLimit.cost).toBe(1);
    for (const [key, push] of [['p0', p0] as const, ['p1', p1] as const]) {
      const oids = r.body.data[key].head.history.nodes.map((n: { oid: string }) => n.oid);
      for (const sha of push.expected) expect(oids).toContain(sha);
    }
    expect(r.body.data.p1.head.history.nodes[0].parents.totalCount).toBe(2);
  });
});
