import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { type DuckDBConnection, DuckDBInstance } from '@duckdb/node-api';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hourOf } from '../../src/store/archive-hours.ts';
import { useTestDatabase } from '../support/db.ts';
import { seedLargeHour } from '../support/large-hour.ts';
import { type Child, killAll, ROOT, spawnBin } from './world.ts';

/**
 * An hour of 100,000 pushes (265,000 commits) written as Parquet by the real bin/export:
 * rows stream from a cursor into DuckDB a fetch at a time, and DuckDB spills past its
 * memory limit, so the process's peak RSS over its whole life (getrusage, written at exit)
 * stays under 512 MB, and both tables hold every row.
 */

const t = useTestDatabase();
const children: Child[] = [];
let dir: string;
const PUSHES = 100_000;
const HOUR = hourOf(new Date('2026-11-20T09:00:00Z'));
const PEAK_BOUND = 512 * 1024 * 1024;
const PEAK_HOOK = `--import=${path.join(ROOT, 'test/support/peak-rss.mjs')}`;

beforeAll(async () => {
  dir = mkdtempSync(path.join(tmpdir(), 'gpi-parquet-large-'));
  await seedLargeHour(t.db, HOUR, PUSHES);
});
afterAll(async () => {
  await killAll(children);
  rmSync(dir, { recursive: true, force: true });
});

describe('bin/export --format parquet of a 100,000-push hour', () => {
  it('writes every row and stays under 512 MB', async () => {
    const rssFile = path.join(dir, 'rss');
    const child = spawnBin(
      'export',
      {
        DATABASE_URL: t.url,
        LOG_LEVEL: 'warn',
        NODE_OPTIONS: PEAK_HOOK,
        GPI_PEAK_RSS_FILE: rssFile,
      },
      [HOUR.name, '--format', 'parquet', '--out', dir, '--json'],
    );
    children.push(child);
    const exit = await child.exited;
    expect(exit, child.stderr.join('')).toEqual({ code: 0, signal: null });
    const peak = Number(readFileSync(rssFile, 'utf8'));
    console.log(
      `bin/export --format parquet, ${PUSHES} pushes: peak RSS ${(peak / 1048576).toFixed(0)} MB`,
    );
    expect(peak).toBeGreaterThan(0);
    expect(peak).toBeLessThan(PEAK_BOUND);
    const commits = await sql<{ n: string }>`SELECT count(*)::text AS n FROM push_commits`.execute(
      t.db,
    );
    const duck = await DuckDBInstance.create(':memory:', {
      autoinstall_known_extensions: 'false',
      autoload_known_extensions: 'false',
    });
    let c: DuckDBConnection | null = null;
    try {
      c = await duck.connect();
      const count = async (table: string) =>
        (
          await c!.runAndReadAll(
            `SELECT count(*)::VARCHAR AS n FROM read_parquet('${path.join(dir, table, `${HOUR.name}.parquet`)}')`,
          )
        ).getRowObjectsJson()[0]!.n;
      expect(await count('pushes')).toBe(String(PUSHES));
      expect(await count('push_commits')).toBe(commits.rows[0]!.n);
    } finally {
      c?.closeSync();
      duck.closeSync();
    }
  }, 600_000);
});
