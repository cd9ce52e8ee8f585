import { describe, expect, it } from 'vitest';
import { classifyLine, fastMapPush, mapArchivePush, scopeOf } from '../../src/backfill/events.ts';
import { OVERSIZE } from '../../src/backfill/lines.ts';
import { parseJson } from '../../src/platform/json/exact.ts';
import { mapPushEvent } from '../../src/store/mapping.ts';
import { idField, Rejection } from '../../src/store/rules.ts';
import { otherEvent, pushEvent } from '../support/github-factories.ts';

const line = (v: unknown) => Buffer.from(typeof v === 'string' ? v : JSON.stringify(v));

/**
 * What the rules make of an archive line: the row, or the reason it is rejected. As the
 * poll path's, except that `"id": null` is a push known only by webhook (ADR 0130).
 */
function slow(e: Record<string, unknown>) {
  try {
    return { row: mapPushEvent(e, e.id === null ? null : idField(e.id, 'id')).push };
  } catch (err) {
    if (!(err instanceof Rejection)) throw err;
    return { rejected: err.reason };
  }
}

/** A deterministic stream of numbers in [0, 1). */
function rng(seed: number) {
  let x = seed;
  return () => {
    x = (x * 1_103_515_245 + 12_345) % 2_147_483_648;
    return x / 2_147_483_648;
  };
}

const ODD_VALUES: unknown[] = [
  undefined,
  null,
  '',
  '0',
  '007',
  -1,
  1.5,
  2 ** 53,
  '12345678901234567',
  'abc',
  true,
  [],
  {},
  '2026-11-20T10:00:00.123Z',
  '2026-11-20T10:00:00+02:00',
  '2026-02-30T10:00:00Z',
  '2026-11-20T24:00:00Z',
  '1969-12-31T23:59:59Z',
  'a\u0000b',
  'lone \ud800 surrogate',
  'x'.repeat(1025),
  2 ** 31,
  '99999999999999999999',
  'owner/name',
  'no-slash',
  'a b/c',
  42,
  '42',
];

const PATHS = [
  ['id'],
  ['created_at'],
  ['actor'],
  ['actor', 'id'],
  ['actor', 'login'],
  ['repo'],
  ['repo', 'id'],
  ['repo', 'name'],
  ['payload'],
  ['payload', 'ref'],
  ['payload', 'head'],
  ['payload', 'before'],
  ['payload', 'push_id'],
  ['payload', 'size'],
  ['payload', 'distinct_size'],
  ['payload', 'commits'],
  ['payload', 'message'],
];

function mutate(e: Record<string, unknown>, random: () => number): Record<string, unknown> {
  const copy = structuredClone(e);
  const path = PATHS[Math.floor(random() * PATHS.length)]!;
  const value = ODD_VALUES[Math.floor(random() * ODD_VALUES.length)];
  let target = copy as Record<string, unknown>;
  for (const key of path.slice(0, -1)) {
    if (target[key] === null || typeof target[key] !== 'object') return copy;
    target = target[key] as Record<string, unknown>;
  }
  if (value === undefined) delete target[path.at(-1)!];
  else target[path.at(-1)!] = value;
  return copy;
}

