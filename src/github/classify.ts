import { errorMessage } from '../budget/client-context.ts';
import type { GitHubResponse } from '../budget/client-types.ts';
import { parseRateLimit, rateLimitRetryAt } from '../budget/rate-limits.ts';
import { parseJson } from '../platform/json/exact.ts';
import { pollIntervalOf } from './answer-headers.ts';
import {
  GitHubAuthFailed,
  GitHubRequestFailed,
  GitHubUnavailable,
  MalformedResponse,
  RateLimited,
} from './errors.ts';
import type { RawResponse } from './transport.ts';

/** Statuses that are answers about the resource, returned to the caller to decide. */
const RETURNED = new Set([304, 404, 410, 422]);

/**
 * What a non-2xx answer stands for, as an error: a 401, a 5xx, a 403/429 rate limit, or any
 * other unexpected status. Shared by REST and GraphQL (whose errors are statuses too).
 */
export function statusError(path: string, raw: RawResponse, credential: string, now: Date): Error {
  const { status, headers } = raw;
  if (status === 401) return new GitHubAuthFailed(path, undefined, credential);
  if (status >= 500) return new GitHubUnavailable(path, status, `HTTP ${status}`);
  const retryAt = rateLimitRetryAt(status, headers, errorMessage(raw.body), now);
  if (retryAt) return new RateLimited(status, retryAt, path);
  return new GitHubRequestFailed(path, status, errorMessage(raw.body) || 'unexpected status');
}

/** Turn a REST answer into a GitHubResponse, or throw the error it stands for. */
export function classify<T>(
  path: string,
  raw: RawResponse,
  requestId: number,
  credential: string,
  now: Date,
): GitHubResponse<T> {
  const { status, headers } = raw;
  const base = {
    status,
    etag: headers.etag ?? null,
    // Digits only, 1 s – 1 h (answer-headers.ts): `0.5` or `1e10` failed every run.
    pollInterval: pollIntervalOf(headers).seconds,
    rateLimit: parseRateLimit(headers, now),
    url: raw.url,
    requestId,
    counted: status !== 304,
  };
  if (status >= 200 && status < 300) {
    const { streamed } = raw;
    if (streamed) {
      // Parsed as it streamed in (a compare: ADR 0182), never held as text.
      if (streamed.bytes === 0) return { ...base, data: undefined };
      if (streamed.error) {
        throw new MalformedResponse(
          path,
          `HTTP ${status} body is not JSON (${streamed.bytes} bytes: ${streamed.error.message})`,
          streamed.error,
          status,
        );
      }
      return { ...base, data: streamed.value as T };
    }
    if (raw.body === null || raw.body === '') return { ...base, data: undefined };
    try {
      // Exact: 64-bit ids keep every digit (src/platform/json/exact.ts).
      return { ...base, data: parseJson(raw.body) as T };
    } catch (err) {
      throw new MalformedResponse(
        path,
        `HTTP ${status} body is not JSON (${raw.body.length} bytes)`,
        err,
        status,
      );
    }
  }
  if (RETURNED.has(status)) return { ...base, data: undefined };
  throw statusError(path, raw, credential, now);
}
