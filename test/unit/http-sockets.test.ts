import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { socketsFor } from '../../src/budget/client.ts';
import { createHttpFetch, isRequestNotSent } from '../../src/github/http-fetch.ts';
import { loadConfig } from '../../src/platform/config/config.ts';

/**
 * A pool of N credentials keeps N requests in flight at once (one a request gate): the HTTP
 * layer must not hold them to fewer. At GitHub's 100–300 ms an answer, a cap of four sockets
 * for the whole pool was four requests in flight — 20 a second whatever the pool held.
 */

/** A server that holds every request until `want` are in flight (or `fallbackMs` passed). */
async function barrierServer(want: number, fallbackMs: number) {
  let inFlight = 0;
  let peak = 0;
  const connections = new Set<unknown>();
  const waiting: http.ServerResponse[] = [];
  let timer: NodeJS.Timeout | null = null;
  const release = () => {
    if (timer) clearTimeout(timer);
    timer = null;
    for (const res of waiting.splice(0)) res.end('{}');
  };
  const server = http.createServer((_req, res) => {
    inFlight++;
    peak = Math.max(peak, inFlight);
    res.on('finish', () => inFlight--);
    waiting.push(res);
    // The fallback only ends a failing run quickly (it saw fewer than `want` at once).
    timer ??= setTimeout(release, fallbackMs);
    if (inFlight >= want) release();
  });
  server.on('connection', (s) => connections.add(s));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    peak: () => peak,
    connections: () => connections.size,
    close: () => {
      if (timer) clearTimeout(timer);
      server.closeAllConnections();
      return new Promise<void>((r) => server.close(() => r()));
    },
  };
}

const tokens = (n: number) => Array.from({ length: n }, (_, i) => `ghp_sockets${i}`).join(',');

let stop: (() => Promise<void>) | null = null;
afterEach(async () => {
  await stop?.();
  stop = null;
});

describe('sockets to GitHub follow the pool', () => {
  it('a pool of 16 tokens has room for every gate: 16 requests in flight at once', async () => {
    const config = loadConfig({
      DATABASE_URL: 'postgres://x@127.0.0.1/x',
      GITHUB_TOKENS: tokens(16),
      LOG_LEVEL: 'silent',
    });
    // The REST and GraphQL gates of each credential, and a few more.
    expect(socketsFor(config)).toBeGreaterThanOrEqual(32);
    const server = await barrierServer(16, 1_000);
    stop = server.close;
    const fetch = createHttpFetch({
      connectTimeoutMs: 5_000,
      responseTimeoutMs: 15_000,
      maxSockets: socketsFor(config),
    });
    const answers = await Promise.all(
      Array.from({ length: 16 }, (_, i) =>
        fetch(`${server.url}/repos/o/r${i}/events`).then((r) => r.status),
      ),
    );
    expect(answers).toEqual(Array(16).fill(200));
    expect(server.peak()).toBe(16);
    // Kept alive and reused: a second round opens no new connection.
    await Promise.all(
      Array.from({ length: 16 }, (_, i) => fetch(`${server.url}/r${i}`).then((r) => r.text())),
    );
    expect(server.connections()).toBe(16);
  });

  it('one credential: a few sockets, as before', () => {
    const config = loadConfig({
      DATABASE_URL: 'postgres://x@127.0.0.1/x',
      GITHUB_TOKEN: 'ghp_one',
      LOG_LEVEL: 'silent',
    });
    expect(socketsFor(config)).toBeLessThanOrEqual(8);
  });
});

/** Node ≥ 24.7: the agent's margin before a server's announced keep-alive end can be set. */
const marginSettable = 'agentKeepAliveTimeoutBuffer' in new http.Agent();

/** A server whose handler sees each request with how many came before it on its socket. */
async function socketServer(
  keepAliveMs: number,
  handle: (n: number, req: http.IncomingMessage, res: http.ServerResponse) => void,
) {
  const perSocket = new Map<unknown, number>();
  let requests = 0;
  const server = http.createServer((req, res) => {
    requests++;
    const n = (perSocket.get(req.socket) ?? 0) + 1;
    perSocket.set(req.socket, n);
    handle(n, req, res);
  });
  server.keepAliveTimeout = keepAliveMs;
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  stop = () => {
    server.closeAllConnections();
    return new Promise<void>((r) => server.close(() => r()));
  };
  return {
    server,
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    requests: () => requests,
    connections: () => perSocket.size,
  };
}

const fetchOf = () => createHttpFetch({ connectTimeoutMs: 5_000, responseTimeoutMs: 15_000 });

describe('kept-alive sockets', () => {
  it.skipIf(!marginSettable)(
    'a server that announces a 1 s keep-alive (Keep-Alive: timeout=1) keeps one connection for requests back to back',
    async () => {
      const s = await socketServer(1_000, (_n, _req, res) => {
        res.writeHead(304, { etag: '"a"' });
        res.end();
      });
      const fetch = fetchOf();
      const seen: string[] = [];
      for (let i = 0; i < 5; i++) {
        const r = await fetch(`${s.url}/repos/o/r/events`, { headers: { 'if-none-match': '"a"' } });
        seen.push(`${r.status} ${r.headers.get('keep-alive')}`);
      }
      expect(seen).toEqual(Array(5).fill('304 timeout=1'));
      // With Node's own margin (1 s before the announced end) each was a new connection.
      expect(s.connections()).toBe(1);
    },
  );

  it('a reused socket reset before any answer: the request goes again on a new one', async () => {
    // A server that reads the request and resets the connection without answering (what one
    // that closes an idle socket as the request arrives looks like from here).
    const s = await socketServer(5_000, (n, req, res) => {
      if (n > 1) return req.socket.destroy();
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{}');
    });
    const fetch = fetchOf();
    expect((await fetch(`${s.url}/a`)).status).toBe(200);
    expect((await fetch(`${s.url}/b`)).status).toBe(200);
    // /b went on the first socket (reused), was reset, and went again on a second.
    expect(s.requests()).toBe(3);
    expect(s.connections()).toBe(2);
  });

  it('a retry that cannot connect is not "not sent": the reset attempt may have reached the server', async () => {
    const s = await socketServer(5_000, (n, req, res) => {
      if (n > 1) {
        // No more connections: the retry's connect is refused.
        s.server.close();
        return req.socket.destroy();
      }
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{}');
    });
    const fetch = fetchOf();
    expect((await fetch(`${s.url}/a`)).status).toBe(200);
    const err = await fetch(`${s.url}/b`).then(
      () => null,
      (e: unknown) => e as NodeJS.ErrnoException,
    );
    expect(err?.code).toBe('ECONNREFUSED');
    expect(isRequestNotSent(err)).toBe(false);
    expect(s.requests()).toBe(2);
  });
});
