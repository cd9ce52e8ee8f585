import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { classifyLine, mapArchivePush, scopeOf } from '../../src/backfill/events.ts';
import { isTimelineLine } from '../../src/backfill/timeline.ts';
import { NO_TARGETS } from '../../src/store/commits-targets.ts';
import { planCommits } from '../../src/store/inline-commits.ts';
import type { PushRow } from '../../src/store/mapping.ts';
import { isFullSha, timelineBefore } from '../../src/store/timeline-key.ts';

// Real lines of GH Archive's 2013 and 2014 hours (test/fixtures/gharchive-timeline/README.md).
const LINES = readFileSync(
  new URL('../fixtures/gharchive-timeline/timeline-lines.ndjson', import.meta.url),
  'utf8',
)
  .split('\n')
  .filter((l) => l !== '');

function verdictOf(n: number) {
  return classifyLine(Buffer.from(LINES[n - 1]!));
}

function pushOf(n: number): PushRow {
  const v = verdictOf(n);
  if (v.kind !== 'push') throw new Error(`line ${n} is ${v.kind}`);
  const row = mapArchivePush(v.event, v.text, n);
  if ('rejected' in row) throw new Error(`line ${n}: ${row.message}`);
  return row;
}

const keyOf = (p: PushRow) => [p.repository.id, p.ref, p.before, p.head];
const PUBLIC: typeof NO_TARGETS = { ...NO_TARGETS, publicPushes: true };

