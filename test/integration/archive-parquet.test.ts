import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runBin } from '../support/cli.ts';
import { useTestDatabase } from '../support/db.ts';
import { buildExportWorld, type ExportWorld } from '../support/export-world.ts';
import { startTestWeb, type TestWeb } from '../support/web.ts';

/**
 * /archive serves an hour's Parquet tables and manifest (ADR 0195) with the bytes
 * `bin/export --format json,parquet` writes of the same store: built once per state of the
 * hour, revalidated by ETag, rebuilt when a write changes the hour, and a manifest that
 * follows the gaps open now.
 */

const t = useTestDatabase();
let w: ExportWorld;
let web: TestWeb;
let dataDir: string;
const dirs: string[] = [];

beforeAll(async () => {
  w = await buildExportWorld(t);
  dataDir = mkdtempSync(path.join(tmpdir(), 'gpi-archive-parquet-'));
  web = await startTestWeb(t, { env: { DATA_DIR: dataDir } });
});
afterAll(async () => {
  await web?.close();
  rmSync(dataDir, { recursive: true, force: true });
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** What bin/export writes of the hour now: each file by its path under DIR. */
async function exported(): Promise<Record<string, Buffer>> {
  const dir = mkdtempSync(path.join(tmpdir(), 'gpi-archive-parquet-out-'));
  dirs.push(dir);
  const r = await runBin('export', [w.pushHour.name, '--format', 'json,parquet', '--out', dir], {
    DATABASE_URL: t.url,
    LOG_LEVEL: 'warn',
  });
  expect(r.code, r.err).toBe(0);
  const h = w.pushHour.name;
  return Object.fromEntries(
    [`${h}.json.gz`, `${h}.manifest.json`, `pushes/${h}.parquet`, `push_commits/${h}.parquet`].map(
      (p) => [p, readFileSync(path.join(dir, p))],
    ),
  );
}

async function get(p: string, headers: Record<string, string> = {}) {
  const res = await fetch(`${web.url}/archive/${p}`, { headers, redirect: 'manual' });
  return { res, body: Buffer.from(await res.arrayBuffer()) };
}

const builds = () =>
  web.logs
    .map((l) => JSON.parse(l))
    .filter((l) => l.event === 'export.hour_written' && l.format === 'parquet').length;

describe('/archive: the Parquet tables and the manifest of an hour', () => {
  it('serves the bytes bin/export writes, each file once built', async () => {
    const files = await exported();
    const h = w.pushHour.name;
    for (const p of [`pushes/${h}.parquet`, `push_commits/${h}.parquet`, `${h}.manifest.json`]) {
      const { res, body } = await get(p);
      expect(res.status, p).toBe(200);
      expect(body.equals(files[p]!), p).toBe(true);
      expect(Number(res.headers.get('content-length'))).toBe(body.length);
    }
    expect((await get(`pushes/${h}.parquet`)).res.headers.get('content-type')).toBe(
      'application/vnd.apache.parquet',
    );
    // One build served all three.
    expect(builds()).toBe(1);
    // The manifest lists the JSON file /archive serves, with its bytes and SHA-256.
    const json = (await get(`${h}.json.gz`)).body;
    expect(json.equals(files[`${h}.json.gz`]!)).toBe(true);
    // Only the build's files and the JSON file's are in the cache.
    const cached = readdirSync(path.join(dataDir, 'archive-cache')).filter(
      (n) => !n.startsWith('.'),
    );
    expect(cached.map((n) => n.replace(/\.[0-9a-f]{40}\./, '.')).sort()).toEqual(
      [
        `${h}.json.gz`,
        `${h}.parts.json`,
        `${h}.push_commits.parquet`,
        `${h}.pushes.parquet`,
      ].sort(),
    );
  });

  it('answers 304 on the ETag, 301 for a zero-padded hour, 404 for other names', async () => {
    const h = w.pushHour.name;
    for (const p of [`pushes/${h}.parquet`, `${h}.manifest.json`]) {
      const first = await get(p);
      const etag = first.res.headers.get('etag')!;
      expect(etag).toMatch(/^"[0-9a-f]{40}"$/);
      const again = await get(p, { 'if-none-match': etag });
      expect(again.res.status, p).toBe(304);
    }
    const padded = h.replace(/-(\d)$/, '-0$1');
    if (padded !== h) {
      const r = await get(`push_commits/${padded}.parquet`);
      expect(r.res.status).toBe(301);
      expect(r.res.headers.get('location')).toBe(`/archive/push_commits/${h}.parquet`);
    }
    for (const p of [`pushes/${h}.json.gz`, `commits/${h}.parquet`, `pushes/../${h}.parquet`]) {
      expect((await get(p)).res.status, p).toBe(404);
    }
  });

  it('follows a write that changes the hour, and a gap opened over it', async () => {
    const h = w.pushHour.name;
    const before = builds();
    const first = await get(`push_commits/${h}.parquet`);
    // A commit's author time: in the push_commits table alone, not in a JSON line.
    await sql`UPDATE commits SET authored_at = '2020-01-01T00:00:00Z'
      WHERE sha IN (SELECT sha FROM push_commits WHERE head = ${w.heads.three})`.execute(t.db);
    const after = await get(`push_commits/${h}.parquet`);
    expect(after.res.headers.get('etag')).not.toBe(first.res.headers.get('etag'));
    expect(builds()).toBe(before + 1);
    const gap = await sql<{ id: string }>`
      INSERT INTO gaps (source_id, from_at, to_at, state)
      SELECT id, ${new Date(w.pushHour.start.getTime() + 60_000)}, ${new Date(w.pushHour.start.getTime() + 120_000)}, 'open'
      FROM event_sources LIMIT 1 RETURNING id::text AS id`.execute(t.db);
    const files = await exported();
    for (const p of [`push_commits/${h}.parquet`, `${h}.manifest.json`]) {
      const { body } = await get(p);
      expect(body.equals(files[p]!), p).toBe(true);
    }
    const m = JSON.parse((await get(`${h}.manifest.json`)).body.toString('utf8'));
    expect(m.gaps_open.map((g: { id: string }) => g.id)).toEqual([gap.rows[0]!.id]);
    // The gap changed no file: no build for it.
    expect(builds()).toBe(before + 1);
  });
});
