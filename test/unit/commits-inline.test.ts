import { describe, expect, it } from 'vitest';
import { emailFor } from '../../src/store/commits.ts';
import { NO_TARGETS } from '../../src/store/commits-targets.ts';
import {
  AWAITING_CREDENTIAL,
  inlineCommits,
  MAX_INLINE_COMMITS,
  planCommits,
  stagedState,
} from '../../src/store/inline-commits.ts';

const SHA = (n: number) => n.toString(16).padStart(40, '0');

function push(payload: Record<string, unknown>, size: number | null = null) {
  return {
    actor: { login: 'mona' },
    repository: { fullName: 'octo/cat' },
    ref: 'refs/heads/main',
    head: 'f'.repeat(40),
    size,
    payload,
  };
}

describe('inline commits from a hostile payload', () => {
  it('reads at most 2,048 entries however many are given', () => {
    const commits = Array.from({ length: 5000 }, (_, i) => ({ sha: SHA(i + 1) }));
    const r = inlineCommits({ commits })!;
    expect(r.given).toBe(5000);
    expect(r.commits).toHaveLength(MAX_INLINE_COMMITS);
    expect(planCommits(push({ commits }, 5000), NO_TARGETS, 'github')).toMatchObject({
      state: 'partial',
      count: 5000,
    });
  });

  it('leaves out entries without a well-formed sha, so the push is partial, not complete', () => {
    const commits = [
      { sha: SHA(1) },
      { sha: 'not-a-sha' },
      { sha: 'A'.repeat(40) },
      null,
      [SHA(5)],
      { id: SHA(6) },
    ];
    const plan = planCommits(push({ commits }, 6), NO_TARGETS, 'github');
    expect(plan.state).toBe('partial');
    expect(plan.commits.map((c) => c.sha)).toEqual([SHA(1), SHA(6)]);
  });

  it('drops an over-long name or address, cuts an over-long message, ignores non-strings', () => {
    const [c] = inlineCommits({
      commits: [
        {
          sha: SHA(1),
          author: { name: 'n'.repeat(1025), email: 42 },
          message: 'm'.repeat(70_000),
          distinct: 'yes',
        },
      ],
    })!.commits;
    expect(c).toEqual({
      sha: SHA(1),
      authorName: null,
      authorEmail: null,
      message: 'm'.repeat(65_536),
      distinct: null,
    });
  });

  it('a payload whose commits are not an array carries none', () => {
    expect(inlineCommits({ commits: { 0: { sha: SHA(1) } } })).toBeNull();
    expect(planCommits(push({ commits: 'x' }, 1), NO_TARGETS, 'github').state).toBe('skipped');
  });

  it('a webhook array below the cap is the whole push; at the cap the count is unknown', () => {
    const commits = (n: number) => Array.from({ length: n }, (_, i) => ({ sha: SHA(i + 1) }));
    expect(planCommits(push({ commits: commits(0) }), NO_TARGETS, 'webhook')).toMatchObject({
      state: 'complete',
      count: 0,
    });
    expect(planCommits(push({ commits: commits(2048) }), NO_TARGETS, 'webhook')).toMatchObject({
      state: 'partial',
      count: null,
    });
  });
});

describe('a covered push in a process without a credential (ADR 0186)', () => {
  const everyone = { ...NO_TARGETS, publicPushes: true };
  const noCredential = { ...everyone, credential: false };
  // An event's list is at most 20 commits: 20 of a push of 25 (commit-list rules, ADR 0184).
  const carried = Array.from({ length: 20 }, (_, i) => ({
    sha: SHA(i + 1),
    message: 'm',
    author: { name: 'a', email: 'a@x' },
  }));

  it('is pending with one, skipped waiting for one without', () => {
    const pending = planCommits(push({}, 3), everyone, 'github');
    expect(pending).toMatchObject({ state: 'pending', count: 3, commits: [], due: true });
    expect(pending.awaitingCredential).toBeUndefined();
    const waiting = planCommits(push({}, 3), noCredential, 'github');
    expect(waiting).toMatchObject({
      state: 'skipped',
      awaitingCredential: true,
      count: 3,
      commits: [],
      due: false,
    });
    expect(stagedState(waiting)).toBe(AWAITING_CREDENTIAL);
  });

  it('keeps what it carried (partial), and a push nobody covers is plainly skipped', () => {
    const partial = planCommits(push({ commits: carried }, 25), noCredential, 'github');
    expect(partial).toMatchObject({ state: 'partial', count: 25 });
    expect(partial.awaitingCredential).toBeUndefined();
    const stranger = planCommits(push({}, 3), { ...NO_TARGETS, credential: false }, 'github');
    expect(stranger).toMatchObject({ state: 'skipped', count: 3, commits: [], due: false });
    expect(stranger.awaitingCredential).toBeUndefined();
    expect(stagedState(stranger)).toBe('skipped');
  });
});

