import { describe, expect, it } from 'vitest';
import {
  GitHubAuthFailed,
  GitHubRequestFailed,
  GitHubUnavailable,
  MalformedResponse,
  RateLimited,
} from '../../src/github/errors.ts';
import {
  bodyRateLimit,
  graphqlRateLimit,
  graphqlReader,
  MAX_ERRORS,
} from '../../src/github/graphql-answer.ts';
import type { RawResponse } from '../../src/github/transport.ts';

/**
 * A GraphQL answer is outside text (ADR 0114): everything kept from it is bounded, a body that
 * is not GitHub's shape is MalformedResponse, and a rate limit said in a 200 is a rate limit.
 */

const now = new Date('2026-12-02T01:00:00Z');
const reset = Math.floor(now.getTime() / 1000) + 1800;
const reader = graphqlReader<Record<string, unknown>>({
  path: '/graphql',
  id: 7,
  credential: 'token:abcd1234',
  estimate: 9,
  now: () => now,
});

function answer(status: number, body: unknown, headers: Record<string, string> = {}): RawResponse {
  return {
    status,
    headers,
    body: typeof body === 'string' ? body : JSON.stringify(body),
    url: 'https://api.github.com/graphql',
  };
}

const graphqlHeaders = {
  'x-ratelimit-limit': '5000',
  'x-ratelimit-remaining': '4990',
  'x-ratelimit-reset': String(reset),
  'x-ratelimit-resource': 'graphql',
};

describe('a GraphQL answer', () => {
  it('keeps data, errors and the cost; settles at the cost, else the estimate', () => {
    const a = reader.classify(
      answer(200, {
        data: { rateLimit: { cost: 3 }, r0: null },
        errors: [{ type: 'NOT_FOUND', path: ['r0'], message: 'gone', extra: 'x' }],
      }),
    );
    expect(a).toEqual({
      data: { rateLimit: { cost: 3 }, r0: null },
      errors: [{ type: 'NOT_FOUND', path: ['r0'], message: 'gone' }],
      cost: 3,
      rateLimit: null,
      credential: 'token:abcd1234',
      requestId: 7,
    });
    expect(reader.points!(a, null)).toBe(3);
    expect(reader.points!(undefined, null)).toBe(9);
    const noCost = reader.classify(answer(200, { data: { viewer: {} } }));
    expect(noCost.cost).toBeNull();
    expect(reader.points!(noCost, null)).toBe(9);
  });

  it('bounds what it keeps: errors, messages, types, paths, and a cost that is not a count', () => {
    const many = Array.from({ length: MAX_ERRORS + 50 }, () => ({
      type: 'T'.repeat(500),
      message: 'm'.repeat(5000),
      path: ['a', 1.5, { x: 1 }, 2],
    }));
    const a = reader.classify(answer(200, { data: { rateLimit: { cost: 1e12 } }, errors: many }));
    expect(a.errors).toHaveLength(MAX_ERRORS);
    expect(a.errors[0]!.message).toHaveLength(1000);
    expect(a.errors[0]!.type).toHaveLength(100);
    expect(a.errors[0]!.path).toEqual(['a', 2]);
    expect(a.cost).toBeNull();
    for (const cost of [-1, 1.5, '3', null]) {
      expect(reader.classify(answer(200, { data: { rateLimit: { cost } } })).cost).toBeNull();
    }
  });

  it('is MalformedResponse when it is not GitHub’s shape', () => {
    for (const body of ['', 'not json', '[1]', '"x"', '{}', '{"data": 3}', '{"errors": {}}']) {
      expect(() => reader.classify(answer(200, body)), body).toThrow(MalformedResponse);
    }
    expect(() => reader.classify(answer(200, { data: null, errors: ['x'] }))).toThrow(
      MalformedResponse,
    );
  });

  it('a 200 of type RATE_LIMIT or RATE_LIMITED is a rate limit until the reset', () => {
    for (const type of ['RATE_LIMIT', 'RATE_LIMITED']) {
      const raw = answer(
        200,
        { errors: [{ type, message: 'API rate limit exceeded' }] },
        {
          ...graphqlHeaders,
          'x-ratelimit-remaining': '0',
        },
      );
      const err = (() => {
        try {
          reader.classify(raw);
        } catch (e) {
          return e;
        }
      })() as RateLimited;
      expect(err).toBeInstanceOf(RateLimited);
      expect(err.retryAt.getTime()).toBe(reset * 1000);
    }
    // No reset known: at least a minute.
    const bare = answer(200, { errors: [{ type: 'RATE_LIMIT', message: 'x' }] });
    expect(() => reader.classify(bare)).toThrow(RateLimited);
  });

  it('reads statuses as REST does', () => {
    expect(() => reader.classify(answer(401, { message: 'Bad credentials' }))).toThrow(
      GitHubAuthFailed,
    );
    expect(() => reader.classify(answer(502, { data: null, errors: [] }))).toThrow(
      GitHubUnavailable,
    );
    expect(() =>
      reader.classify(answer(403, { message: 'You have exceeded a secondary rate limit' })),
    ).toThrow(RateLimited);
    expect(() => reader.classify(answer(400, { message: 'Problems parsing JSON' }))).toThrow(
      GitHubRequestFailed,
    );
  });

  it('reads the window from graphql headers, else from the query’s rateLimit, within the hour', () => {
    const body = {
      data: {
        rateLimit: {
          limit: 12_500,
          remaining: 12_000,
          resetAt: new Date(reset * 1000).toISOString(),
        },
      },
    };
    expect(graphqlRateLimit(answer(200, body, graphqlHeaders), now)).toEqual({
      limit: 5000,
      remaining: 4990,
      resetAt: new Date(reset * 1000),
    });
    // Headers of another resource (a proxy's, REST's) are not GraphQL's window.
    const core = { ...graphqlHeaders, 'x-ratelimit-resource': 'core' };
    expect(graphqlRateLimit(answer(200, body, core), now)).toEqual({
      limit: 12_500,
      remaining: 12_000,
      resetAt: new Date(reset * 1000),
    });
    const far = { rateLimit: { limit: 5000, remaining: 1, resetAt: '2286-01-01T00:00:00Z' } };
    expect(bodyRateLimit(far, now)).toBeNull();
    expect(bodyRateLimit({ rateLimit: { limit: -1, remaining: 1, resetAt: 'x' } }, now)).toBeNull();
    expect(graphqlRateLimit(answer(200, 'not json', core), now)).toBeNull();
  });
});
