import { sql } from 'kysely';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { fetchCycle } from '../../src/commits/cycle.ts';
import {
  chain,
  commitFetchers,
  freshCommitWorld,
  insertPushes,
  insertRepository,
  newSha,
  pushShas,
  pushState,
  ZERO,
} from '../support/commit-world.ts';
import { useTestDatabase } from '../support/db.ts';
import { movedMainWorld } from '../support/moved-main.ts';
import { useFakeGitHub } from '../support/use-fake-github.ts';

/**
 * Commits by GraphQL batches (ADR 0111) through github.graphql() against the fake GitHub:
 * every kind of push in one cycle, each stored with exactly git's range, a few points on
 * the #graphql window, REST compare only where GraphQL cannot prove the set.
 */

const t = useTestDatabase();
const fake = useFakeGitHub();
const commitDeps = commitFetchers(t, fake, { responseTimeoutMs: 5_000, workerId: 'gql-fetcher' });
const fetcher = (env: Record<string, string> = {}) => commitDeps.fetcher({ env });

beforeEach(async () => {
  await freshCommitWorld(t.db, fake);
});
afterEach(commitDeps.close);

const graphqlPosts = () => fake.requests.filter((r) => r.path === '/graphql');
const compares = () => fake.requests.filter((r) => r.path.includes('/compare/'));

