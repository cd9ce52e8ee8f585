import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { Octokit } from '@octokit/rest';
import { decodeUtf8KeepingInvalid } from '../platform/json/utf8.ts';
import { answerLimits } from './answer-limits.ts';
import { FixtureMiss, GitHubAnswerRefused, GitHubUnavailable } from './errors.ts';
import {
  AnswerTooLarge,
  type HttpFetch,
  isRequestNotSent,
  type StreamedBody,
  streamedBodyOf,
} from './http-fetch.ts';
import { type RequestMethod, requestKind } from './request-kind.ts';

/**
 * How a request reaches "GitHub": over HTTP with Octokit (live), or from files
 * (fixture). Either way the client above does the gate, ledger, rate limits and
 * classification, so everything downstream behaves the same in both modes.
 */
export interface RawResponse {
  status: number;
  /** Lower-cased header names. */
  headers: Record<string, string>;
  /** The body as text; null when there is none (304); '' for a streamed answer. */
  body: string | null;
  /** Final URL (after redirects). */
  url: string;
  /**
   * A 2xx answer of a streamed kind (graphql, compare: answer-limits.ts), parsed as it came
   * in and never held as text: its value, or why it is not JSON. Readers take it
   * before `body`.
   */
  streamed?: StreamedBody;
}

/**
 * The REST API version every request asks for: GitHub's answers keep the shape we
 * read whatever its default becomes. Sent by gitHubFetch, the one fetch every request to
 * GITHUB_API_URL goes through (API calls and App token requests alike).
 */
export const GITHUB_API_VERSION = '2022-11-28';

/** No answer at all (connection refused/reset, timeout), or one refused while read. */
export class TransportFailure extends Error {
  /** False when the request never left this machine (DNS, connect refused/timed out, TLS). */
  readonly reached: boolean;
  /** Set when an answer came and was refused: too large for its kind, or past the deadline. */
  readonly refused: { reason: 'too_large' | 'deadline'; status: number } | null;
  constructor(
    message: string,
    cause: unknown,
    reached = !isRequestNotSent(cause),
    refused: TransportFailure['refused'] = cause instanceof AnswerTooLarge
      ? { reason: 'too_large', status: cause.status }
      : null,
  ) {
    super(message, { cause });
    this.name = 'TransportFailure';
    this.reached = reached;
    this.refused = refused;
  }
}

/**
 * What a transport failure that reached GitHub means for the caller: an answer refused while
 * read (GITHUB_ANSWER_TOO_LARGE / GITHUB_ANSWER_TIMEOUT), or GitHub unavailable. Transient
 * either way: the poll backs off, a push or an entity goes on its retry ladder.
 */
export function unavailableFrom(path: string, failure: TransportFailure): GitHubUnavailable {
  if (failure.refused) {
    const { reason, status } = failure.refused;
    return new GitHubAnswerRefused(path, status, reason, failure.message, failure.cause);
  }
  return new GitHubUnavailable(path, null, failure.message, failure.cause);
}

/** The API path of a URL under `apiUrl` (`/api/v3/users/x` → `/users/x` on GitHub Enterprise). */
function apiPath(url: URL, apiUrl: string): string {
  const base = new URL(apiUrl).pathname.replace(/\/+$/, '');
  const p = url.pathname;
  return base && p.startsWith(`${base}/`) ? p.slice(base.length) : p;
}

/**
 * The one fetch to GitHub: every request carries X-GitHub-Api-Version,
 * and its answer is read under its kind's byte cap (requestKind of its method and path).
 * The API transport and the App token requests are both built on it.
 */
export function gitHubFetch(httpFetch: HttpFetch, apiUrl: string): typeof fetch {
  return (input: string | URL | Request, init: RequestInit = {}) => {
    const url = new URL(typeof input === 'string' || input instanceof URL ? input : input.url);
    const headers = new Headers(init.headers);
    headers.set('x-github-api-version', GITHUB_API_VERSION);
    const method: RequestMethod = (init.method ?? 'GET').toUpperCase() === 'POST' ? 'POST' : 'GET';
    const limits = answerLimits(requestKind(method, apiPath(url, apiUrl)));
    return httpFetch(input, { ...init, headers }, limits);
  };
}

export interface TransportRequest {
  method: RequestMethod;
  path: string;
  etag: string | null;
  /** A POST's body (GraphQL: the JSON of `{ query, variables }`); never logged. */
  body?: string | null;
  /** The credential's Authorization header (`token …`), or null: sent as is, never logged. */
  authorization?: string | null;
}

export interface Transport {
  send(req: TransportRequest): Promise<RawResponse>;
}

const silentLog = { debug() {}, info() {}, warn() {}, error() {} };

interface OctokitFailure {
  status: number;
  response?: { status: number; url: string; headers: Record<string, string>; data: unknown };
}

/** A body's bytes: its one chunk as it is, or its chunks joined (each let go once joined). */
async function bytesOf(stream: ReadableStream<Uint8Array>): Promise<Uint8Array> {
  const chunks: Uint8Array[] = [];
  for await (const c of stream) chunks.push(c);
  if (chunks.length === 1) return chunks[0]!;
  const all = Buffer.concat(chunks);
  chunks.length = 0;
  return all;
}

/** From the request to its decoded text, by default: connect (5 s) plus response (15 s). */
const DEFAULT_DEADLINE_MS = 20_000;

