import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ANSWER_MAX_BYTES } from '../../src/github/answer-limits.ts';
import { GitHubAnswerRefused } from '../../src/github/errors.ts';
import { createHttpFetch } from '../../src/github/http-fetch.ts';
import {
  GITHUB_API_VERSION,
  gitHubFetch,
  liveTransport,
  TransportFailure,
  unavailableFrom,
} from '../../src/github/transport.ts';

/**
 * Bounded answers (ADR 0120) and the pinned API version (27.8, ADR 0121), at the
 * HTTP layer: a local server streams bodies of any size and counts what it managed to write
 * before the client hung up; every request it sees shows its X-GitHub-Api-Version.
 */

const MB = 1024 * 1024;

interface Seen {
  method: string;
  path: string;
  version: string | undefined;
  /** Body bytes written before the answer ended or the client closed the socket. */
  written: number;
  closedEarly: boolean;
  /** Resolves when the answer's socket closed (ended, or hung up by the client). */
  done: Promise<void>;
}

let server: http.Server;
let url: string;
const seen: Seen[] = [];
/** Bytes to answer per path (a 200 of a JSON string that long); anything else: `{}`. */
const sizes = new Map<string, { bytes: number; declare?: boolean }>();

beforeAll(async () => {
  server = http.createServer((req, res) => {
    req.resume();
    const path = new URL(req.url ?? '/', 'http://x').pathname;
    const s: Seen = {
      method: req.method ?? '',
      path,
      version: req.headers['x-github-api-version'] as string | undefined,
      written: 0,
      closedEarly: false,
      done: new Promise<void>((resolve) => res.on('close', () => resolve())),
    };
    seen.push(s);
    const size = sizes.get(path);
    if (!size) {
      res.writeHead(200, { 'content-type': 'application/json' });
      return res.end('{"ok":true}');
    }
    res.writeHead(200, {
      'content-type': 'application/json',
      ...(size.declare ? { 'content-length': String(size.bytes) } : {}),
    });
    let closed = false;
    res.on('close', () => {
      closed = true;
      s.closedEarly = !res.writableFinished;
    });
    const block = Buffer.alloc(64 * 1024, 0x61);
    const pump = () => {
      while (!closed && s.written < size.bytes) {
        const n = Math.min(block.length, size.bytes - s.written);
        s.written += n;
        if (!res.write(n === block.length ? block : block.subarray(0, n))) {
          res.once('drain', pump);
          return;
        }
      }
      if (!closed) res.end();
    };
    pump();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => {
  server.closeAllConnections();
  return new Promise<void>((resolve) => server.close(() => resolve()));
});
beforeEach(() => {
  seen.length = 0;
  sizes.clear();
});

const httpFetch = () => createHttpFetch({ connectTimeoutMs: 2_000, responseTimeoutMs: 20_000 });

function transport(o: { base?: string; deadlineMs?: number; now?: () => number } = {}) {
  return liveTransport({
    apiUrl: o.base ?? url,
    userAgent: 'gpi-test',
    fetch: httpFetch(),
    deadlineMs: o.deadlineMs,
    now: o.now,
  });
}

async function refusal(p: Promise<unknown>): Promise<TransportFailure> {
  const err = await p.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(TransportFailure);
  return err as TransportFailure;
}

describe('byte caps, per request kind, enforced while streaming', () => {
  it('an events page over 8 MB is refused at the cap: the socket goes, the server writes little more', async () => {
    sizes.set('/events', { bytes: 110 * MB });
    const failure = await refusal(
      transport().send({ method: 'GET', path: '/events?per_page=100&page=1', etag: null }),
    );
    expect(failure.refused).toEqual({ reason: 'too_large', status: 200 });
    expect(failure.message).toMatch(/8 MB cap for events answers/);
    const err = unavailableFrom('/events', failure);
    expect(err).toBeInstanceOf(GitHubAnswerRefused);
    expect(err.code).toBe('GITHUB_ANSWER_TOO_LARGE');
    expect(err.status).toBe(200);
    const s = seen[0]!;
    await s.done;
    // Stopped at the cap: what the server got out is the cap plus what socket buffers held.
    expect(s.closedEarly).toBe(true);
    expect(s.written).toBeGreaterThan(ANSWER_MAX_BYTES.events);
    expect(s.written).toBeLessThan(3 * ANSWER_MAX_BYTES.events);
  });

  it('a declared Content-Length over the cap is refused before the body is read', async () => {
    sizes.set('/users/octocat', { bytes: 2 * MB, declare: true });
    const failure = await refusal(
      transport().send({ method: 'GET', path: '/users/octocat', etag: null }),
    );
    expect(failure.refused?.reason).toBe('too_large');
    expect(failure.message).toMatch(/declares 2 MB, over the 1 MB cap for profile answers/);
  });

  it('each kind has its own cap: a 20 MB compare is read, a 2 MB profile is not', async () => {
    sizes.set('/repos/o/r/compare/a...b', { bytes: 20 * MB });
    sizes.set('/repos/o/r', { bytes: 2 * MB });
    const compare = await transport().send({
      method: 'GET',
      path: '/repos/o/r/compare/a...b',
      etag: null,
    });
    expect(compare.status).toBe(200);
    // A compare is parsed as it streams in (ADR 0182): all 20 MB read, none of it kept as text
    // (these bytes are not JSON: the reader says so, not the transport).
    expect(compare.body).toBe('');
    expect(compare.streamed?.bytes).toBe(20 * MB);
    expect(compare.streamed?.error?.reason).toBe('syntax');
    const profile = await refusal(
      transport().send({ method: 'GET', path: '/repos/o/r', etag: null }),
    );
    expect(profile.message).toMatch(/1 MB cap for profile answers/);
  });

  it('the kind is read from the path under GITHUB_API_URL (GitHub Enterprise: /api/v3)', async () => {
    sizes.set('/api/v3/users/octocat', { bytes: 2 * MB });
    const failure = await refusal(
      transport({ base: `${url}/api/v3` }).send({
        method: 'GET',
        path: '/users/octocat',
        etag: null,
      }),
    );
    expect(failure.message).toMatch(/cap for profile answers/);
  });

  it('an App token answer is capped too (256 KB), through the same fetch', async () => {
    sizes.set('/app/installations/7/access_tokens', { bytes: 1 * MB });
    const f = gitHubFetch(httpFetch(), url);
    const err = await f(`${url}/app/installations/7/access_tokens`, { method: 'POST' }).then(
      () => null,
      (e: unknown) => e as Error,
    );
    expect(err?.message).toMatch(/256 KB cap for token answers/);
  });
});

describe('the whole-answer deadline covers reading and decoding', () => {
  it('an answer decoded past the deadline is refused (GITHUB_ANSWER_TIMEOUT)', async () => {
    // The clock jumps 30 s between the send and the end of decoding.
    let t = 0;
    const now = () => {
      t += 30_000;
      return t;
    };
    const failure = await refusal(
      transport({ deadlineMs: 20_000, now }).send({ method: 'GET', path: '/users/x', etag: null }),
    );
    expect(failure.refused).toEqual({ reason: 'deadline', status: 200 });
    expect(failure.message).toMatch(/past the 20000 ms deadline/);
    expect(unavailableFrom('/users/x', failure).code).toBe('GITHUB_ANSWER_TIMEOUT');
  });

  it('within the deadline, the answer is the caller’s', async () => {
    const res = await transport({ deadlineMs: 20_000 }).send({
      method: 'GET',
      path: '/users/x',
      etag: null,
    });
    expect(res.body).toBe('{"ok":true}');
  });
});

describe('the pinned REST API version', () => {
  it(`every request carries X-GitHub-Api-Version: ${GITHUB_API_VERSION}, GET, POST and App tokens`, async () => {
    const t = transport();
    await t.send({ method: 'GET', path: '/events', etag: null });
    await t.send({ method: 'POST', path: '/graphql', etag: null, body: '{"query":"{}"}' });
    await gitHubFetch(httpFetch(), url)(`${url}/app/installations/7/access_tokens`, {
      method: 'POST',
      headers: { 'x-github-api-version': 'a caller cannot change it' },
    });
    expect(seen.map((s) => [s.method, s.path, s.version])).toEqual([
      ['GET', '/events', GITHUB_API_VERSION],
      ['POST', '/graphql', GITHUB_API_VERSION],
      ['POST', '/app/installations/7/access_tokens', GITHUB_API_VERSION],
    ]);
  });
});