describe('commits by GraphQL batches', () => {
  it('linear, merge, force push, first push and a gone repository in one cycle: exact', async () => {
    const deps = fetcher();
    await insertRepository(t.db, 40, 'octo/lin');
    await insertRepository(t.db, 41, 'octo/merge');
    await insertRepository(t.db, 42, 'octo/force');
    await insertRepository(t.db, 43, 'octo/first');
    await insertRepository(t.db, 44, 'octo/gone');
    const lin = chain(fake, 'octo/lin', 6);
    const m = chain(fake, 'octo/merge', 4);
    const side = chain(fake, 'octo/merge', 2, m[1]!);
    const merge = newSha();
    fake.addCommits('octo/merge', [{ sha: merge, parents: [m[3]!, side[1]!] }]);
    const f = chain(fake, 'octo/force', 3);
    const rewritten = chain(fake, 'octo/force', 2, f[0]!);
    const first = chain(fake, 'octo/first', 5);
    await insertPushes(t.db, [
      { repositoryId: 40, before: lin[0]!, head: lin[1]! },
      { repositoryId: 40, before: lin[1]!, head: lin[5]! },
      { repositoryId: 41, before: m[3]!, head: merge },
      { repositoryId: 42, before: f[2]!, head: rewritten[1]! },
      { repositoryId: 43, before: ZERO, head: first[4]! },
      { repositoryId: 44, before: newSha(), head: newSha() },
    ]);
    const s = await fetchCycle(deps);
    expect(s.outcomes).toMatchObject({ complete: 5, gone: 1, failed: 0, retry: 0 });
    expect(await pushShas(t.db, lin[1]!)).toEqual([{ position: 0, sha: lin[1] }]);
    expect((await pushShas(t.db, lin[5]!)).map((r) => r.sha)).toEqual(lin.slice(2));
    const merged = (await pushShas(t.db, merge)).map((r) => r.sha);
    expect(new Set(merged)).toEqual(new Set([...side, merge]));
    expect(merged.at(-1)).toBe(merge);
    expect((await pushShas(t.db, rewritten[1]!)).map((r) => r.sha)).toEqual(rewritten);
    expect((await pushShas(t.db, first[4]!)).map((r) => r.sha)).toEqual(first);
    expect(await pushState(t.db, first[4]!)).toMatchObject({
      commits_state: 'complete',
      commit_count: 5,
    });
    // GraphQL only, on the #graphql key, a point a query
    expect(compares()).toHaveLength(0);
    expect(graphqlPosts().length).toBe(s.queries);
    const ledger = await sql<{ credential: string; points: number; purpose: string }>`
      SELECT credential, points, purpose FROM github_requests`.execute(t.db);
    expect(ledger.rows.length).toBe(s.queries);
    for (const row of ledger.rows) {
      expect(row).toMatchObject({ purpose: 'commits', points: 1 });
      expect(row.credential).toMatch(/#graphql$/);
    }
    // authors became actors pending enrichment, as with REST
    const actors = await sql<{ n: number }>`SELECT count(*)::int AS n FROM actors`.execute(t.db);
    expect(actors.rows[0]!.n).toBeGreaterThan(0);
  });

  it('a new branch merged into main before the fetch is never complete with 0', async () => {
    const deps = fetcher();
    await insertRepository(t.db, 45, 'octo/nb');
    const main = chain(fake, 'octo/nb', 3, null, { branch: 'main' });
    const topic = chain(fake, 'octo/nb', 2, main[2]!);
    const merge = newSha();
    fake.addCommits('octo/nb', [{ sha: merge, parents: [main[2]!, topic[1]!] }]);
    fake.setBranch('octo/nb', 'main', merge);
    await insertPushes(t.db, [
      { repositoryId: 45, ref: 'refs/heads/topic', before: ZERO, head: topic[1]! },
    ]);
    await fetchCycle(deps);
    expect(await pushState(t.db, topic[1]!, 'refs/heads/topic')).toMatchObject({
      commits_state: 'partial',
      commit_count: null,
    });
    expect(compares()).toHaveLength(0);
  });

  it('a new ref of a repository whose profile is not fetched yet: no wait, the first round reads its default branch', async () => {
    const deps = fetcher();
    await insertRepository(t.db, 49, 'octo/fresh', { defaultBranch: null, state: 'pending' });
    const main = chain(fake, 'octo/fresh', 3, null, { branch: 'main' });
    const topic = chain(fake, 'octo/fresh', 2, main[2]!, { branch: 'topic' });
    await insertPushes(t.db, [
      { repositoryId: 49, ref: 'refs/heads/main', before: ZERO, head: main[2]! },
      { repositoryId: 49, ref: 'refs/heads/topic', before: ZERO, head: topic[1]! },
    ]);
    const s = await fetchCycle(deps);
    expect(s.outcomes).toMatchObject({ complete: 1, partial: 1, waiting: 0, failed: 0 });
    // main is the default branch: its first push, its whole history, exact
    expect(await pushState(t.db, main[2]!)).toMatchObject({
      commits_state: 'complete',
      commit_count: 3,
    });
    expect((await pushShas(t.db, main[2]!)).map((r) => r.sha)).toEqual(main);
    // topic is a new branch against main's tip now: its own commits, count unknown
    expect(await pushState(t.db, topic[1]!, 'refs/heads/topic')).toMatchObject({
      commits_state: 'partial',
      commit_count: null,
    });
    expect((await pushShas(t.db, topic[1]!, 'refs/heads/topic')).map((r) => r.sha)).toEqual(topic);
    expect(compares()).toHaveLength(0);
  });

  for (const after of ['nothing', 'rewritten'] as const) {
    it(`a new branch pushed after main moved past its last stored push (main ${after === 'nothing' ? 'kept' : 'rewritten'} after): only the branch's commits, never main's`, async () => {
      const deps = fetcher();
      const w = await movedMainWorld(t.db, fake, { id: 48, fullName: 'octo/moved', after });
      const s = await fetchCycle(deps);
      expect(s.outcomes).toMatchObject({ partial: 1, complete: 0, failed: 0, retry: 0 });
      expect(await pushState(t.db, w.head, w.ref)).toMatchObject({
        commits_state: 'partial',
        commit_count: null,
      });
      const shas = (await pushShas(t.db, w.head, w.ref)).map((x) => x.sha);
      expect(shas).toEqual(w.topic);
      for (const sha of [...w.stored, ...w.moved]) expect(shas).not.toContain(sha);
      expect(compares()).toHaveLength(0);
    });
  }

  it('what GraphQL cannot prove (an octopus of nine) goes to REST compare, exact', async () => {
    const deps = fetcher();
    await insertRepository(t.db, 46, 'octo/octopus');
    const root = chain(fake, 'octo/octopus', 1);
    const legs = Array.from({ length: 9 }, () => chain(fake, 'octo/octopus', 1, root[0]!)[0]!);
    const octopus = newSha();
    fake.addCommits('octo/octopus', [{ sha: octopus, parents: legs }]);
    await insertPushes(t.db, [{ repositoryId: 46, before: legs[0]!, head: octopus }]);
    const s = await fetchCycle(deps);
    expect(s.outcomes.complete).toBe(1);
    expect(compares()).toHaveLength(1);
    expect(new Set((await pushShas(t.db, octopus)).map((r) => r.sha))).toEqual(
      new Set([...legs.slice(1), octopus]),
    );
  });

  it('COMMITS_TRANSPORT=rest: one compare a push, no GraphQL', async () => {
    const deps = fetcher({ COMMITS_TRANSPORT: 'rest' });
    await insertRepository(t.db, 47, 'octo/rest');
    const x = chain(fake, 'octo/rest', 3);
    await insertPushes(t.db, [{ repositoryId: 47, before: x[0]!, head: x[2]! }]);
    expect((await fetchCycle(deps)).outcomes.complete).toBe(1);
    expect(compares()).toHaveLength(1);
    expect(graphqlPosts()).toHaveLength(0);
  });
});
