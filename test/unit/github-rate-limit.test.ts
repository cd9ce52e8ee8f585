import { describe, expect, it } from 'vitest';
import { allowanceFor } from '../../src/budget/window.ts';
import { parseRateLimit, rateLimitRetryAt } from '../../src/github/answer-headers.ts';
import { credentialOf, defaultQuota } from '../../src/platform/config/credential-label.ts';

const now = new Date('2026-11-29T09:00:00Z');
const resetEpoch = String(Date.parse('2026-11-29T09:20:00Z') / 1000);
const headers = (remaining: string, extra: Record<string, string> = {}) => ({
  'x-ratelimit-limit': '60',
  'x-ratelimit-remaining': remaining,
  'x-ratelimit-reset': resetEpoch,
  ...extra,
});

describe('parseRateLimit', () => {
  it('is no observation when a value is nothing an integer column holds', () => {
    const reset = String(Math.floor(Date.now() / 1000) + 600);
    for (const [limit, remaining] of [
      ['5000', '1.5'],
      ['5000', '1e10'],
      ['5000', '-1'],
      ['50.5', '10'],
      ['3000000000', '10'],
    ]) {
      expect(
        parseRateLimit({
          'x-ratelimit-limit': limit,
          'x-ratelimit-remaining': remaining,
          'x-ratelimit-reset': reset,
        }),
        `${limit}/${remaining}`,
      ).toBeNull();
    }
    expect(
      parseRateLimit({
        'x-ratelimit-limit': '5000',
        'x-ratelimit-remaining': '1',
        'x-ratelimit-reset': '1.5',
      }),
    ).toBeNull();
  });

  it('reads x-ratelimit-* and refuses partial or non-numeric sets', () => {
    expect(parseRateLimit(headers('12'))).toEqual({
      limit: 60,
      remaining: 12,
      resetAt: new Date('2026-11-29T09:20:00Z'),
    });
    expect(parseRateLimit({ 'x-ratelimit-limit': '60' })).toBeNull();
    expect(parseRateLimit(headers('many'))).toBeNull();
  });
});

describe('rateLimitRetryAt', () => {
  it('honours retry-after first', () => {
    expect(rateLimitRetryAt(429, headers('5', { 'retry-after': '30' }), '', now)).toEqual(
      new Date('2026-11-29T09:00:30Z'),
    );
  });

  it('waits for the reset when remaining is 0', () => {
    expect(rateLimitRetryAt(403, headers('0'), 'API rate limit exceeded', now)).toEqual(
      new Date('2026-11-29T09:20:00Z'),
    );
  });

  it('backs off at least a minute for a secondary limit that names no time', () => {
    expect(rateLimitRetryAt(403, {}, 'You have exceeded a secondary rate limit', now)).toEqual(
      new Date('2026-11-29T09:01:00Z'),
    );
    expect(rateLimitRetryAt(429, {}, '', now)).toEqual(new Date('2026-11-29T09:01:00Z'));
  });

  it('a 403 that is about the resource is not a rate limit; nor is any other status', () => {
    expect(rateLimitRetryAt(403, headers('40'), 'Repository access blocked', now)).toBeNull();
    expect(rateLimitRetryAt(404, headers('0'), '', now)).toBeNull();
  });
});

describe('credentials and quotas', () => {
  it('names a token by a fingerprint, never by itself', () => {
    const c = credentialOf('live', 'ghp_secret');
    expect(c).toMatch(/^token:[0-9a-f]{8}$/);
    expect(c).not.toContain('secret');
    expect(credentialOf('live', 'ghp_other')).not.toBe(c);
    expect(credentialOf('live', undefined)).toBe('anonymous');
    expect(credentialOf('fixture', 'ghp_secret')).toBe('fixture');
    expect(defaultQuota(c)).toBe(5000);
    expect(defaultQuota('anonymous')).toBe(60);
  });

  it('splits the quota: enrichment floor(quota × share), polls the rest', () => {
    expect(allowanceFor(60, 2 / 3)).toEqual({ enrich: 40, poll: 20 });
    expect(allowanceFor(60, 0.5)).toEqual({ enrich: 30, poll: 30 });
  });
});
