import { chmodSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ArchiveCache } from '../../src/export/cache.ts';
import { inHourSnapshot, writeHour } from '../../src/export/write.ts';
import { type ArchiveHour, hourOf } from '../../src/store/archive-hours.ts';
import { useTestDatabase } from '../support/db.ts';
import { buildExportWorld, type ExportWorld } from '../support/export-world.ts';
import { memoryLogger } from '../support/github-client.ts';
import { startTestWeb, type TestWeb } from '../support/web.ts';

/**
 * GET /archive/ on bin/web (ADR 0130): the bytes bin/export writes, with ETag and
 * Content-Length, 304 on a match, 404 for what is not an hour of the store, nothing outside
 * the archive, an index of hours, and a switch that turns it off.
 */

const t = useTestDatabase();
let w: ExportWorld;
let web: TestWeb;
let dataDir: string;

beforeAll(async () => {
  w = await buildExportWorld(t);
  dataDir = mkdtempSync(path.join(tmpdir(), 'gpi-archive-web-'));
  web = await startTestWeb(t, { env: { DATA_DIR: dataDir } });
});
afterAll(async () => {
  await web?.close();
  rmSync(dataDir, { recursive: true, force: true });
});

async function exportBytes(hour: ArchiveHour): Promise<Buffer> {
  const chunks: Buffer[] = [];
  const sink = new Writable({
    write(c: Buffer, _e, cb) {
      chunks.push(c);
      cb();
    },
  });
  await inHourSnapshot(t.db, (run) => writeHour(run, hour, sink));
  return Buffer.concat(chunks);
}

/** A raw GET: the path exactly as given (fetch would normalise `..` away). */
function rawGet(
  target: string,
  headers: Record<string, string> = {},
  method = 'GET',
): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: Buffer }> {
  const url = new URL(web.url);
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: url.hostname, port: url.port, path: target, method, headers },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () =>
          resolve({
            status: res.statusCode ?? 0,
            headers: res.headers,
            body: Buffer.concat(chunks),
          }),
        );
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end();
  });
}

const fileOf = (h: ArchiveHour) => `/archive/${h.name}.json.gz`;
const builds = () =>
  web.logs.map((l) => JSON.parse(l)).filter((l) => l.event === 'export.hour_written');

describe('GET /archive/YYYY-MM-DD-H.json.gz', () => {
  it('serves the bytes bin/export writes, with Content-Length and an ETag, then 304 on a match', async () => {
    const r = await rawGet(fileOf(w.pushHour));
    expect(r.status).toBe(200);
    expect(r.headers['content-type']).toBe('application/gzip');
    expect(Number(r.headers['content-length'])).toBe(r.body.length);
    expect(r.body.equals(await exportBytes(w.pushHour))).toBe(true);
    const etag = r.headers.etag!;
    expect(etag).toMatch(/^"[0-9a-f]{40}"$/);

    const again = await rawGet(fileOf(w.pushHour), { 'if-none-match': etag });
    expect(again.status).toBe(304);
    expect(again.body.length).toBe(0);
    expect(again.headers.etag).toBe(etag);
    // A list, and the weak form, match too; another tag does not.
    expect((await rawGet(fileOf(w.pushHour), { 'if-none-match': `"x", W/${etag}` })).status).toBe(
      304,
    );
    expect((await rawGet(fileOf(w.pushHour), { 'if-none-match': '"other"' })).status).toBe(200);

    const head = await rawGet(fileOf(w.pushHour), {}, 'HEAD');
    expect(head.status).toBe(200);
    expect(Number(head.headers['content-length'])).toBe(r.body.length);
    expect(head.body.length).toBe(0);
  });

  it('builds an hour once per state, serves it from the cache after, and follows a change', async () => {
    const hour = w.hours[2]!;
    const before = builds().filter((b) => b.hour === hour.name).length;
    const [a, b] = await Promise.all([rawGet(fileOf(hour)), rawGet(fileOf(hour))]);
    expect([a.status, b.status]).toEqual([200, 200]);
    expect(a.body.equals(b.body)).toBe(true);
    expect(builds().filter((x) => x.hour === hour.name).length - before).toBe(1);
    await rawGet(fileOf(hour));
    expect(builds().filter((x) => x.hour === hour.name).length - before).toBe(1);

    // The push hour changes (the login a push's event carried, rewritten): a new ETag, new
    // bytes, the old file pruned.
    const first = await rawGet(fileOf(w.pushHour));
    await sql`UPDATE push_events SET actor_login = actor_login || '-x'
      WHERE head = ${w.heads.three}`.execute(t.db);
    try {
      const changed = await rawGet(fileOf(w.pushHour), { 'if-none-match': first.headers.etag! });
      expect(changed.status).toBe(200);
      expect(changed.headers.etag).not.toBe(first.headers.etag);
      expect(changed.body.equals(first.body)).toBe(false);
      expect(changed.body.equals(await exportBytes(w.pushHour))).toBe(true);
      const cached = readdirSync(path.join(dataDir, 'archive-cache')).filter((f) =>
        f.startsWith(`${w.pushHour.name}.`),
      );
      expect(cached).toEqual([
        `${w.pushHour.name}.${changed.headers.etag!.replaceAll('"', '')}.json.gz`,
      ]);
    } finally {
      await sql`UPDATE push_events SET actor_login = left(actor_login, -2)
        WHERE head = ${w.heads.three}`.execute(t.db);
    }
    expect((await rawGet(fileOf(w.pushHour))).headers.etag).toBe(first.headers.etag);
  });

  it('sends a zero-padded hour to its GH Archive name, as bin/export and bin/backfill take it', async () => {
    const padded = await rawGet('/archive/2026-11-29-08.json.gz');
    expect(padded.status).toBe(301);
    expect(padded.headers.location).toBe('/archive/2026-11-29-8.json.gz');
    // The hour with pushes asked as an operator may type it (zero-padded when its hour has one
    // digit): followed, the same bytes as by its name.
    const at = w.pushHour.start;
    const asked = `${at.toISOString().slice(0, 10)}-${String(at.getUTCHours()).padStart(2, '0')}`;
    const followed = await fetch(`${web.url}/archive/${asked}.json.gz`);
    expect(followed.status).toBe(200);
    expect(Buffer.from(await followed.arrayBuffer())).toEqual(
      (await rawGet(fileOf(w.pushHour))).body,
    );
  });

  it('is a 404 for an hour the store knows nothing of, one not over yet, and any other name', async () => {
    expect((await rawGet('/archive/2012-01-01-0.json.gz')).status).toBe(404);
    const current = hourOf(new Date());
    expect((await rawGet(fileOf(current))).status).toBe(404);
    expect((await rawGet('/archive/9999-01-01-1.json.gz')).status).toBe(404);
    for (const target of [
      '/archive/../../etc/passwd',
      '/archive/..%2f..%2fetc%2fpasswd',
      '/archive/%2e%2e/package.json',
      `/archive/${w.pushHour.name}.json.gz/../../package.json`,
      `/archive/${w.pushHour.name}.json`,
      `/archive/${w.pushHour.name}`,
      '/archive/2026-13-01-1.json.gz',
      '/archive/2026-02-30-1.json.gz',
      '/archive/2026-01-01-24.json.gz',
      `/archive/x${w.pushHour.name}.json.gz`,
      '/archive/2026-11-29-008.json.gz',
    ]) {
      const r = await rawGet(target);
      expect(r.status, target).toBe(404);
      expect(r.body.toString(), target).not.toContain('"name"');
    }
  });
});

