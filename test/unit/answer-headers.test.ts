import { describe, expect, it } from 'vitest';
import {
  headerNotes,
  parseRateLimit,
  pollIntervalOf,
  rateLimitResetOf,
  rateLimitRetryAt,
  retryAfterOf,
} from '../../src/github/answer-headers.ts';
import { untilText } from '../../src/platform/time-text.ts';
import { describeDeferral } from '../../src/poll/deferral.ts';
import { nextPoll } from '../../src/status/format.ts';

/** Clamped headers (ADR 0121): what the red team sent, and what we now use. */

const now = new Date('2026-12-01T20:00:00Z');
const hourLater = new Date('2026-12-01T21:00:00Z');

describe('X-Poll-Interval: digits only, 1 s – 1 h', () => {
  it.each([
    ['60', 60, null],
    ['3600', 3600, null],
    ['1000000000', 3600, '3600 s'],
    ['0', 1, '1 s'],
    ['0.5', null, 'ignored'],
    ['1e10', null, 'ignored'],
    ['Infinity', null, 'ignored'],
    ['-5', null, 'ignored'],
    ['', null, 'ignored'],
    ['99999999999999999999999999', 3600, '3600 s'],
  ])('%j → %s', (sent, seconds, used) => {
    const r = pollIntervalOf({ 'x-poll-interval': sent });
    expect(r.seconds).toBe(seconds);
    expect(r.note?.used ?? null).toBe(used);
    if (r.note) expect(r.note.sent).toBe(JSON.stringify(sent));
  });

  it('absent: nothing to say', () => {
    expect(pollIntervalOf({})).toEqual({ seconds: null, note: null });
  });
});

describe('retry-after and x-ratelimit-reset: at most an hour ahead', () => {
  it('retry-after: 999999999 on a 403 blocks for an hour, not until 2058', () => {
    expect(retryAfterOf({ 'retry-after': '999999999' }, now)).toEqual({
      seconds: 3600,
      note: { header: 'retry-after', sent: '"999999999"', used: '3600 s' },
    });
    expect(rateLimitRetryAt(403, { 'retry-after': '999999999' }, '', now)).toEqual(hourLater);
    expect(rateLimitRetryAt(429, { 'retry-after': '30' }, '', now)).toEqual(
      new Date('2026-12-01T20:00:30Z'),
    );
  });

  it('retry-after as an HTTP date is read, and clamped too', () => {
    expect(retryAfterOf({ 'retry-after': 'Tue, 01 Dec 2026 20:10:00 GMT' }, now).seconds).toBe(600);
    expect(retryAfterOf({ 'retry-after': 'Wed, 01 Dec 2100 20:10:00 GMT' }, now).seconds).toBe(
      3600,
    );
    // Not digits and not a date: ignored (the minute's backoff applies).
    expect(retryAfterOf({ 'retry-after': '-5' }, now).seconds).toBeNull();
    expect(rateLimitRetryAt(429, { 'retry-after': '1.5' }, '', now)).toEqual(
      new Date('2026-12-01T20:01:00Z'),
    );
  });

  it('x-ratelimit-reset: 9999999999 (the year 2286) is an hour from now', () => {
    const headers = {
      'x-ratelimit-limit': '5000',
      'x-ratelimit-remaining': '0',
      'x-ratelimit-reset': '9999999999',
    };
    expect(rateLimitResetOf(headers, now).at).toEqual(hourLater);
    expect(parseRateLimit(headers, now)).toEqual({ limit: 5000, remaining: 0, resetAt: hourLater });
    expect(rateLimitRetryAt(403, headers, 'API rate limit exceeded', now)).toEqual(hourLater);
    expect(headerNotes(headers, now)).toEqual([
      { header: 'x-ratelimit-reset', sent: '"9999999999"', used: hourLater.toISOString() },
    ]);
    // Within the hour: GitHub's word.
    const soon = String(Date.parse('2026-12-01T20:20:00Z') / 1000);
    expect(parseRateLimit({ ...headers, 'x-ratelimit-reset': soon }, now)?.resetAt).toEqual(
      new Date('2026-12-01T20:20:00Z'),
    );
  });
});

describe('a deferral or block longer than a day says its date', () => {
  it('later today: the time; tomorrow or later: the date too', () => {
    expect(untilText(new Date('2026-12-01T20:35:00Z'), now)).toBe('20:35 UTC');
    expect(untilText(new Date('2026-12-02T00:35:00Z'), now)).toBe('2026-12-02 00:35 UTC');
    expect(untilText(new Date('2058-09-21T20:35:00Z'), now)).toBe('2058-09-21 20:35 UTC');
  });

  it('the deferral line and the next-poll column', () => {
    const d = {
      retryAt: new Date('2058-09-21T20:35:00Z'),
      reason: 'blocked' as const,
      blockReason: 'rate_limit' as const,
      authError: null,
    };
    expect(describeDeferral(d, now)).toBe('rate limited by GitHub until 2058-09-21 20:35 UTC');
    expect(describeDeferral({ ...d, retryAt: new Date('2026-12-01T20:35:00Z') }, now)).toBe(
      'rate limited by GitHub until 20:35 UTC',
    );
    expect(nextPoll(new Date('2026-12-03T08:00:00Z'), now)).toBe('in 1d12h (2026-12-03 08:00 UTC)');
    expect(nextPoll(new Date('2026-12-01T21:00:00Z'), now)).toBe('in 1h');
  });
});
