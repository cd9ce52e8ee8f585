import { describe, expect, it } from 'vitest';
import {
  BudgetExhausted,
  GateTimeout,
  GitHubAuthFailed,
  GitHubUnavailable,
  RateLimited,
} from '../../src/github/errors.ts';
import { ladderSeconds } from '../../src/platform/attempts.ts';
import { classifyFailure } from '../../src/poll/failures.ts';
import { mergeRecentIds, RECENT_IDS_KEPT } from '../../src/poll/horizon.ts';
import { notDueReason } from '../../src/poll/schedule.ts';
import { MalformedEvent } from '../../src/store/mapping.ts';

const now = new Date('2026-11-29T08:00:00Z');
const later = (s: number) => new Date(now.getTime() + s * 1000);
const failureBackoffSeconds = (n: number) => ladderSeconds('poll', n);

describe('failure ladder', () => {
  it('doubles from one minute and caps at one hour', () => {
    expect([1, 2, 3, 4, 5, 6, 7, 20].map(failureBackoffSeconds)).toEqual([
      60, 120, 240, 480, 960, 1920, 3600, 3600,
    ]);
  });

  it('climbs for source failures', () => {
    const d = classifyFailure(
      new GitHubUnavailable('/events', 502, 'bad gateway'),
      { consecutive_failures: 2, next_poll_at: now, last_error: null },
      now,
    );
    expect(d).toMatchObject({
      countsAsFailure: true,
      consecutiveFailures: 3,
      code: 'GITHUB_UNAVAILABLE',
    });
    expect(d.nextPollAt).toEqual(later(240));
    expect(d.error).toMatch(/^GITHUB_UNAVAILABLE: GitHub unavailable on \/events/);
  });

  it('treats a malformed feed as a source failure', () => {
    const d = classifyFailure(
      new MalformedEvent('/events', 'event #0: actor is missing'),
      { consecutive_failures: 0, next_poll_at: now, last_error: null },
      now,
    );
    expect(d).toMatchObject({
      countsAsFailure: true,
      consecutiveFailures: 1,
      code: 'MALFORMED_EVENT',
    });
    expect(d.nextPollAt).toEqual(later(60));
  });

  it('waits for a rejected token on the auth ladder, not the full hour at once', () => {
    const d = classifyFailure(
      new GitHubAuthFailed('/events', { until: later(300), failures: 2 }),
      { consecutive_failures: 0, next_poll_at: now, last_error: null },
      now,
    );
    expect(d).toMatchObject({ code: 'GITHUB_AUTH_FAILED', countsAsFailure: true });
    expect(d.nextPollAt).toEqual(later(300));
    expect(d.lastError).toMatch(/^GITHUB_AUTH_FAILED: GitHub rejected the credentials \(401\)/);
  });

  it('keeps the real cause in last_error when the budget or the gate says no', () => {
    const source = {
      consecutive_failures: 1,
      next_poll_at: now,
      last_error: 'GITHUB_UNAVAILABLE: GitHub unavailable on /events: HTTP 502',
    };
    expect(classifyFailure(new BudgetExhausted('poll', later(900)), source, now).lastError).toBe(
      source.last_error,
    );
    expect(classifyFailure(new GateTimeout('anonymous', 10_000), source, now).lastError).toBe(
      source.last_error,
    );
    // A credential blocked by a 401 is still an auth failure for the source.
    const blocked = classifyFailure(
      new BudgetExhausted('poll', later(60), 'blocked', 'auth'),
      source,
      now,
    );
    expect(blocked).toMatchObject({ code: 'GITHUB_AUTH_FAILED', countsAsFailure: false });
    expect(blocked.lastError).toMatch(/^GITHUB_AUTH_FAILED: /);
    expect(blocked.nextPollAt).toEqual(later(60));
  });

  it('waits for retryAt on a rate limit without counting a failure', () => {
    const retryAt = later(1234);
    const d = classifyFailure(
      new RateLimited(403, retryAt, '/events'),
      { consecutive_failures: 2, next_poll_at: now, last_error: null },
      now,
    );
    expect(d).toMatchObject({
      countsAsFailure: false,
      consecutiveFailures: 2,
      nextPollAt: retryAt,
    });
  });

  it('waits for the budget without counting a failure', () => {
    const d = classifyFailure(
      new BudgetExhausted('poll', later(900)),
      { consecutive_failures: 0, next_poll_at: now, last_error: null },
      now,
    );
    expect(d).toMatchObject({
      countsAsFailure: false,
      consecutiveFailures: 0,
      nextPollAt: later(900),
    });
    const unknown = classifyFailure(
      new BudgetExhausted('poll', null),
      { consecutive_failures: 0, next_poll_at: now, last_error: null },
      now,
    );
    expect(unknown.nextPollAt).toEqual(later(60));
  });

  it('leaves the schedule alone on a gate timeout (nothing was sent)', () => {
    const d = classifyFailure(
      new GateTimeout('anonymous', 10_000),
      { consecutive_failures: 1, next_poll_at: later(-5), last_error: null },
      now,
    );
    expect(d).toMatchObject({ countsAsFailure: false, consecutiveFailures: 1, nextPollAt: now });
  });
});

describe('due', () => {
  const source = { enabled: true, mode: 'live' as const, next_poll_at: later(30) };
  it('is due when enabled, of this mode, and next_poll_at has arrived', () => {
    expect(notDueReason({ ...source, next_poll_at: now }, 'live', now, false)).toBeNull();
    expect(notDueReason(source, 'live', now, false)).toMatch(/not due until/);
  });
  it('--force ignores next_poll_at but never enabled or mode', () => {
    expect(notDueReason(source, 'live', now, true)).toBeNull();
    expect(notDueReason({ ...source, enabled: false }, 'live', now, true)).toBe('disabled');
    expect(notDueReason(source, 'fixture', now, true)).toMatch(/live source/);
  });
});

describe('recent event ids', () => {
  const untimed = (ids: string[]) => ({ ids, at: [] });
  it('keeps this run first, deduplicated, at most 300', () => {
    expect(mergeRecentIds(untimed(['9', '8', '5']), untimed(['5', '4', '3'])).ids).toEqual([
      '9',
      '8',
      '5',
      '4',
      '3',
    ]);
    const many = Array.from({ length: 400 }, (_, i) => String(1000 - i));
    const merged = mergeRecentIds(untimed(many.slice(0, 200)), untimed(many.slice(150)));
    expect(merged.ids).toHaveLength(RECENT_IDS_KEPT);
    expect(merged.at).toHaveLength(RECENT_IDS_KEPT);
    expect(merged.ids[0]).toBe('1000');
  });

  it('keeps an id once per era, with the time of each (ids repeat across eras: ADR 0122)', () => {
    const now = new Date('2026-11-29T08:00:00Z');
    const y2019 = new Date('2019-06-01T12:00:00Z');
    const merged = mergeRecentIds(
      { ids: ['777000', '5'], at: [now, now] },
      { ids: ['777000', '5', '4'], at: [y2019, null, now] },
    );
    // 777000 of 2019 is another event than 777000 of 2026; 5 without a time is the same 5.
    expect(merged.ids).toEqual(['777000', '5', '777000', '4']);
    expect(merged.at).toEqual([now, now, y2019, now]);
  });
});
