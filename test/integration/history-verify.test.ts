import { createHash } from 'node:crypto';
import {
  copyFileSync,
  existsSync,
  mkdtempSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { main as exportMain } from '../../src/cli/export.ts';
import { archivePlace } from '../../src/export/archive-place.ts';
import { checkMonth } from '../../src/export/month-check.ts';
import { handleMaintenance, type JobContext } from '../../src/jobs/handlers.ts';
import { type Month, parseMonth } from '../../src/store/history-months.ts';
import { captureLogger, testConfig } from '../recovery/helpers.ts';
import { captureMain } from '../support/cli.ts';
import { useTestDatabase } from '../support/db.ts';
import { pushEvent, sha } from '../support/github-factories.ts';
import { buildHistoryWorld, type HistoryWorld, importHourLines } from '../support/history-world.ts';

/**
 * A month is exported only when every hour of it is, read from the files (ADR 0201):
 * bin/export --month writes what the check accepts, and each way a file can fail the store
 * (missing, a corrupt Parquet table, a manifest that lies, pushes or commits changed after
 * the export, a push the export never writes) keeps the month, naming the hour and why.
 */

const t = useTestDatabase();
let w: HistoryWorld;
let dir: string;
const march: Month = parseMonth('2015-03')!;
const now = new Date();

const check = () => checkMonth(t.db, march, [archivePlace(dir)], { now });

beforeAll(async () => {
  process.env.DATABASE_URL = t.url;
  process.env.LOG_LEVEL = 'warn';
  w = await buildHistoryWorld(t);
  dir = mkdtempSync(path.join(tmpdir(), 'gpi-history-verify-'));
  const r = await captureMain(exportMain, ['--month', '2015-03', '--out', dir, '--json']);
  expect(r.code, r.err).toBe(0);
}, 300_000);
afterAll(() => {
  delete process.env.DATABASE_URL;
  delete process.env.LOG_LEVEL;
  rmSync(dir, { recursive: true, force: true });
});

/** Runs `f` with `file` (relative to the export) changed by `change`, then puts it back. */
async function withChanged<T>(file: string, change: (p: string) => void, f: () => Promise<T>) {
  const p = path.join(dir, file);
  const saved = `${p}.saved`;
  copyFileSync(p, saved);
  try {
    change(p);
    return await f();
  } finally {
    renameSync(saved, p);
  }
}

describe('checkMonth', () => {
  it('accepts what bin/export --month wrote: every hour, every push', {
    timeout: 300_000,
  }, async () => {
    const c = await check();
    expect(c.problem).toBeNull();
    expect(c.hours).toBe(31 * 24);
    expect(c.pushes).toBe(6);
  });

  it('reads an http(s) mirror the same way, file by file', { timeout: 300_000 }, async () => {
    const server = createServer((req, res) => {
      const rel = decodeURIComponent(new URL(req.url ?? '/', 'http://x').pathname).slice(1);
      const file = path.join(dir, rel);
      if (rel.includes('..') || !existsSync(file)) {
        res.writeHead(404).end();
        return;
      }
      res.writeHead(200, { 'content-type': 'application/octet-stream' });
      res.end(readFileSync(file));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as AddressInfo;
    // A userinfo is the request's, never the label's.
    const mirror = archivePlace(`http://reader:secret@127.0.0.1:${port}`);
    expect(mirror.label).toBe(`http://127.0.0.1:${port}`);
    try {
      const ok = await checkMonth(t.db, march, [mirror], { now });
      expect(ok.problem).toBeNull();
      expect(ok.hours).toBe(31 * 24);
      const rel = `pushes/${w.hours[1]!.name}.parquet`;
      const gone = await withChanged(
        rel,
        (p) => rmSync(p),
        () => checkMonth(t.db, march, [mirror], { now }),
      );
      expect(gone.problem).toMatchObject({ hour: w.hours[1]!.name, problem: 'missing' });
      expect(gone.problem!.place).toBe(mirror.label);
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });

  it('the maintenance job keeps every old month not verified in RETENTION_MIRROR, and says why', {
    timeout: 300_000,
  }, async () => {
    const empty = mkdtempSync(path.join(tmpdir(), 'gpi-history-empty-'));
    try {
      const mirror = pathToFileURL(empty).href;
      const { logger, events } = captureLogger('info');
      const ctx = {
        deps: {
          config: testConfig({
            HISTORY_MONTHS: '1',
            GHARCHIVE_URL: mirror,
            RETENTION_MIRROR: mirror,
          }),
          db: t.db,
          pool: t.pool,
          logger,
          workerId: 'test:1',
        },
        boss: undefined,
      } as unknown as JobContext;
      const done = await handleMaintenance(ctx, { id: 'maintenance-history' });
      expect(done).toMatchObject({ outcome: 'pruned', months_dropped: 0, months_kept: 2 });
      expect(events('retention.kept_unexported').map((e) => [e.month, e.hour, e.problem])).toEqual([
        ['2015-03', '2015-03-01-0', 'missing'],
        ['2015-04', '2015-04-01-0', 'missing'],
      ]);
      expect(events('retention.kept_unexported')[0]!.place).toBe(empty);
    } finally {
      rmSync(empty, { recursive: true, force: true });
    }
  });

  it('keeps a month with a file missing', { timeout: 300_000 }, async () => {
    const rel = `push_commits/${w.hours[1]!.name}.parquet`;
    const c = await withChanged(rel, (p) => rmSync(p), check);
    expect(c.problem).toMatchObject({ hour: w.hours[1]!.name, problem: 'missing' });
    expect(c.problem!.detail).toContain(rel);
  });

  it('keeps a month with a corrupt Parquet table, whatever its manifest says', {
    timeout: 300_000,
  }, async () => {
    const hour = w.hours[0]!;
    const rel = `pushes/${hour.name}.parquet`;
    const flip = (p: string) => {
      const b = readFileSync(p);
      b[Math.floor(b.length / 2)] ^= 0xff;
      writeFileSync(p, b);
    };
    const c = await withChanged(rel, flip, check);
    expect(c.problem).toMatchObject({ hour: hour.name, problem: 'file_mismatch' });
    // A manifest rewritten to the corrupt file's bytes and hash: DuckDB still cannot read it.
    const mf = `${hour.name}.manifest.json`;
    const c2 = await withChanged(
      rel,
      (p) => {
        writeFileSync(p, Buffer.from('PAR1 not a parquet file at all PAR1'));
      },
      () =>
        withChanged(
          mf,
          (p) => {
            const m = JSON.parse(readFileSync(p, 'utf8'));
            const bytes = readFileSync(path.join(dir, rel));
            const entry = m.files.find((f: { path: string }) => f.path === rel);
            entry.bytes = bytes.length;
            entry.sha256 = createHash('sha256').update(bytes).digest('hex');
            writeFileSync(p, JSON.stringify(m));
          },
          check,
        ),
    );
    expect(c2.problem).toMatchObject({ hour: hour.name, problem: 'parquet_unreadable' });
  });

  it('keeps a month whose manifest does not say what the store holds', {
    timeout: 300_000,
  }, async () => {
    const hour = w.hours[0]!;
    const c = await withChanged(
      `${hour.name}.manifest.json`,
      (p) => {
        const m = JSON.parse(readFileSync(p, 'utf8'));
        m.pushes -= 1;
        m.pushes_by_origin.archive -= 1;
        writeFileSync(p, JSON.stringify(m));
      },
      check,
    );
    expect(c.problem).toMatchObject({ hour: hour.name, problem: 'counts_mismatch' });
    const bad = await withChanged(
      `${hour.name}.manifest.json`,
      (p) => writeFileSync(p, '{'),
      check,
    );
    expect(bad.problem).toMatchObject({ hour: hour.name, problem: 'manifest_unreadable' });
  });

  it('keeps a month whose commits changed after the export', { timeout: 300_000 }, async () => {
    const hour = w.hours[1]!;
    const head = w.marchHeads[4]!;
    await sql`UPDATE commits SET message = 'rewritten' WHERE sha = ${head}`.execute(t.db);
    const c = await check();
    expect(c.problem).toMatchObject({ hour: hour.name, problem: 'json_differs' });
  });

  it('keeps a month that holds a push the export never writes', { timeout: 300_000 }, async () => {
    await sql`UPDATE repositories SET profile = '{"private": true}'::jsonb WHERE id = 8800001`.execute(
      t.db,
    );
    try {
      const c = await check();
      expect(c.problem).toMatchObject({ problem: 'unexportable', place: null });
    } finally {
      await sql`UPDATE repositories SET profile = NULL WHERE id = 8800001`.execute(t.db);
    }
  });

  it('keeps a month with a push stored after the export', { timeout: 300_000 }, async () => {
    const hour = w.hours[0]!;
    const late = pushEvent({
      id: 2_699_999_999,
      repo: { id: 8_800_000, name: 'history-org/repo-0' },
      created_at: new Date(hour.start.getTime() + 50 * 60_000),
      payload: { head: sha('late-push'), size: 0, distinct_size: 0, commits: [] },
    });
    await importHourLines(t, hour, [late]);
    const c = await check();
    expect(c.problem).toMatchObject({ hour: hour.name, problem: 'counts_mismatch' });
  });
});
