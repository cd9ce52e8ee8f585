import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHttpFetch } from '../../src/github/http-fetch.ts';
import { liveTransport } from '../../src/github/transport.ts';
import { parseJson } from '../../src/platform/json/exact.ts';
import { mapEventsPage } from '../../src/store/mapping.ts';
import { type GitHubEvent, pushEvent } from '../support/github-factories.ts';

/**
 * On the poll path: an events page whose bytes are not all UTF-8, read
 * through the real HTTP transport (node:http, Octokit) and the real parser and rules. A
 * push whose ref holds invalid bytes is rejected (invalid_text) — two such pushes are
 * two rejections, never one stored ref with U+FFFD — while invalid bytes in free text are
 * stored sanitised and reported, and every other event on the page is kept.
 */

let server: http.Server;
let body: Buffer = Buffer.alloc(0);
let url: string;
beforeAll(async () => {
  server = http.createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json; charset=utf-8' });
    res.end(body);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

function withBytes(ev: GitHubEvent, marker: string, bytes: number[]): Buffer {
  const text = JSON.stringify(ev);
  const at = text.indexOf(marker);
  return Buffer.concat([
    Buffer.from(text.slice(0, at)),
    Buffer.from(bytes),
    Buffer.from(text.slice(at + marker.length)),
  ]);
}

describe('a polled page with bytes that are not UTF-8', () => {
  it('sets aside pushes whose key fields hold them, sanitises free text, keeps the rest', async () => {
    const repo = { id: 9191, name: 'own/poll' };
    const same = { before: 'a'.repeat(40), head: 'b'.repeat(40) };
    const good = pushEvent({ id: 73_000_000_001, repo });
    const refA = pushEvent({
      id: 73_000_000_002,
      repo,
      payload: { ref: 'refs/heads/xXX', ...same },
    });
    const refB = pushEvent({
      id: 73_000_000_003,
      repo,
      payload: { ref: 'refs/heads/xXX', ...same },
    });
    const login = pushEvent({ id: 73_000_000_004, actor: { id: 5, login: 'mXX' } });
    const text = pushEvent({ id: 73_000_000_005, payload: { commits: [{ message: 'hiXX' }] } });
    body = Buffer.concat([
      Buffer.from(`[${JSON.stringify(good)},`),
      withBytes(refA, 'XX', [0xff]),
      Buffer.from(','),
      withBytes(refB, 'XX', [0xfe]),
      Buffer.from(','),
      withBytes(login, 'XX', [0xe2, 0x82]), // a sequence cut short
      Buffer.from(','),
      withBytes(text, 'XX', [0x80]),
      Buffer.from(']'),
    ]);
    const transport = liveTransport({
      apiUrl: url,
      userAgent: 'gpi-test',
      fetch: createHttpFetch({ connectTimeoutMs: 5_000, responseTimeoutMs: 5_000 }),
    });
    const raw = await transport.send({
      method: 'GET',
      path: '/events',
      etag: null,
      authorization: null,
    });
    expect(raw.status).toBe(200);
    const page = mapEventsPage(parseJson(raw.body!), '/events');
    expect(page.size).toBe(5);
    expect(page.pushes.map((p) => p.id)).toEqual([good.id, text.id]);
    expect(page.pushes[1]!.payload).toMatchObject({ commits: [{ message: 'hi\ufffd' }] });
    expect(page.sanitised).toEqual([{ eventId: text.id, path: 'payload.commits[0].message' }]);
    expect(page.rejected.map((r) => [r.eventId, r.reason])).toEqual([
      [refA.id, 'invalid_text'],
      [refB.id, 'invalid_text'],
      [login.id, 'invalid_text'],
    ]);
    expect(page.rejected[0]!.message).toMatch(/^payload\.ref contains a lone UTF-16 surrogate/);
    expect(page.rejected[2]!.message).toMatch(/^actor\.login contains/);
    // Every event is known by id (the horizon counts them), stored or rejected.
    expect(page.eventIds).toEqual([good, refA, refB, login, text].map((e) => e.id));
  });
});