describe('GET /archive/', () => {
  it('lists the hours with pushes or open gaps: pushes, commits states, open', async () => {
    const gapHour = w.hours[3]!;
    const { source } = await (await import('../../src/store/sources.ts')).addSource(
      t.db,
      { kind: 'repo', target: 'index-test/gap' },
      'live',
    );
    await t.db
      .insertInto('gaps')
      .values({
        source_id: source.id,
        from_at: new Date(gapHour.start.getTime() + 60_000),
        to_at: new Date(gapHour.start.getTime() + 120_000),
        next_attempt_at: new Date(),
      })
      .execute();
    const res = await fetch(`${web.url}/archive/?hours=24`);
    expect(res.status).toBe(200);
    const index = (await res.json()) as {
      from: string;
      to: string;
      hours: {
        hour: string;
        file: string;
        pushes: number;
        commits: Record<string, number>;
        gaps_open: number;
        open: boolean;
      }[];
    };
    const mine = index.hours.find((h) => h.hour === w.pushHour.name)!;
    expect(mine).toMatchObject({
      file: `${w.pushHour.name}.json.gz`,
      pushes: w.visible,
      gaps_open: 0,
      open: true,
    });
    expect(mine.commits).toMatchObject({
      pending: 1,
      complete: 6,
      partial: 1,
      none: 1,
      skipped: 1,
    });
    expect(Object.values(mine.commits).reduce((a, b) => a + b, 0)).toBe(w.visible);
    expect(index.hours.find((h) => h.hour === gapHour.name)).toMatchObject({
      pushes: 0,
      gaps_open: 1,
      open: true,
    });
    // Empty hours are not listed (their files are still served).
    expect(index.hours.find((h) => h.hour === w.hours[0]!.name)).toBeUndefined();
    expect((await rawGet(fileOf(w.hours[0]!))).status).toBe(200);
    expect((await fetch(`${web.url}/archive/?hours=0`)).status).toBe(400);
    expect((await fetch(`${web.url}/archive/?hours=x`)).status).toBe(400);
  });
});

describe('ARCHIVE_SERVE=off', () => {
  it('has no /archive at all', async () => {
    const off = await startTestWeb(t, { env: { DATA_DIR: dataDir, ARCHIVE_SERVE: 'off' } });
    try {
      expect((await fetch(`${off.url}/archive/`)).status).toBe(404);
      expect((await fetch(`${off.url}${fileOf(w.pushHour)}`)).status).toBe(404);
      expect((await fetch(`${off.url}/healthz`)).status).toBe(200);
    } finally {
      await off.close();
    }
  });
});

describe('the cache directory', () => {
  it('is DATA_DIR/archive-cache, and not one others may write to', async () => {
    const mine = mkdtempSync(path.join(tmpdir(), 'gpi-archive-dir-'));
    const shared = mkdtempSync(path.join(tmpdir(), 'gpi-archive-dir-'));
    try {
      const logger = memoryLogger('silent').logger;
      expect(await new ArchiveCache({ db: t.db, logger, dataDir: mine }).dir()).toBe(
        path.join(mine, 'archive-cache'),
      );
      mkdirSync(path.join(shared, 'archive-cache'));
      chmodSync(path.join(shared, 'archive-cache'), 0o777);
      const fallback = await new ArchiveCache({ db: t.db, logger, dataDir: shared }).dir();
      expect(fallback).not.toBe(path.join(shared, 'archive-cache'));
      expect(fallback.startsWith(tmpdir())).toBe(true);
    } finally {
      rmSync(mine, { recursive: true, force: true });
      rmSync(shared, { recursive: true, force: true });
    }
  });
});
