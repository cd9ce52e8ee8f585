import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.ts';
import { socketsFor } from '../../src/github/client.ts';
import { createHttpFetch } from '../../src/github/http-fetch.ts';

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

  it('a server that announces a 1 s keep-alive (Keep-Alive: timeout=1) keeps one connection for requests back to back', async () => {
    const connections = new Set<unknown>();
    const server = http.createServer((_req, res) => {
      res.writeHead(304, { etag: '"a"' });
      res.end();
    });
    server.keepAliveTimeout = 1_000;
    server.on('connection', (s) => connections.add(s));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    stop = () => {
      server.closeAllConnections();
      return new Promise<void>((r) => server.close(() => r()));
    };
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const fetch = createHttpFetch({ connectTimeoutMs: 5_000, responseTimeoutMs: 15_000 });
    const seen: string[] = [];
    for (let i = 0; i < 5; i++) {
      const r = await fetch(`${url}/repos/o/r/events`, { headers: { 'if-none-match': '"a"' } });
      seen.push(`${r.status} ${r.headers.get('keep-alive')}`);
    }
    expect(seen).toEqual(Array(5).fill('304 timeout=1'));
    // Node's default margin (1 s before the announced end) made each of them a new connection.
    expect(connections.size).toBe(1);
  });

  it('a reused socket the server closes before answering: the request goes again on a new one', async () => {
    const perSocket = new Map<unknown, number>();
    let requests = 0;
    const server = http.createServer((req, res) => {
      requests++;
      const n = (perSocket.get(req.socket) ?? 0) + 1;
      perSocket.set(req.socket, n);
      // What a server whose keep-alive ended just as the request left does: no answer.
      if (n > 1) return req.socket.destroy();
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{}');
    });
    server.keepAliveTimeout = 1_000;
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    stop = () => {
      server.closeAllConnections();
      return new Promise<void>((r) => server.close(() => r()));
    };
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const fetch = createHttpFetch({ connectTimeoutMs: 5_000, responseTimeoutMs: 15_000 });
    expect((await fetch(`${url}/a`)).status).toBe(200);
    expect((await fetch(`${url}/b`)).status).toBe(200);
    // /b was sent on the first socket (reused), met its close, and went again on a second.
    expect(requests).toBe(3);
    expect(perSocket.size).toBe(2);
  });
});
