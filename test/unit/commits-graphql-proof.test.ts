import { parse } from 'graphql';
import { describe, expect, it } from 'vitest';
import type { FakeCommit } from '../../src/../test/support/fake-commit-graph.ts';
import { buildQuery, planBatches, pointsFor, readItem } from '../../src/commits/graphql/batch.ts';
import {
  DEFAULT_PROOF_LIMITS,
  judge,
  newEvidence,
  topologicalOrder,
} from '../../src/commits/graphql/proof.ts';
import { type Final, proveAll, type RoundPush } from '../../src/commits/graphql/rounds.ts';
import type { FirstRound } from '../../src/commits/graphql/sizing.ts';
import { range } from '../support/fake-commit-graph.ts';
import { analyzeQuery } from '../support/fake-graphql-cost.ts';
import { githubSchema, validateAgainstGitHubSchema } from '../support/fake-graphql-schema.ts';
import { inProcessGraphQL } from '../support/graphql-driver.ts';

/**
 * The proof of a push's commits from batched GraphQL answers (ADR 0111), run against the
 * fake GitHub's executor (GitHub's schema, the point formula): for every kind of push the
 * proven set is git's own `base..head` (the fake's range), oldest first, parents first.
 */

let seq = 0;
const sha = () => (0xabc000000 + ++seq).toString(16).padStart(40, '0');
let minute = 0;
/** A commit whose committer date is `skew` minutes off the order it was made in. */
function c(parents: string[], skew = 0): FakeCommit {
  minute++;
  const date = new Date(Date.UTC(2026, 10, 1) + (minute + skew) * 60_000).toISOString();
  return {
    sha: sha(),
    parents,
    message: `m${minute}`,
    author: { name: 'A', email: 'a@x', date },
    account: { id: 42, login: 'a' },
  };
}

function world() {
  const d = inProcessGraphQL();
  const repo = (id: number, name: string) => {
    d.repos.setRepo({ id, full_name: name, default_branch: 'main' } as never);
    return {
      id: String(id),
      name,
      add(...cs: FakeCommit[]) {
        d.repos.addCommits(name, cs);
        return cs.map((x) => x.sha);
      },
      line(n: number, from: string | null, skew = 0) {
        const out: string[] = [];
        let p = from;
        for (let i = 0; i < n; i++) {
          const x = c(p ? [p] : [], skew);
          d.repos.addCommits(name, [x]);
          out.push(x.sha);
          p = x.sha;
        }
        return out;
      },
      truth(base: string | null, head: string) {
        const g = d.repos.commitGraph(name)!;
        return base
          ? range(g, base, head).commits.map((x) => x.sha)
          : range(g, '0'.repeat(40), head).commits.map((x) => x.sha);
      },
    };
  };
  return { d, repo };
}

const limits = { ...DEFAULT_PROOF_LIMITS, cap: 250 };

async function prove(
  d: ReturnType<typeof inProcessGraphQL>,
  pushes: RoundPush[],
  o: { cap?: number; maxRequests?: number; firstRound?: FirstRound } = {},
) {
  return proveAll(pushes, d.send, {
    limits: { ...limits, cap: o.cap ?? 250 },
    maxRequests: o.maxRequests ?? 149,
    ...(o.firstRound ? { firstRound: o.firstRound } : {}),
  });
}

const push = (
  r: { id: string; name: string },
  base: string | null,
  head: string,
  baseFrom: RoundPush['baseFrom'] = 'before',
): RoundPush => ({
  key: `${r.name}:${head}`,
  fullName: r.name,
  repositoryId: r.id,
  head,
  base,
  baseFrom,
});

function provenShas(v: Final | undefined) {
  if (v?.kind !== 'proven') throw new Error(`not proven: ${JSON.stringify(v)}`);
  return {
    shas: v.commits.map((x) => x.sha),
    total: v.total,
    firstPosition: v.firstPosition,
    how: v.how,
  };
}