/**
 * Octokit over our HTTP stack. The credential is chosen per request (the pool), so the
 * Octokit instance has no auth of its own: each request carries its credential's header.
 *
 * The whole answer — connect, headers, body AND its decoding to text — must be done within
 * `deadlineMs` of the send; one that is not is refused (GITHUB_ANSWER_TIMEOUT), like one
 * over its byte cap. The HTTP layer's own timeouts stop a slow socket; this bounds the rest.
 */
export function liveTransport(o: {
  apiUrl: string;
  userAgent: string;
  fetch: HttpFetch;
  deadlineMs?: number;
  /** The clock the deadline is measured on (tests); Date.now by default. */
  now?: () => number;
}): Transport {
  const deadlineMs = o.deadlineMs ?? DEFAULT_DEADLINE_MS;
  const now = o.now ?? Date.now;
  const octokit = new Octokit({
    baseUrl: o.apiUrl,
    userAgent: o.userAgent,
    // Octokit's request log prints request options (headers included): keep it silent.
    log: silentLog,
    request: {
      fetch: gitHubFetch(o.fetch, o.apiUrl),
      // We parse bodies ourselves: a truncated body must be an error, not a string.
      parseSuccessResponseBody: false,
    },
  });
  return {
    async send({ method, path: p, etag, authorization, body: sent }) {
      const headers: Record<string, string> = {};
      if (etag) headers['if-none-match'] = etag;
      if (authorization) headers.authorization = authorization;
      if (sent != null) headers['content-type'] = 'application/json; charset=utf-8';
      const started = now();
      const withinDeadline = (status: number) => {
        const took = now() - started;
        if (took <= deadlineMs) return;
        throw new TransportFailure(
          `HTTP ${status} answer read and decoded in ${took} ms, past the ${deadlineMs} ms deadline for a whole answer`,
          null,
          true,
          { reason: 'deadline', status },
        );
      };
      try {
        // `data` is the body as is: a string is sent verbatim, never re-serialised.
        const res = await octokit.request({
          method,
          url: p,
          headers,
          ...(sent != null ? { data: sent } : {}),
        });
        const streamed = streamedBodyOf(res.data);
        // Invalid UTF-8 stays distinguishable (src/platform/json/utf8.ts): the rules reject an
        // event whose key field holds it instead of storing U+FFFD.
        const body = streamed
          ? ''
          : res.data
            ? decodeUtf8KeepingInvalid(await bytesOf(res.data as ReadableStream<Uint8Array>))
            : null;
        withinDeadline(res.status);
        return {
          status: res.status,
          headers: res.headers as Record<string, string>,
          body,
          url: res.url,
          ...(streamed ? { streamed } : {}),
        };
      } catch (err) {
        if (err instanceof TransportFailure) throw err;
        const f = err as OctokitFailure;
        if (f.response) {
          // Octokit throws for 304 and >= 400 with the answer attached: still an answer.
          const data = f.response.data;
          const body =
            data === undefined || data === ''
              ? null
              : typeof data === 'string'
                ? data
                : JSON.stringify(data);
          withinDeadline(f.response.status);
          return {
            status: f.response.status,
            headers: f.response.headers,
            body,
            url: f.response.url,
          };
        }
        const cause = (err as { cause?: unknown }).cause ?? err;
        const detail = cause instanceof Error ? cause.message : String(cause);
        throw new TransportFailure(detail, cause);
      }
    },
  };
}

/**
 * Fixture files: `<dir>/<method>/<path>[__<query>].json`, lower-cased, where `<path>`
 * is the decoded path (`users/dependabot[bot]`) and `<query>` is the query parameters
 * sorted by name as `name-value` joined by `_` (`events__page-1_per_page-100.json`).
 * Each file holds `{ "status", "headers", "body" }` (or `"bodyText"` for a raw body).
 * See test/fixtures/github/README.md.
 */
export function fixtureFile(dir: string, method: string, requestPath: string): string {
  const url = new URL(requestPath, 'http://fixture.invalid');
  const segments = url.pathname
    .split('/')
    .filter(Boolean)
    // A segment of dots would climb out of the fixtures directory.
    .map((s) =>
      decodeURIComponent(s)
        .replace(/[^A-Za-z0-9._\-[\]]/g, '_')
        .replace(/^\.+$/, '_'),
    );
  const params = [...url.searchParams.entries()]
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([k, v]) => `${k}-${v}`.replace(/[^A-Za-z0-9._\-[\]]/g, '_'));
  const name = segments.join('/') + (params.length ? `__${params.join('_')}` : '');
  return path.join(dir, method.toLowerCase(), `${name.toLowerCase()}.json`);
}

interface FixtureFile {
  status: number;
  headers?: Record<string, string>;
  body?: unknown;
  bodyText?: string;
}

export function fixtureTransport(o: { dir: string; apiUrl: string }): Transport {
  return {
    async send({ method, path: p, etag }) {
      const file = fixtureFile(o.dir, method, p);
      let raw: string;
      try {
        raw = await readFile(file, 'utf8');
      } catch {
        throw new FixtureMiss(method, p, file);
      }
      const f = JSON.parse(raw) as FixtureFile;
      const headers = Object.fromEntries(
        Object.entries(f.headers ?? {}).map(([k, v]) => [k.toLowerCase(), String(v)]),
      );
      const url = `${o.apiUrl}${p}`;
      // Conditional requests behave as on GitHub: the same ETag answers 304.
      if (etag && headers.etag === etag) return { status: 304, headers, body: null, url };
      const body = f.bodyText ?? (f.body === undefined ? null : JSON.stringify(f.body));
      return { status: f.status, headers, body, url };
    },
  };
}