describe('the archive fast path', () => {
  it('maps exactly what mapPushEvent maps, to the same row, or defers to it', () => {
    const random = rng(7);
    let fast = 0;
    for (let i = 0; i < 3000; i++) {
      const base = pushEvent({
        payload: i % 3 === 0 ? { size: 2, distinct_size: 1, commits: [{ sha: 'x' }] } : {},
        org: i % 4 === 0 ? { id: 9, login: 'org-9' } : null,
      }) as unknown as Record<string, unknown>;
      const e = i % 10 === 0 ? base : mutate(mutate(base, random), random);
      const text = JSON.stringify(e);
      // The rules' verdict on the line as text, parsed exactly (as the poll path parses).
      const expected = slow(parseJson(text) as Record<string, unknown>);
      const got = fastMapPush(e, text);
      if (got !== null) {
        fast++;
        expect(expected.row, text).toEqual(got);
      }
      const mapped = mapArchivePush(e, text, i);
      if ('rejected' in mapped) expect(mapped.rejected, text).toBe(expected.rejected);
      else expect(mapped, text).toEqual(expected.row);
    }
    // Most events take the fast path (unmutated ones always do).
    expect(fast).toBeGreaterThan(300);
  });

  it('takes the fast path for the shape GH Archive writes', () => {
    const e = pushEvent() as unknown as Record<string, unknown>;
    expect(fastMapPush(e, JSON.stringify(e))).not.toBeNull();
  });

  it('leaves what Postgres cannot hold to the rules: a key is refused, free text sanitised', () => {
    const inRef = pushEvent({ payload: { ref: 'refs/heads/a\u0000' } }) as unknown as Record<
      string,
      unknown
    >;
    const text = JSON.stringify(inRef);
    expect(fastMapPush(inRef, text)).toBeNull();
    expect(mapArchivePush(inRef, text, 3)).toEqual({
      rejected: 'invalid_text',
      message: expect.stringMatching(/^line 3: payload\.ref contains a NUL/),
      eventId: inRef.id,
    });
    const inText = pushEvent({ payload: { note: 'lone \ud800' } }) as unknown as Record<
      string,
      unknown
    >;
    const stored = mapArchivePush(inText, JSON.stringify(inText), 4);
    expect(stored).toMatchObject({ payload: { note: 'lone \ufffd' } });
  });

  it('keeps every digit of an id beyond 2^53 (the line is parsed exactly)', () => {
    const text = JSON.stringify(pushEvent()).replace(
      /"actor":\{"id":\d+/,
      '"actor":{"id":9007199254740993',
    );
    const verdict = classifyLine(line(text));
    expect(verdict.kind).toBe('push');
    if (verdict.kind !== 'push') return;
    expect(mapArchivePush(verdict.event, verdict.text, 1)).toMatchObject({
      actor: { id: '9007199254740993' },
    });
  });

  it('keeps every digit of a payload integer beyond 2^53 (the payload is stored whole)', () => {
    const text = JSON.stringify(pushEvent()).replace(
      /"repository_id":\d+/,
      '"repository_id":9007199254740993',
    );
    const verdict = classifyLine(line(text));
    if (verdict.kind !== 'push') throw new Error('not a push');
    expect(fastMapPush(verdict.event, verdict.text)).toBeNull();
    const row = mapArchivePush(verdict.event, verdict.text, 1);
    if ('rejected' in row) throw new Error(row.message);
    expect(JSON.stringify(row.payload)).toContain('"repository_id":9007199254740993');
  });
});

describe('classifying archive lines', () => {
  it('parses only lines that may hold a PushEvent', () => {
    const push = pushEvent();
    expect(classifyLine(line(push))).toMatchObject({ kind: 'push', event: { id: push.id } });
    expect(classifyLine(line(otherEvent('WatchEvent')))).toEqual({ kind: 'other' });
    // "PushEvent" in a description is not a PushEvent.
    const mention = otherEvent('CreateEvent', { payload: { description: 'PushEvent' } });
    expect(classifyLine(line(mention))).toEqual({ kind: 'other' });
    expect(classifyLine(line(`  ${JSON.stringify(push)}\r`))).toMatchObject({ kind: 'push' });
  });

  it('calls garbage, truncated and oversize lines malformed, and blank lines blank', () => {
    expect(classifyLine(line(''))).toEqual({ kind: 'blank' });
    expect(classifyLine(line('   '))).toEqual({ kind: 'blank' });
    expect(classifyLine(line('hello'))).toMatchObject({
      kind: 'malformed',
      reason: 'malformed',
      raw: 'hello',
    });
    expect(classifyLine(line('{"id":"1","type":"PushEvent","actor":'))).toMatchObject({
      kind: 'malformed',
      reason: 'malformed',
    });
    expect(classifyLine(line('{"type":"PushEvent",}'))).toMatchObject({
      kind: 'malformed',
      reason: 'malformed',
      detail: expect.stringMatching(/^invalid JSON/),
    });
    expect(classifyLine(OVERSIZE)).toMatchObject({ kind: 'malformed', reason: 'too_long' });
  });
});

describe('source scopes', () => {
  const e = (o: Parameters<typeof pushEvent>[0]) =>
    pushEvent(o) as unknown as Record<string, unknown>;

  it('public keeps everything', () => {
    expect(scopeOf({ kind: 'public', target: null })(e({}))).toBe(true);
  });

  it('repo keeps that repository by name (any case) or by the id we hold for it', () => {
    const test = scopeOf({ kind: 'repo', target: 'Octo/Hello' }, 77);
    expect(test(e({ repo: { id: 1, name: 'octo/hello' } }))).toBe(true);
    expect(test(e({ repo: { id: 77, name: 'octo/old-name' } }))).toBe(true);
    expect(test(e({ repo: { id: 2, name: 'octo/other' } }))).toBe(false);
  });

  it('org keeps events of its repositories or carrying it as org', () => {
    const test = scopeOf({ kind: 'org', target: 'GitHub' });
    expect(test(e({ repo: { id: 1, name: 'github/docs' } }))).toBe(true);
    expect(test(e({ repo: { id: 1, name: 'someone/x' }, org: { id: 1, login: 'github' } }))).toBe(
      true,
    );
    expect(test(e({ repo: { id: 1, name: 'githubber/x' } }))).toBe(false);
  });

  it('user keeps what the user did', () => {
    const test = scopeOf({ kind: 'user', target: 'torvalds' });
    expect(test(e({ actor: { id: 1, login: 'Torvalds' } }))).toBe(true);
    expect(
      test(e({ actor: { id: 2, login: 'gregkh' }, repo: { id: 3, name: 'torvalds/linux' } })),
    ).toBe(false);
  });
});