describe('proving a push from GraphQL answers', () => {
  it('a linear push of one commit, and of twelve', async () => {
    const { d, repo } = world();
    const r = repo(1, 'o/linear');
    const root = r.line(5, null);
    const one = r.line(1, root.at(-1)!);
    const twelve = r.line(12, one[0]!);
    const res = await prove(d, [push(r, root.at(-1)!, one[0]!), push(r, one[0]!, twelve.at(-1)!)]);
    expect(provenShas(res.verdicts.get(`o/linear:${one[0]}`))).toEqual({
      shas: one,
      total: 1,
      firstPosition: 0,
      how: 'linear',
    });
    expect(provenShas(res.verdicts.get(`o/linear:${twelve.at(-1)}`))).toMatchObject({
      shas: twelve,
      total: 12,
      how: 'linear',
    });
    // two pushes leave room in one 1-point query to read both deep: one round
    expect(res.queries).toBe(1);
    expect(res.requests).toBe(2 * (1 + 72) + 2);
    expect(res.points).toBe(1);
    // under a tight bound (7 requests a query) the first round still fills its one query
    // (3 requests a push: the head and its parents and one more, or the base's page): the
    // one-commit push is proven at once, the long one walked as far as the counts say
    const tight = await prove(
      d,
      [push(r, root.at(-1)!, one[0]!), push(r, one[0]!, twelve.at(-1)!)],
      { maxRequests: 7 },
    );
    expect(provenShas(tight.verdicts.get(`o/linear:${twelve.at(-1)}`)).shas).toEqual(twelve);
    expect(tight.requests).toBe(2 * 3 + 12);
  });

  it('the head alone, without its count: one request proves a one-commit push; a longer one is counted, then walked', async () => {
    const { d, repo } = world();
    const r = repo(9, 'o/heads');
    const root = r.line(3, null);
    const one = r.line(1, root.at(-1)!);
    const four = r.line(4, one[0]!);
    const fresh = repo(10, 'o/fresh');
    const history = fresh.line(3, null);
    const res = await proveAll(
      [
        push(r, root.at(-1)!, one[0]!),
        push(r, one[0]!, four.at(-1)!),
        { ...push(fresh, null, history.at(-1)!, 'first-push') },
      ],
      d.send,
      { limits, maxRequests: 149, firstRound: { walk: 1, withBase: false } },
    );
    expect(provenShas(res.verdicts.get(`o/heads:${one[0]}`))).toEqual({
      shas: one,
      total: 1,
      firstPosition: 0,
      how: 'linear',
    });
    expect(provenShas(res.verdicts.get(`o/heads:${four.at(-1)}`))).toMatchObject({
      shas: four,
      total: 4,
    });
    // a first push walked to its root has every ancestor: its whole history, no count
    expect(provenShas(res.verdicts.get(`o/fresh:${history.at(-1)}`))).toMatchObject({
      shas: history,
      total: 3,
      how: 'first-push',
    });
    // round 1: each head alone (3); the four-commit push: its head and base counted (2),
    // then the three below its head walked (1 + 3); the first push: its head counted (1),
    // then walked to its root (1 + 2)
    expect(res.requests).toBe(3 + (2 + 4) + (1 + 3));
  });

  it('a merge whose side branch is older than the mainline (date order interleaves)', async () => {
    const { d, repo } = world();
    const r = repo(2, 'o/merge');
    const base = r.line(6, null);
    // the side branch forks at base[1] and is dated an hour EARLIER than its parent
    const side = r.line(3, base[1]!, -60);
    const main = r.line(2, base.at(-1)!);
    const [merge] = r.add(c([main[1]!, side[2]!]));
    const res = await prove(d, [push(r, main[1]!, merge!)]);
    const p = provenShas(res.verdicts.get(`o/merge:${merge}`));
    expect(new Set(p.shas)).toEqual(new Set(r.truth(main[1]!, merge!)));
    expect(p.shas).toHaveLength(4);
    expect(p.how).toBe('fast-forward');
    // parents before children
    expect(p.shas.at(-1)).toBe(merge);
    expect(p.shas.indexOf(side[0]!)).toBeLessThan(p.shas.indexOf(side[2]!));
  });

  it('a force push: before is not an ancestor of head', async () => {
    const { d, repo } = world();
    const r = repo(3, 'o/force');
    const base = r.line(4, null);
    const old = r.line(3, base.at(-1)!);
    const rewritten = r.line(2, base.at(-1)!);
    const res = await prove(d, [push(r, old.at(-1)!, rewritten.at(-1)!)]);
    expect(provenShas(res.verdicts.get(`o/force:${rewritten.at(-1)}`))).toMatchObject({
      shas: rewritten,
      total: 2,
      how: 'force-push',
    });
    expect(r.truth(old.at(-1)!, rewritten.at(-1)!)).toEqual(rewritten);
  });

  it('a first push: the whole history, and past the cap its newest with the true count', async () => {
    const { d, repo } = world();
    const r = repo(4, 'o/first');
    const all = r.line(30, null);
    const res = await prove(d, [push(r, null, all.at(-1)!, 'first-push')]);
    expect(provenShas(res.verdicts.get(`o/first:${all.at(-1)}`))).toEqual({
      shas: all,
      total: 30,
      firstPosition: 0,
      how: 'first-push',
    });
    const capped = await prove(d, [push(r, null, all.at(-1)!, 'first-push')], { cap: 10 });
    expect(provenShas(capped.verdicts.get(`o/first:${all.at(-1)}`))).toMatchObject({
      shas: all.slice(20),
      total: 30,
      firstPosition: 20,
    });
  });

  it('more than the cap: partial with the true count, or REST compare when not read whole', async () => {
    const { d, repo } = world();
    const r = repo(5, 'o/big');
    const root = r.line(1, null);
    const many = r.line(20, root[0]!);
    const read = await prove(d, [push(r, root[0]!, many.at(-1)!)], { cap: 5 });
    expect(provenShas(read.verdicts.get(`o/big:${many.at(-1)}`))).toEqual({
      shas: many.slice(15),
      total: 20,
      firstPosition: 15,
      how: 'linear',
    });
    const res = await prove(d, [push(r, root[0]!, many.at(-1)!)], { cap: 5, maxRequests: 3 });
    expect(res.verdicts.get(`o/big:${many.at(-1)}`)).toMatchObject({
      kind: 'fallback',
      reason: expect.stringMatching(/over the cap/),
    });
  });

  it('a new branch against the default branch tip, and one merged into main before the fetch', async () => {
    const { d, repo } = world();
    const r = repo(6, 'o/branch');
    const main = r.line(3, null);
    d.repos.setBranch('o/branch', 'main', main.at(-1)!);
    const topic = r.line(2, main[1]!);
    const res = await prove(d, [push(r, null, topic.at(-1)!, 'default-now')]);
    expect(provenShas(res.verdicts.get(`o/branch:${topic.at(-1)}`))).toMatchObject({
      shas: topic,
      total: 2,
    });
    // merged: main now contains the branch. Against main now the proof says 0 commits,
    // which the fetcher never stores as complete (the tip at push time is unknown) …
    const [merged] = r.add(c([main.at(-1)!, topic.at(-1)!]));
    d.repos.setBranch('o/branch', 'main', merged!);
    const after = await prove(d, [push(r, null, topic.at(-1)!, 'default-now')]);
    expect(provenShas(after.verdicts.get(`o/branch:${topic.at(-1)}`))).toMatchObject({
      shas: [],
      total: 0,
      how: 'behind',
    });
    // … while against the tip it had at push time (proven from the stored pushes) it is exact
    const then = await prove(d, [push(r, main.at(-1)!, topic.at(-1)!, 'default-tip')]);
    expect(provenShas(then.verdicts.get(`o/branch:${topic.at(-1)}`))).toMatchObject({
      shas: topic,
      how: 'force-push',
    });
  });

  it('a repository that is gone, and a head GitHub does not have', async () => {
    const { d, repo } = world();
    const r = repo(7, 'o/here');
    const x = r.line(2, null);
    const res = await prove(d, [
      push({ id: '99', name: 'o/nowhere' }, x[0]!, x[1]!),
      push(r, x[0]!, 'f'.repeat(40)),
      push(r, x[0]!, x[1]!),
    ]);
    expect(res.verdicts.get(`o/nowhere:${x[1]}`)).toMatchObject({ kind: 'gone' });
    expect(res.verdicts.get(`o/here:${'f'.repeat(40)}`)).toMatchObject({ kind: 'gone' });
    expect(provenShas(res.verdicts.get(`o/here:${x[1]}`)).shas).toEqual([x[1]]);
  });

  it('RESOURCE_LIMITS_EXCEEDED: the refused part is split and asked again, the rest kept', async () => {
    const { d, repo } = world();
    const r = repo(8, 'o/heavy');
    const x = r.line(9, null);
    d.controls.configure({ resourceLimits: { topLevelFields: 3 } });
    const pushes = x.slice(1).map((h, i) => push(r, x[i]!, h));
    const res = await prove(d, pushes);
    for (const p of pushes) expect(provenShas(res.verdicts.get(p.key)).total).toBe(1);
    expect(res.queries).toBeGreaterThan(1);
    expect(d.controls.queries.some((q) => q.errorTypes.includes('RESOURCE_LIMITS_EXCEEDED'))).toBe(
      true,
    );
  });

  it('a 502 splits the batch; what cannot be answered alone goes to REST', async () => {
    const { d, repo } = world();
    const r = repo(9, 'o/flaky');
    const x = r.line(3, null);
    d.controls.fail({ status: 502, times: 1 });
    const res = await prove(d, [push(r, x[0]!, x[1]!), push(r, x[1]!, x[2]!)]);
    expect(provenShas(res.verdicts.get(`o/flaky:${x[1]}`)).shas).toEqual([x[1]]);
    expect(provenShas(res.verdicts.get(`o/flaky:${x[2]}`)).shas).toEqual([x[2]]);
    expect(res.queryFailures).toBe(1);
    d.controls.fail({ status: 502, times: 10 });
    const alone = await prove(d, [push(r, x[0]!, x[1]!)]);
    expect(alone.verdicts.get(`o/flaky:${x[1]}`)).toMatchObject({
      kind: 'unanswered',
      failed: true,
    });
    expect(alone.queries).toBe(1);
  });

  it.each([
    ['502', { status: 502 }],
    ['a 200 that is not JSON', { status: 200, body: '<html>proxy error</html>' }],
    ['an empty 200', { status: 200, body: '' }],
  ])(
    '%s on every query: the breaker opens after 3 queries, not one a push',
    async (_what, fault) => {
      const { d, repo } = world();
      const r = repo(10, 'o/down');
      const x = r.line(61, null);
      d.controls.fail({ ...fault, times: Number.POSITIVE_INFINITY });
      const pushes = x.slice(1).map((h, i) => push(r, x[i]!, h));
      // Each head alone (one request a push): the 60 fit one first-round query.
      const res = await prove(d, pushes, { firstRound: { walk: 1, withBase: false } });
      // 60 pushes: one failed query, its halves, and the breaker is open.
      expect(res.queries).toBe(3);
      expect(d.controls.queries).toHaveLength(3);
      expect(res.queryFailures).toBe(3);
      const verdicts = pushes.map((p) => res.verdicts.get(p.key)!);
      for (const v of verdicts) expect(v.kind).toBe('unanswered');
      // The first query asked about every one of them: each is charged if REST cannot take it.
      expect(verdicts.every((v) => v.kind === 'unanswered' && v.failed)).toBe(true);
    },
  );

  it('the breaker leaves the pushes no query failed on uncharged', async () => {
    const { d, repo } = world();
    const r = repo(11, 'o/wide');
    const x = r.line(301, null);
    // 300 one-commit pushes: three first-round queries; the first fails for good.
    const pushes = x.slice(1).map((h, i) => push(r, x[i]!, h));
    d.controls.fail({ status: 502, times: Number.POSITIVE_INFINITY });
    const res = await prove(d, pushes);
    expect(res.queries).toBe(3);
    const failed = pushes.filter((p) => {
      const v = res.verdicts.get(p.key)!;
      return v.kind === 'unanswered' && v.failed;
    });
    const notAsked = pushes.filter((p) => {
      const v = res.verdicts.get(p.key)!;
      return v.kind === 'unanswered' && !v.failed;
    });
    expect(failed.length).toBeGreaterThan(0);
    expect(notAsked.length).toBeGreaterThan(0);
    expect(failed.length + notAsked.length).toBe(pushes.length);
  });

  it('a suspect is asked in a query of its own', async () => {
    const { d, repo } = world();
    const r = repo(12, 'o/suspect');
    const x = r.line(5, null);
    const pushes = x.slice(1).map((h, i) => ({ ...push(r, x[i]!, h), alone: i === 1 }));
    const res = await prove(d, pushes);
    for (const p of pushes) expect(provenShas(res.verdicts.get(p.key)).total).toBe(1);
    const byQuery = d.controls.queries.map(
      (q) => Object.keys(q.variables).filter((k) => /^o\d+$/.test(k)).length,
    );
    expect(byQuery.sort()).toEqual([1, 3]);
  });

  it('a push the counts show GraphQL cannot walk in the rounds left goes to REST at once', async () => {
    const { d, repo } = world();
    const r = repo(13, 'o/huge');
    const x = r.line(1_201, null);
    const res = await prove(d, [push(r, x[0]!, x[1_200]!)], { cap: 10_000 });
    expect(res.verdicts.get(`o/huge:${x[1_200]}`)).toMatchObject({ kind: 'fallback' });
    // Round one counts head and base: 1,200 commits cannot be walked 100 a round in six more.
    expect(res.queries).toBe(1);
  });
});

