import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import {
  CompareInvalid,
  checkAgainstPush,
  comparePath,
  parseCompare,
} from '../../src/commits/compare.ts';
import { parseJson } from '../../src/platform/json/exact.ts';

/** GitHub's own example answer (test/fixtures/github/compare/README.md), read as the fetcher reads it. */
const EXAMPLE_TEXT = readFileSync(
  new URL('../fixtures/github/compare/commit-comparison.json', import.meta.url),
  'utf8',
);
const example = () => parseJson(EXAMPLE_TEXT) as Record<string, unknown> & { commits: unknown[] };

describe('parseCompare', () => {
  it("reads GitHub's documented example", () => {
    const a = parseCompare(example(), '/repos/octocat/Hello-World/compare/master...topic', 250);
    expect(a.totalCommits).toBe(1);
    expect(a.commits).toEqual([
      {
        sha: '6dcb09b5b57875f334f61aebed695e2e4193db5e',
        authorName: 'Monalisa Octocat',
        authorEmail: 'mona@github.com',
        authoredAt: new Date('2011-04-14T16:00:49Z'),
        authorId: '1',
        authorLogin: 'octocat',
        committerName: 'Monalisa Octocat',
        committerEmail: 'mona@github.com',
        committedAt: new Date('2011-04-14T16:00:49Z'),
        committerId: '1',
        committerLogin: 'octocat',
        message: 'Fix all the bugs',
        parents: ['6dcb09b5b57875f334f61aebed695e2e4193db5e'],
      },
    ]);
  });

  it('keeps a 64-bit account id exactly and drops an id that is not one', () => {
    const text = EXAMPLE_TEXT.replaceAll('"id": 1,', '"id": 9223372036854775807,');
    const a = parseCompare(parseJson(text), '/x', 250);
    expect(a.commits[0]!.authorId).toBe('9223372036854775807');
    const bad = example();
    (bad.commits[0] as { author: { id: unknown } }).author.id = 'seven';
    expect(parseCompare(bad, '/x', 250).commits[0]!.authorId).toBeNull();
  });

  it('a commit GitHub links to no account has null author id and login', () => {
    const e = example();
    (e.commits[0] as { author: unknown }).author = null;
    expect(parseCompare(e, '/x', 250).commits[0]).toMatchObject({
      authorId: null,
      authorLogin: null,
    });
  });

  it('refuses what is not a compare answer, naming the problem', () => {
    const cases: [unknown, RegExp][] = [
      [[], /not a JSON object/],
      [{ commits: [] }, /total_commits/],
      [{ total_commits: -1, commits: [] }, /total_commits/],
      [{ total_commits: 1 }, /"commits" array/],
      [{ total_commits: 1, commits: [{ sha: 'nothex' }] }, /commits\[0\] has no hex "sha"/],
      [
        { total_commits: 300, commits: Array.from({ length: 251 }, () => ({})) },
        /251 commits where at most 250/,
      ],
      // the red team's lies: a repeated sha, more commits than the total
      [
        { total_commits: 2, commits: [{ sha: 'a'.repeat(40) }, { sha: 'a'.repeat(40) }] },
        /listed twice/,
      ],
      [
        { total_commits: 1, commits: [{ sha: 'a'.repeat(40) }, { sha: 'b'.repeat(40) }] },
        /total_commits says 1/,
      ],
    ];
    for (const [body, says] of cases) {
      expect(() => parseCompare(body, '/x', 250)).toThrow(CompareInvalid);
      expect(() => parseCompare(body, '/x', 250)).toThrow(says);
    }
  });

  it('bounds what one commit brings: a huge message is cut, NUL made storable', () => {
    const e = example();
    const c = (e.commits[0] as { commit: { message: string; author: { name: string } } }).commit;
    c.message = 'x'.repeat(300_000);
    c.author.name = 'a\u0000b';
    const a = parseCompare(e, '/x', 250).commits[0]!;
    // where docs/commits.md says, and as inline commits and GraphQL answers are cut
    expect(a.message).toHaveLength(65_536);
    expect(a.authorName).toBe('a\uFFFDb');
  });
});

describe('checkAgainstPush: an answer that disagrees with its push is refused', () => {
  const answer = (total: number, shas: string[]) =>
    parseCompare({ total_commits: total, commits: shas.map((sha) => ({ sha })) }, '/x', 250);
  const [a, b, h] = ['a'.repeat(40), 'b'.repeat(40), 'c'.repeat(40)];
  it('three commits where total_commits says 4 (and the range fits one answer)', () => {
    expect(() => checkAgainstPush(answer(4, [a, b, h]), '/x', h, 250)).toThrow(
      /total_commits says 4/,
    );
  });
  it('a last commit that is not the head', () => {
    expect(() => checkAgainstPush(answer(2, [a, b]), '/x', h, 250)).toThrow(/not the head/);
  });
  it('a sha unlike the head: 64 hex in a push of a SHA-1 repository (ADR 0184)', () => {
    expect(() => checkAgainstPush(answer(2, ['d'.repeat(64), h]), '/x', h, 250)).toThrow(
      /is 64 characters where the head .* is 40/,
    );
  });
  it('an honest answer, and the newest 250 of a longer range', () => {
    expect(checkAgainstPush(answer(3, [a, b, h]), '/x', h, 250).commits).toHaveLength(3);
    expect(checkAgainstPush(answer(900, [a, b, h]), '/x', h, 250).totalCommits).toBe(900);
  });
});

describe('comparePath', () => {
  it('escapes branch names (a slash stays in its segment)', () => {
    expect(comparePath('o/r', 'feature/x#1', 'abc')).toBe(
      '/repos/o/r/compare/feature%2Fx%231...abc',
    );
    expect(comparePath('o/r', 'a', 'b', { page: 2, perPage: 100 })).toBe(
      '/repos/o/r/compare/a...b?per_page=100&page=2',
    );
  });
});
