import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseHour } from '../../src/store/archive-hours.ts';
import { type Child, killAll, spawnBin } from '../recovery/world.ts';
import { useTestDatabase } from '../support/db.ts';
import { seedLargeHour } from '../support/large-hour.ts';
import { deliver, pushPayload, TEST_WEBHOOK_SECRET } from '../support/web.ts';

/**
 * /archive cannot take webhook intake down (ADR 0185), through the real bin/web
 * over HTTP on real Postgres. One hour of 100,000 stored pushes (265,000 commits): 50
 * anonymous readers ask for it at once (GET, HEAD, and conditional GETs), and while they
 * wait 20 signed push deliveries arrive. Before: every request read the hour's fingerprint
 * over all its rows on bin/web's 6 shared connections, and deliveries waited past the pool's
 * 10 s checkout and were answered 500. Now every delivery is stored (202), every reader gets
 * the hour (200, the same bytes; 304 on a match) or a 503 with Retry-After, never a 500,
 * and /readyz says the web can take deliveries throughout.
 */

const t = useTestDatabase();
const HOUR = parseHour('2026-11-20-12')!;
const PUSHES = 100_000;
const READERS = 50;
const DELIVERIES = 20;
let web: Child;
let url: string;
let dataDir: string;

beforeAll(async () => {
  await seedLargeHour(t.db, HOUR, PUSHES);
  dataDir = mkdtempSync(path.join(tmpdir(), 'gpi-archive-load-'));
  web = spawnBin('web', {
    DATABASE_URL: t.url,
    WEBHOOK_SECRET: TEST_WEBHOOK_SECRET,
    HTTP_HOST: '127.0.0.1',
    HTTP_PORT: '0',
    DATA_DIR: dataDir,
    LOG_FORMAT: 'json',
  });
  const listening = await web.waitForLine((l) => l.event === 'web.listening', 'web.listening');
  url = String(listening.url);
}, 600_000);
afterAll(async () => {
  if (web) {
    web.process.kill('SIGTERM');
    await web.exited;
  }
  await killAll(web ? [web] : []);
  rmSync(dataDir, { recursive: true, force: true });
});

interface Read {
  status: number;
  etag: string | null;
  retryAfter: string | null;
  sha256: string | null;
  length: number;
}

async function read(i: number): Promise<Read> {
  const method = i % 10 === 1 ? 'HEAD' : 'GET';
  // Some readers revalidate a copy they do not have (a stale ETag): they get the file.
  const headers: Record<string, string> = i % 10 === 2 ? { 'if-none-match': '"stale"' } : {};
  const res = await fetch(`${url}/archive/${HOUR.name}.json.gz`, { method, headers });
  const body = Buffer.from(await res.arrayBuffer());
  return {
    status: res.status,
    etag: res.headers.get('etag'),
    retryAfter: res.headers.get('retry-after'),
    sha256:
      res.status === 200 && method === 'GET'
        ? createHash('sha256').update(body).digest('hex')
        : null,
    length: body.length,
  };
}

describe('bin/web with 50 readers of a 100,000-push hour', () => {
  it('stores every signed delivery, and answers every reader with the hour or a 503 with Retry-After', async () => {
    let answered = 0;
    const readers = Array.from({ length: READERS }, (_, i) =>
      read(i).finally(() => {
        answered++;
      }),
    );
    // GitHub sends deliveries as pushes happen, several at once: four waves of five.
    const results: { status: number; json: unknown }[] = [];
    const ready: number[] = [];
    for (let wave = 0; wave < DELIVERIES / 5; wave++) {
      results.push(
        ...(await Promise.all(
          Array.from({ length: 5 }, () => deliver(url, { body: JSON.stringify(pushPayload()) })),
        )),
      );
      ready.push((await fetch(`${url}/readyz`)).status);
    }
    // The deliveries were answered while readers still waited for the hour.
    expect(answered).toBeLessThan(READERS);
    const reads = await Promise.all(readers);

    expect(results.map((r) => r.status)).toEqual(Array(DELIVERIES).fill(202));
    const stored = await sql<{ n: number }>`
      SELECT count(*)::int AS n FROM push_events WHERE origin = 'webhook'`.execute(t.db);
    expect(stored.rows[0]!.n).toBe(DELIVERIES);
    expect(ready).toEqual(Array(ready.length).fill(200));

    expect(reads.filter((r) => r.status !== 200 && r.status !== 503)).toEqual([]);
    for (const r of reads.filter((x) => x.status === 503)) expect(r.retryAfter).toMatch(/^\d+$/);
    const files = reads.filter((r) => r.sha256 !== null);
    expect(files.length).toBeGreaterThan(0);
    // One file, whoever got it: its ETag is its SHA-256.
    expect(new Set(files.map((r) => r.sha256)).size).toBe(1);
    expect(files[0]!.etag).toBe(`"${files[0]!.sha256!.slice(0, 40)}"`);
    expect(new Set(reads.filter((r) => r.status === 200).map((r) => r.etag)).size).toBe(1);

    // Once built, a revalidation is a 304 and a read is the same file.
    const etag = files[0]!.etag!;
    const again = await fetch(`${url}/archive/${HOUR.name}.json.gz`, {
      headers: { 'if-none-match': etag },
    });
    expect(again.status).toBe(304);
    expect((await read(0)).sha256).toBe(files[0]!.sha256);
    expect((await fetch(`${url}/readyz`)).status).toBe(200);
    const failed = web.lines.filter(
      (l) => l.event === 'webhook.failed' || l.event === 'web.request_failed',
    );
    expect(failed).toEqual([]);
  }, 900_000);
});