describe('never a wrong set', () => {
  it('random histories (merges, skewed clocks, rewrites): every proven set is git’s own range', async () => {
    const { d, repo } = world();
    let seed = 7;
    const rand = (n: number) => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed % n;
    };
    const r = repo(20, 'o/random');
    const all = r.line(3, null);
    for (let i = 0; i < 120; i++) {
      const kind = rand(10);
      const tip = all.at(-1)!;
      const skew = rand(4) === 0 ? -rand(600) : 0;
      if (kind < 6) all.push(...r.line(1 + rand(3), tip, skew));
      else if (kind < 9) {
        const fork = all[Math.max(0, all.length - 1 - rand(12))]!;
        const side = r.line(1 + rand(4), fork, skew);
        all.push(...side, ...r.add(c([tip, side.at(-1)!], rand(3) === 0 ? -300 : 0)));
      } else all.push(...r.line(1 + rand(2), all[Math.max(0, all.length - 2 - rand(5))]!, skew));
    }
    const pushes: RoundPush[] = [];
    for (let i = 0; i < 60; i++) {
      const head = all[3 + rand(all.length - 3)]!;
      const base = all[rand(all.length)]!;
      if (base !== head) pushes.push({ ...push(r, base, head), key: `k${i}` });
    }
    const res = await prove(d, pushes);
    let provenCount = 0;
    for (const p of pushes) {
      const v = res.verdicts.get(p.key)!;
      expect(['proven', 'fallback']).toContain(v.kind);
      if (v.kind !== 'proven') continue;
      provenCount++;
      const got = v.commits.map((x) => x.sha);
      const truth = r.truth(p.base, p.head);
      expect(new Set(got)).toEqual(new Set(truth));
      expect(v.total).toBe(truth.length);
      const at = new Map(got.map((x, i) => [x, i]));
      for (const x of v.commits)
        for (const parent of x.parents)
          if (at.has(parent)) expect(at.get(parent)!).toBeLessThan(at.get(x.sha)!);
    }
    expect(provenCount).toBeGreaterThan(pushes.length / 2);
  });
});

