import { parseJson } from '../platform/json/exact.ts';
import {
  MAX_WAIT_SECONDS,
  MIN_BACKOFF_MS,
  parseRateLimit,
  type RateLimitState,
  RESET_SKEW_SECONDS,
} from './answer-headers.ts';
import { type AnswerReader, statusError } from './classify.ts';
import { MalformedResponse, RateLimited } from './errors.ts';
import type { RawResponse } from './transport.ts';

/**
 * Reading a GraphQL answer (ADR 0114). GitHub answers 200 for most failures of a query, with
 * `errors` beside (or instead of) `data`; everything in the body is bounded before it is kept:
 * - a 200 whose errors say RATE_LIMITED (RATE_LIMIT since 2025) is a rate limit of the
 *   credential's #graphql key, thrown like a 403: that key waits for its reset;
 * - any other 200 is returned, partial data kept (RESOURCE_LIMITS_EXCEEDED, NOT_FOUND);
 * - the window is `x-ratelimit-*` when `x-ratelimit-resource` says graphql (or is absent),
 *   else the query's `rateLimit { limit remaining resetAt }`; the cost is `rateLimit.cost`.
 */

/** One entry of a GraphQL answer's `errors`, bounded. */
export interface GraphQLErrorEntry {
  type?: string;
  message: string;
  path?: readonly (string | number)[];
}

export interface GraphQLAnswer<T = unknown> {
  /** Partial data is kept when errors came with it (RESOURCE_LIMITS_EXCEEDED). */
  data: T | null;
  errors: readonly GraphQLErrorEntry[];
  /** rateLimit.cost when the query asked for it. */
  cost: number | null;
  /** The credential's #graphql window as the answer told it. */
  rateLimit: RateLimitState | null;
  /** The label (no #graphql). */
  credential: string;
  requestId: number;
}

/** The errors of one answer kept (a query of 100 aliases fails at most 100 ways). */
export const MAX_ERRORS = 200;
const MAX_MESSAGE = 1000;
const MAX_TYPE = 100;
const MAX_PATH = 50;
/**
 * The most points one query can cost: GitHub refuses a query of more than 500,000 nodes, and
 * charges its requests / 100 — at most 5,000 ("Rate limits and query limits for the GraphQL
 * API"). A bigger cost is not GitHub's: the query is charged what was reserved.
 */
export const MAX_COST = 5_000;
const RATE_LIMIT_TYPES = new Set(['RATE_LIMITED', 'RATE_LIMIT']);

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

const isCount = (v: unknown, max: number): v is number =>
  typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 && v <= max;

function errorsOf(path: string, raw: unknown): GraphQLErrorEntry[] {
  if (raw === undefined || raw === null) return [];
  if (!Array.isArray(raw)) throw new MalformedResponse(path, '`errors` is not a list');
  return raw.slice(0, MAX_ERRORS).map((e) => {
    if (!isObject(e)) throw new MalformedResponse(path, 'an entry of `errors` is not an object');
    const message = typeof e.message === 'string' ? e.message.slice(0, MAX_MESSAGE) : '';
    const entry: GraphQLErrorEntry = { message };
    const type = typeof e.type === 'string' ? e.type.slice(0, MAX_TYPE) : undefined;
    const at = Array.isArray(e.path)
      ? e.path
          .slice(0, MAX_PATH)
          .filter(
            (p): p is string | number =>
              (typeof p === 'string' && p.length <= MAX_MESSAGE) ||
              (typeof p === 'number' && Number.isSafeInteger(p)),
          )
      : undefined;
    return { ...entry, ...(type ? { type } : {}), ...(at ? { path: at } : {}) };
  });
}

/** The query's own `rateLimit` selection, as asked (top level, unaliased). */
function rateLimitField(data: unknown): Record<string, unknown> | null {
  return isObject(data) && isObject(data.rateLimit) ? data.rateLimit : null;
}

/** The window from `rateLimit { limit remaining resetAt }`, its reset within the hour. */
export function bodyRateLimit(data: unknown, now: Date): RateLimitState | null {
  const rl = rateLimitField(data);
  if (!rl || !isCount(rl.limit, 2_147_483_647) || !isCount(rl.remaining, 2_147_483_647)) {
    return null;
  }
  if (typeof rl.resetAt !== 'string') return null;
  const at = Date.parse(rl.resetAt);
  const latest = now.getTime() + (MAX_WAIT_SECONDS + RESET_SKEW_SECONDS) * 1000;
  if (!Number.isFinite(at) || at > latest) return null;
  return { limit: rl.limit, remaining: rl.remaining, resetAt: new Date(at) };
}

