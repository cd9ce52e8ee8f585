import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHttpFetch } from '../../src/github/http-fetch.ts';
import { requestKind } from '../../src/github/request-kind.ts';
import { liveTransport } from '../../src/github/transport.ts';

/**
 * The live transport sends a POST's body as given (GraphQL: ADR 0110 §6), with its length
 * and a JSON content type, and a GET with none; every path has one request kind.
 */
let server: http.Server;
let url: string;
const seen: { method?: string; type?: string; length?: string; body: string }[] = [];

beforeAll(async () => {
  server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      seen.push({
        method: req.method,
        type: req.headers['content-type'],
        length: req.headers['content-length'],
        body: Buffer.concat(chunks).toString('utf8'),
      });
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{"data":{"ok":true}}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

function transport() {
  return liveTransport({
    apiUrl: url,
    userAgent: 'gpi-test',
    fetch: createHttpFetch({ connectTimeoutMs: 2_000, responseTimeoutMs: 5_000 }),
  });
}

describe('the live transport', () => {
  it('sends a POST body verbatim, with its byte length and a JSON type', async () => {
    seen.length = 0;
    // Key order and a non-ASCII character: re-serialising or counting characters would show.
    const body = '{"variables":{"é":1},"query":"query { viewer { login } }"}';
    const res = await transport().send({
      method: 'POST',
      path: '/graphql',
      etag: null,
      body,
      authorization: 'bearer x',
    });
    expect(res.status).toBe(200);
    // A GraphQL answer is parsed as it streams in (ADR 0182), never kept as text.
    expect(res.body).toBe('');
    expect(res.streamed).toEqual({ bytes: 20, value: { data: { ok: true } } });
    expect(seen).toEqual([
      {
        method: 'POST',
        type: 'application/json; charset=utf-8',
        length: String(Buffer.byteLength(body)),
        body,
      },
    ]);
  });

  it('sends a GET without a body', async () => {
    seen.length = 0;
    await transport().send({ method: 'GET', path: '/users/octocat', etag: null });
    expect(seen).toHaveLength(1);
    expect(seen[0]).toMatchObject({ method: 'GET', body: '' });
    expect(seen[0]!.length).toBeUndefined();
  });
});

describe('requestKind', () => {
  it.each([
    ['POST', '/graphql', 'graphql'],
    ['GET', '/events?per_page=100&page=2', 'events'],
    ['GET', '/repos/o/r/events', 'events'],
    ['GET', '/orgs/github/events', 'events'],
    ['GET', '/users/torvalds/events/public', 'events'],
    ['GET', '/users/torvalds/events', 'events'],
    ['GET', '/repos/o/r/compare/a...b?page=2&per_page=100', 'compare'],
    ['GET', '/repositories/1/compare/a...b', 'compare'],
    ['GET', '/users/dependabot%5Bbot%5D', 'profile'],
    ['GET', '/user/1', 'profile'],
    ['GET', '/repos/o/r', 'profile'],
    ['GET', '/repositories/123', 'profile'],
    ['POST', '/app/installations/42/access_tokens', 'token'],
    ['GET', '/rate_limit', 'other'],
  ] as const)('%s %s is %s', (method, path, kind) => {
    expect(requestKind(method, path)).toBe(kind);
  });
});