describe('an answer that disagrees with itself is invalid, never stored', () => {
  const node = (oid: string, parents: string[]) => ({
    commit: { sha: oid, parents } as never,
    parents,
  });
  it('counts that say more commits than the edges reach', () => {
    const ev = newEvidence('b'.repeat(40), 'a'.repeat(40));
    ev.nodes.set('b'.repeat(40), node('b'.repeat(40), ['a'.repeat(40)]));
    ev.headTotal = 10;
    ev.baseTotal = 5;
    ev.basePages = 1;
    expect(judge(ev, limits)).toMatchObject({ kind: 'invalid' });
    ev.headTotal = 6;
    expect(judge(ev, limits)).toMatchObject({ kind: 'proven', total: 1 });
  });
  it('a cycle in the parent edges', () => {
    const a = '1'.repeat(40);
    const b = '2'.repeat(40);
    const ev = newEvidence(a, null);
    ev.nodes.set(a, node(a, [b]));
    ev.nodes.set(b, node(b, [a]));
    ev.headTotal = 2;
    expect(topologicalOrder(ev, [a, b])).toHaveLength(0);
    expect(judge(ev, limits)).toMatchObject({ kind: 'invalid' });
  });
});

describe('the batch queries', () => {
  it("reads a new ref's default branch with its tip's history, and refuses one whose history is not the tip's", () => {
    const [head, tip, older] = ['1', '2', '3'].map((x) => x.repeat(40)) as [string, string, string];
    const commit = (oid: string, parents: string[]) => ({
      oid,
      message: 'm',
      author: { name: 'A', email: 'a@x', date: '2026-11-01T00:00:00Z', user: null },
      committer: { name: 'A', email: 'a@x', date: '2026-11-01T00:00:00Z', user: null },
      parents: { totalCount: parents.length, nodes: parents.map((p) => ({ oid: p })) },
    });
    const item = {
      fullName: 'o/a',
      repositoryId: '1',
      asks: [{ kind: 'commit' as const, of: head }],
      defaultBranch: true,
    };
    const answer = (nodes: string[]) => ({
      p0: {
        databaseId: 1,
        a0_0: commit(head, [tip]),
        defaultBranchRef: {
          name: 'main',
          target: {
            oid: tip,
            history: {
              totalCount: 2,
              pageInfo: { hasNextPage: false, endCursor: null },
              nodes: nodes.map((oid) => ({ oid })),
            },
          },
        },
      },
    });
    expect(readItem(answer([tip, older]), [], 0, item, newEvidence(head, null))).toEqual({
      kind: 'ok',
      defaultBranch: { name: 'main', tip, history: { total: 2, oids: [tip, older], next: null } },
    });
    for (const nodes of [[older, tip], [tip, tip], [tip]]) {
      expect(readItem(answer(nodes), [], 0, item, newEvidence(head, null)).kind).toBe('invalid');
    }
  });

  it('every shape is valid against GitHub’s schema, and costs what the formula says', () => {
    const q = buildQuery(
      [
        {
          fullName: 'o/a',
          repositoryId: '1',
          asks: [
            { kind: 'walk', from: 'a'.repeat(40), first: 1 },
            { kind: 'base', first: 100, after: null },
          ],
        },
        {
          fullName: 'o/b',
          repositoryId: '2',
          asks: [
            { kind: 'count', of: 'b'.repeat(40) },
            { kind: 'walk', from: 'c'.repeat(40), first: 7 },
          ],
          defaultBranch: true,
        },
        { fullName: 'o/c', repositoryId: '3', asks: [{ kind: 'base', first: 100, after: 'x 99' }] },
      ],
      ['d'.repeat(40), null, 'e'.repeat(40)],
    );
    expect(validateAgainstGitHubSchema({ query: q.query, variables: q.variables })).toEqual([]);
    // the default branch's history page (oids) is one request more, as GitHub counts it
    expect(q.requests).toBe(2 + 1 + 1 + 8 + 1 + 1);
    expect(analyzeQuery(githubSchema(), parse(q.query), { variables: q.variables }).requests).toBe(
      q.requests,
    );
    expect(q.points).toBe(1);
    expect(pointsFor(149)).toBe(1);
    expect(pointsFor(150)).toBe(2);
  });
  it('batches stay under the request bound', () => {
    const items = Array.from({ length: 100 }, (_, i) => ({
      fullName: `o/${i}`,
      repositoryId: String(i),
      asks: [
        { kind: 'walk' as const, from: 'a'.repeat(40), first: 1 },
        { kind: 'base' as const, first: 100, after: null },
      ],
    }));
    const batches = planBatches(items, 149);
    expect(batches.map((b) => b.length)).toEqual([49, 49, 2]);
  });
});