describe('emailFor', () => {
  it('hashes the trimmed lower-cased address; an empty one is NULL', () => {
    expect(emailFor(' A@B.org ', 'hash')).toBe(emailFor('a@b.org', 'hash'));
    expect(emailFor('a@b.org', 'hash')).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(emailFor('   ', 'hash')).toBeNull();
    expect(emailFor(' A@B.org ', 'keep')).toBe(' A@B.org ');
    expect(emailFor('a@b.org', 'drop')).toBeNull();
    expect(emailFor(null, 'keep')).toBeNull();
  });
});

describe('an inline list is held to the rules a compare answer meets (ADR 0184)', () => {
  const head = 'f'.repeat(40);
  const listed = (...shas: string[]) => ({ commits: shas.map((sha) => ({ sha })) });
  const at = (payload: Record<string, unknown>, size: number, createdAt?: Date) => ({
    ...push(payload, size),
    ...(createdAt ? { createdAt } : {}),
  });

  it.each([
    ['a sha listed twice', listed(head, head), 2, /is listed twice/],
    ['a whole list whose last is not the head', listed(head, SHA(1)), 2, /not the head/],
    ['a sha unlike the head (64 hex in a SHA-1 push)', listed('a'.repeat(64)), 1, /64 characters/],
    ['more commits than size', listed(SHA(1), head), 1, /2 commits where size says 1/],
    ['fewer than a size that fits an event', listed(head), 3, /1 commits where size says 3/],
  ])('%s: nothing stored, size not believed, the reason kept', (_, payload, size, why) => {
    for (const source of ['github', 'archive', 'mirror'] as const) {
      const plan = planCommits(push(payload, size), NO_TARGETS, source);
      expect(plan).toMatchObject({ state: 'skipped', count: null, commits: [] });
      expect(plan.refused).toMatch(why);
    }
  });

  it('a list that keeps them, from a mirror: unverified, kept, due only when targeted', () => {
    const plan = planCommits(push(listed(SHA(1), head), 2), NO_TARGETS, 'mirror');
    expect(plan).toMatchObject({ state: 'unverified', count: 2, due: false, source: 'mirror' });
    expect(plan.commits.map((c) => c.sha)).toEqual([SHA(1), head]);
    const everyone = { ...NO_TARGETS, publicPushes: true };
    expect(planCommits(push(listed(SHA(1), head), 2), everyone, 'mirror').due).toBe(true);
    // An empty list with size 0 is a claim too.
    expect(planCommits(push({ commits: [] }, 0), NO_TARGETS, 'mirror').state).toBe('unverified');
  });

  it('an archive line after 2025-10-07 is a mirror’s whoever serves it', () => {
    const before = at(listed(head), 1, new Date('2025-10-07T23:59:59Z'));
    const after = at(listed(head), 1, new Date('2025-10-08T00:00:00Z'));
    expect(planCommits(before, NO_TARGETS, 'archive')).toMatchObject({
      state: 'complete',
      source: 'archive',
    });
    expect(planCommits(after, NO_TARGETS, 'archive')).toMatchObject({
      state: 'unverified',
      source: 'mirror',
    });
    // GitHub's own answer (a polled GHES event) is not an archive's.
    expect(planCommits(after, NO_TARGETS, 'github').state).toBe('complete');
  });

  it('distinct_size over the count is not kept', () => {
    const p = { ...push(listed(head), 1), distinctSize: 1e9 };
    expect(planCommits(p, NO_TARGETS, 'github')).toMatchObject({ count: 1, distinctSize: null });
    expect(planCommits({ ...p, distinctSize: 1 }, NO_TARGETS, 'github').distinctSize).toBe(1);
  });
});
