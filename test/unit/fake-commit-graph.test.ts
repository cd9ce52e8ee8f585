import { describe, expect, it } from 'vitest';
import { commitGraphs, history, range, resolveRev } from '../support/fake-commit-graph.ts';

/** The fake's git: ranges as rev-list counts them, history in git log's order, rev-parse. */

const sha = (n: number) => n.toString(16).padStart(40, '0');
const at = (min: number) => `2026-11-30T10:${String(min).padStart(2, '0')}:00Z`;
const who = (min: number) => ({ name: 'D', email: 'd@example.com', date: at(min) });

/**
 * 1 - 2 - 3 - 6 (main, a merge of 5)
 *      \     /
 *       4 - 5 (topic)
 * and 7, a root of its own (orphan).
 */
function world() {
  const graphs = commitGraphs();
  const c = (n: number, parents: number[], min: number) => ({
    sha: sha(n),
    parents: parents.map(sha),
    author: who(min),
  });
  graphs.addCommits('o/r', [
    c(1, [], 1),
    c(2, [1], 2),
    c(4, [2], 3),
    c(3, [2], 4),
    c(5, [4], 5),
    c(6, [3, 5], 6),
    c(7, [], 7),
  ]);
  graphs.setBranch('o/r', 'main', sha(6));
  graphs.setBranch('o/r', 'topic', sha(5));
  graphs.setBranch('o/r', 'orphan', sha(7));
  return { graphs, g: graphs.get('O/R')! };
}

describe('the fake’s commit graph', () => {
  it('a range is what head reaches and base does not, parents first, counted both ways', () => {
    const { g } = world();
    const r = range(g, sha(3), sha(6));
    expect(r.commits.map((c) => c.sha)).toEqual([sha(4), sha(5), sha(6)]);
    expect(r).toMatchObject({ aheadBy: 3, behindBy: 0, status: 'ahead', mergeBase: sha(3) });
    expect(range(g, sha(5), sha(3))).toMatchObject({
      aheadBy: 1,
      behindBy: 2,
      status: 'diverged',
      mergeBase: sha(2),
    });
    expect(range(g, sha(6), sha(2))).toMatchObject({ aheadBy: 0, behindBy: 4, status: 'behind' });
    expect(range(g, sha(6), sha(6))).toMatchObject({
      aheadBy: 0,
      behindBy: 0,
      status: 'identical',
    });
    expect(range(g, sha(7), sha(6)).mergeBase).toBeNull();
  });

  it('history is git log’s walk: newest committer date first, the commit itself included', () => {
    const { g } = world();
    expect(history(g, sha(6)).map((c) => c.sha)).toEqual([6, 5, 3, 4, 2, 1].map(sha));
    expect(history(g, sha(4)).map((c) => c.sha)).toEqual([4, 2, 1].map(sha));
  });

  it('resolves revisions as rev-parse does, and says which it cannot', () => {
    const { g } = world();
    expect(resolveRev(g, 'main', 'main')).toBe(sha(6));
    expect(resolveRev(g, 'refs/heads/topic', 'main')).toBe(sha(5));
    expect(resolveRev(g, 'HEAD~1', 'main')).toBe(sha(3));
    expect(resolveRev(g, 'main^2', 'main')).toBe(sha(5));
    expect(resolveRev(g, 'main~3', 'main')).toBe(sha(1));
    expect(resolveRev(g, 'main~4', 'main')).toBeNull();
    expect(resolveRev(g, sha(4), 'main')).toBe(sha(4));
    expect(resolveRev(g, sha(99), 'main')).toBeNull();
    expect(resolveRev(g, 'nope', 'main')).toBeNull();
    expect(resolveRev(g, 'main:README.md', 'main')).toBe('unsupported');
  });

  it('follows a rename, forgets a removed repository, and refuses a commit whose parent it lacks', () => {
    const { graphs } = world();
    graphs.rename('o/r', 'o/renamed');
    expect(graphs.get('o/r')).toBeUndefined();
    expect(graphs.get('o/renamed')?.branches.get('main')).toBe(sha(6));
    graphs.renameBranch('o/renamed', 'main', 'trunk');
    expect(graphs.get('o/renamed')?.branches.has('main')).toBe(false);
    expect(graphs.get('o/renamed')?.defaultBranch).toBe('trunk');
    expect(() => graphs.addCommits('o/renamed', [{ sha: sha(9), parents: [sha(8)] }])).toThrow(
      /parent/,
    );
    graphs.remove('o/renamed');
    expect(graphs.has('o/renamed')).toBe(false);
  });
});
