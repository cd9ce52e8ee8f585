import { parseJson } from '../platform/json/exact.ts';
import {
  parseRateLimit,
  pollIntervalOf,
  type RateLimitState,
  rateLimitRetryAt,
} from './answer-headers.ts';
import {
  GitHubAuthFailed,
  GitHubRequestFailed,
  GitHubUnavailable,
  MalformedResponse,
  RateLimited,
} from './errors.ts';
import type { RawResponse } from './transport.ts';

export interface GitHubResponse<T = unknown> {
  /** 200, 304, 404, 410, 422 ...; 301/302/307 are followed and never returned. */
  status: number;
  /** Parsed JSON body for 2xx; undefined for 304. */
  data: T | undefined;
  etag: string | null;
  /** X-Poll-Interval in seconds, when GitHub sent one. */
  pollInterval: number | null;
  rateLimit: RateLimitState | null;
  /** The final URL after redirects (a renamed repo answers 301 to its new location). */
  url: string;
  /** The ledger row of this request. */
  requestId: number;
  /** True when the quota was spent (false for 304). */
  counted: boolean;
}

/** How one kind of answer is read: its result (or the error it stands for), its window, its points. */
export interface AnswerReader<R> {
  /** The result of an answer, or throws the error it stands for. */
  classify(raw: RawResponse): R;
  /** What the answer says of the key's window. */
  rateLimit(raw: RawResponse, now: Date, result: R | undefined): RateLimitState | null;
  /** The points the ledger row settles at (GraphQL); undefined leaves the column as it is. */
  points?(result: R | undefined, raw: RawResponse | null): number | undefined;
}

/** GitHub's `message` of an error answer (or the start of a body that is not JSON). */
export function errorMessage(body: string | null): string {
  if (!body) return '';
  try {
    const m = (JSON.parse(body) as { message?: unknown }).message;
    return typeof m === 'string' ? m : '';
  } catch {
    return body.slice(0, 200);
  }
}

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
      // Parsed as it streamed in (a compare), never held as text.
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