describe('timeline-format lines (2011–2014)', () => {
  it('maps a push: login-only actor, owner/name, UTC time, the abbreviated before, shas as commits', () => {
    expect(pushOf(1)).toEqual({
      id: null,
      actor: { id: null, login: 'lastr2d2' },
      repository: { id: '14517966', fullName: 'lastr2d2/scripts-doubanfm' },
      pushId: null,
      ref: 'refs/heads/master',
      head: 'afa9b3ac304d6ab92fd7689d1604f240b8f4ae38',
      before: 'ba4d721b3d',
      // 2014-01-01T01:01:58-08:00
      createdAt: new Date('2014-01-01T09:01:58.000Z'),
      payload: {
        size: 1,
        ref: 'refs/heads/master',
        head: 'afa9b3ac304d6ab92fd7689d1604f240b8f4ae38',
        commits: [
          {
            sha: 'afa9b3ac304d6ab92fd7689d1604f240b8f4ae38',
            author: { email: 'lastr2d2@gmail.com', name: 'Wayne Wang' },
            message: 'updated minifized version',
            distinct: true,
          },
        ],
      },
      size: 1,
      distinctSize: null,
      org: null,
      timeline: true,
    });
  });

  it('keeps the organization the repository names (login only), and each commit in order with its distinct', () => {
    const p = pushOf(2);
    expect(p.org).toEqual({ id: null, login: 'symfony' });
    expect(p.repository.fullName).toBe('symfony/HttpKernel');
    expect(p.actor).toEqual({ id: null, login: 'fabpot' });
    const commits = p.payload.commits as { sha: string; distinct: boolean }[];
    expect(commits.map((c) => [c.sha, c.distinct])).toEqual([
      ['f004cbf250265d4d2c6a0d1e2534ab57fc2e850e', false],
      ['a046d757fa9432f6c4f22218939c0ba5ebe6097d', true],
    ]);
    expect(p.createdAt.toISOString()).toBe('2014-01-01T09:01:56.000Z');
  });

  it('normalises a -07:00 time to UTC', () => {
    expect(pushOf(8).createdAt.toISOString()).toBe('2013-10-10T07:23:12.000Z');
  });

  it('gives the same push read twice the same natural key', () => {
    expect(keyOf(pushOf(9))).toEqual(keyOf(pushOf(8)));
    expect(keyOf(pushOf(8))).toEqual([
      '13459894',
      'refs/heads/master',
      '5a26694ed1',
      '24c157619ea7b1bb15ee83a310dd111f8b123676',
    ]);
    // Different lines, different keys.
    const keys = new Set([1, 2, 4, 5, 7, 8].map((n) => keyOf(pushOf(n)).join(' ')));
    expect(keys.size).toBe(6);
  });

  it('sets aside a push without a repository, and counts other events without an id as events', () => {
    const v = verdictOf(6);
    if (v.kind !== 'push') throw new Error('expected a push line');
    expect(mapArchivePush(v.event, v.text, 6)).toEqual({
      rejected: 'malformed',
      message: 'line 6: repository is missing',
      eventId: null,
    });
    expect(verdictOf(3)).toEqual({ kind: 'other' });
    // No "id" anywhere in the line (a CreateEvent of a deleted repository).
    expect(LINES[9]).not.toContain('"id"');
    expect(verdictOf(10)).toEqual({ kind: 'other' });
  });

  it('still refuses a modern line that lost its id', () => {
    const modern = JSON.parse(LINES[0]!) as Record<string, unknown>;
    const broken = {
      type: 'PushEvent',
      actor: { id: 1, login: 'a' },
      repo: { id: 2, name: 'a/b' },
    };
    expect(isTimelineLine(modern)).toBe(true);
    expect(isTimelineLine(broken)).toBe(false);
    const text = JSON.stringify({ ...broken, payload: {}, created_at: '2014-01-01T00:00:00Z' });
    const v = classifyLine(Buffer.from(text));
    if (v.kind !== 'push') throw new Error('expected a push line');
    expect(mapArchivePush(v.event, v.text, 1)).toMatchObject({
      rejected: 'malformed',
      message: 'line 1: id is missing',
    });
  });

  it('reads the key’s before from the compare URL only', () => {
    expect(timelineBefore('https://github.com/o/r/compare/ba4d721b3d...afa9b3ac30')).toBe(
      'ba4d721b3d',
    );
    expect(timelineBefore('https://github.com/o/r/compare/BA4D721B3D...afa9b3ac30')).toBe(
      'ba4d721b3d',
    );
    expect(timelineBefore('https://github.com/o/r/compare/master...feature')).toBe('');
    expect(timelineBefore('https://github.com/o/r/commit/afa9b3ac30')).toBe('');
    expect(timelineBefore(undefined)).toBe('');
    expect(isFullSha('ba4d721b3d')).toBe(false);
    expect(isFullSha('')).toBe(false);
    expect(isFullSha('0'.repeat(40))).toBe(true);
    expect(isFullSha('a'.repeat(64))).toBe(true);
  });

  it('plans commits from the line alone: complete when every commit is listed, else partial, never due', () => {
    for (const targets of [NO_TARGETS, PUBLIC, { ...PUBLIC, credential: false }]) {
      for (const source of ['archive', 'mirror'] as const) {
        const one = planCommits(pushOf(1), targets, source);
        expect(one).toMatchObject({ state: 'complete', count: 1, due: false });
        expect(one.commits).toHaveLength(1);
        // size 446, the oldest 20 listed
        const capped = planCommits(pushOf(5), targets, source);
        expect(capped).toMatchObject({ state: 'partial', count: 446, due: false });
        expect(capped.commits).toHaveLength(20);
        expect(planCommits(pushOf(4), targets, source)).toMatchObject({
          state: 'complete',
          count: 0,
          due: false,
        });
      }
    }
  });

  it('scopes a timeline line by its actor, repository and organization', () => {
    const event = (n: number) => JSON.parse(LINES[n - 1]!) as Record<string, unknown>;
    expect(scopeOf({ kind: 'user', target: 'FabPot' })(event(2))).toBe(true);
    expect(scopeOf({ kind: 'user', target: 'fabpot' })(event(1))).toBe(false);
    expect(scopeOf({ kind: 'repo', target: 'symfony/httpkernel' })(event(2))).toBe(true);
    expect(scopeOf({ kind: 'repo', target: 'x/y' }, 1398651)(event(2))).toBe(true);
    expect(scopeOf({ kind: 'org', target: 'symfony' })(event(2))).toBe(true);
    expect(scopeOf({ kind: 'org', target: 'mozilla' })(event(4))).toBe(true);
    expect(scopeOf({ kind: 'org', target: 'mozilla' })(event(1))).toBe(false);
  });
});
