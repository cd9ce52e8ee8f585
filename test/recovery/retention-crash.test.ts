import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runBin } from '../support/cli.ts';
import { useTestDatabase } from '../support/db.ts';
import { buildHistoryWorld, type HistoryWorld, pushesOf } from '../support/history-world.ts';
import { spawnBin } from './world.ts';

/**
 * bin/retention SIGKILLed mid-drop (ADR 0201): at `retention.before_commit` the month's
 * keys are deleted, its partition detached and dropped and its record written, all in the
 * transaction the kill ends. Nothing of it may stay: the partition, its pushes and their
 * keys are all there, no month is recorded dropped, and the next run drops the month whole.
 */

const t = useTestDatabase();
let w: HistoryWorld;
let dir: string;
let before: Awaited<ReturnType<typeof pushesOf>>;

const env = () => ({
  DATABASE_URL: t.url,
  HISTORY_MONTHS: '1',
  ARCHIVE_DIR: dir,
  LOG_LEVEL: 'info',
  LOG_FORMAT: 'json',
});
const hasMarch = async () =>
  (
    await sql<{ n: number }>`SELECT count(*)::int AS n FROM pg_inherits i
      JOIN pg_class c ON c.oid = i.inhrelid
      WHERE i.inhparent = 'push_events'::regclass AND c.relname = 'push_events_2015_03'`.execute(
      t.db,
    )
  ).rows[0]!.n === 1;
const keysOfMarch = async () =>
  (
    await sql<{ n: number }>`SELECT count(*)::int AS n FROM push_keys
      WHERE created_at >= '2015-03-01Z' AND created_at < '2015-04-01Z'`.execute(t.db)
  ).rows[0]!.n;
const recorded = async () =>
  (
    await sql<{ month: string; state: string }>`
      SELECT to_char(month, 'YYYY-MM') AS month, state FROM history_months ORDER BY 1`.execute(t.db)
  ).rows;

beforeAll(async () => {
  w = await buildHistoryWorld(t);
  before = await pushesOf(t.db, w.marchHeads);
  dir = mkdtempSync(path.join(tmpdir(), 'gpi-retention-crash-'));
  // March exported; April not (with --no-export it stays kept).
  const r = await runBin('export', ['--month', '2015-03'], { ...env(), LOG_LEVEL: 'warn' });
  expect(r.code, r.err).toBe(0);
}, 300_000);
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

describe('bin/retention killed mid-drop', () => {
  it('loses nothing, and the next run drops the month whole', { timeout: 600_000 }, async () => {
    const crashed = spawnBin('retention', { ...env(), FAULT_POINT: 'retention.before_commit' }, [
      '--no-export',
    ]);
    expect(await crashed.exited).toEqual({ code: null, signal: 'SIGKILL' });
    expect(crashed.stderr.join('')).toContain(
      'FAULT_POINT retention.before_commit: killing process',
    );
    // The transaction died with the process: the month is whole, and recorded nowhere as dropped.
    expect(await hasMarch()).toBe(true);
    expect(await pushesOf(t.db, w.marchHeads)).toEqual(before);
    expect(await keysOfMarch()).toBe(6);
    // Verified before the drop began, and recorded so (the process died before April's turn).
    expect(await recorded()).toEqual([{ month: '2015-03', state: 'exported' }]);

    const again = spawnBin('retention', env(), ['--no-export', '--json']);
    expect(await again.exited).toEqual({ code: 0, signal: null });
    const report = JSON.parse(again.stdout.join(''));
    expect(
      report.months.map((m: { month: string; action: string }) => [m.month, m.action]),
    ).toEqual([
      ['2015-03', 'dropped'],
      ['2015-04', 'kept'],
    ]);
    expect(await hasMarch()).toBe(false);
    expect(await pushesOf(t.db, w.marchHeads)).toEqual([]);
    expect(await keysOfMarch()).toBe(0);
    expect(await pushesOf(t.db, w.aprilHeads)).toHaveLength(1);
    expect(await recorded()).toEqual([
      { month: '2015-03', state: 'dropped' },
      { month: '2015-04', state: 'kept' },
    ]);
  });
});