/** The window an answer reports for the #graphql key: its headers when they are GraphQL's. */
export function graphqlRateLimit(raw: RawResponse, now: Date): RateLimitState | null {
  const resource = raw.headers['x-ratelimit-resource'];
  const fromHeaders =
    resource === undefined || resource === 'graphql' ? parseRateLimit(raw.headers, now) : null;
  if (fromHeaders) return fromHeaders;
  if (raw.status < 200 || raw.status >= 300) return null;
  if (raw.streamed) {
    const v = raw.streamed.value;
    return isObject(v) ? bodyRateLimit(v.data, now) : null;
  }
  if (!raw.body) return null;
  try {
    return bodyRateLimit((parseJson(raw.body) as { data?: unknown })?.data, now);
  } catch {
    return null;
  }
}

/** The answer's JSON: as it was parsed while streaming in, else parsed from its text. */
function answerJson(path: string, raw: RawResponse): unknown {
  const { streamed } = raw;
  if (streamed) {
    if (streamed.bytes === 0) {
      throw new MalformedResponse(path, `HTTP ${raw.status} with no body`, null, raw.status);
    }
    if (streamed.error) {
      throw new MalformedResponse(
        path,
        `HTTP ${raw.status} body is not JSON (${streamed.bytes} bytes: ${streamed.error.message})`,
        streamed.error,
        raw.status,
      );
    }
    return streamed.value;
  }
  if (raw.body === null || raw.body === '') {
    throw new MalformedResponse(path, `HTTP ${raw.status} with no body`, null, raw.status);
  }
  try {
    return parseJson(raw.body);
  } catch (err) {
    throw new MalformedResponse(
      path,
      `HTTP ${raw.status} body is not JSON (${raw.body.length} bytes)`,
      err,
      raw.status,
    );
  }
}

export function graphqlReader<T>(o: {
  path: string;
  id: number;
  credential: string;
  estimate: number;
  now: () => Date;
}): AnswerReader<GraphQLAnswer<T>> {
  const { path } = o;
  return {
    classify(raw) {
      const now = o.now();
      if (raw.status < 200 || raw.status >= 300) throw statusError(path, raw, o.credential, now);
      const body = answerJson(path, raw);
      if (!isObject(body)) throw new MalformedResponse(path, 'the answer is not an object');
      const data = body.data ?? null;
      if (data !== null && !isObject(data)) {
        throw new MalformedResponse(path, '`data` is not an object');
      }
      const errors = errorsOf(path, body.errors);
      if (data === null && errors.length === 0) {
        throw new MalformedResponse(path, 'neither `data` nor `errors`');
      }
      if (errors.some((e) => e.type && RATE_LIMIT_TYPES.has(e.type))) {
        const rl = graphqlRateLimit(raw, now);
        const reset = rl && rl.resetAt.getTime() > now.getTime() ? rl.resetAt : null;
        throw new RateLimited(raw.status, reset ?? new Date(now.getTime() + MIN_BACKOFF_MS), path);
      }
      const cost = rateLimitField(data)?.cost;
      return {
        data: data as T | null,
        errors,
        cost: isCount(cost, MAX_COST) ? cost : null,
        rateLimit: null, // set from the answer's window once read (graphql.ts)
        credential: o.credential,
        requestId: o.id,
      };
    },
    rateLimit: (raw, now) => graphqlRateLimit(raw, now),
    // What the query cost, as GitHub said; else what was reserved (a timeout costs too) —
    // never more than the same answer says the window has used.
    points: (result, raw) =>
      chargedPoints(result?.cost ?? o.estimate, raw ? graphqlRateLimit(raw, o.now()) : null),
  };
}

/**
 * The points a query is settled at: its cost (or the estimate), at most what the answer's own
 * window says is used of it (limit − remaining). A query cannot cost more than its window
 * has spent, so where the two disagree GitHub's remaining wins: `cost: 100000` beside
 * `x-ratelimit-remaining: 4853` of 5,000 is settled at 147, not at a window's worth.
 */
export function chargedPoints(points: number, window: RateLimitState | null): number {
  if (!window) return points;
  return Math.max(0, Math.min(points, window.limit - window.remaining));
}
