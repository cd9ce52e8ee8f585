import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { archivePlace } from '../../src/export/archive-place.ts';
import { checkMonth, monthChanges } from '../../src/export/month-check.ts';
import { runRetention } from '../../src/jobs/month-retention.ts';
import { loadConfig } from '../../src/platform/config/config.ts';
import { readStatus } from '../../src/status/model.ts';
import { renderText } from '../../src/status/render-text.ts';
import { dropMonth, parseMonth } from '../../src/store/history-months.ts';
import { runBin } from '../support/cli.ts';
import { useTestDatabase } from '../support/db.ts';
import { memoryLogger } from '../support/github-client.ts';
import { pushEvent, sha } from '../support/github-factories.ts';
import {
  buildHistoryWorld,
  type HistoryWorld,
  importHourLines,
  pushesOf,
} from '../support/history-world.ts';

/**
 * Retention end to end (ADR 0201), against real partitions: an old month is never dropped
 * while an hour of it is not exported, nor when it is written to between its check and its
 * drop; once every hour is verified, its partition and keys go in one transaction and the
 * record stays; status shows each month's bytes; and bin/backfill reads the dropped month
 * back from the exported JSON hours, the same pushes with the same commits.
 */

const t = useTestDatabase();
let w: HistoryWorld;
let dir: string;
const march = parseMonth('2015-03')!;
// Mid-April 2015 with HISTORY_MONTHS=1: April is kept, March is past the window.
const now = new Date('2015-04-15T12:00:00Z');
let before: Awaited<ReturnType<typeof pushesOf>>;

const config = () => loadConfig({ HISTORY_MONTHS: '1', ARCHIVE_DIR: dir });
const partitions = async () =>
  (
    await sql<{ name: string }>`
      SELECT c.relname AS name FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
      WHERE i.inhparent = 'push_events'::regclass ORDER BY 1`.execute(t.db)
  ).rows.map((r) => r.name);
const keysOfMarch = async () =>
  Number(
    (
      await sql<{ n: string }>`SELECT count(*) AS n FROM push_keys
        WHERE created_at >= '2015-03-01Z' AND created_at < '2015-04-01Z'`.execute(t.db)
    ).rows[0]!.n,
  );
const historyRow = async () =>
  (
    await sql<{
      state: string;
      reason: string | null;
      pushes: string | null;
      bytes: string | null;
    }>`
      SELECT state, reason, pushes::text, bytes::text FROM history_months
      WHERE month = '2015-03-01'`.execute(t.db)
  ).rows[0];

beforeAll(async () => {
  w = await buildHistoryWorld(t);
  before = await pushesOf(t.db, w.marchHeads);
  dir = mkdtempSync(path.join(tmpdir(), 'gpi-history-retention-'));
});
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

describe('retention of push history', () => {
  it('keeps an old month none of whose hours is exported, and says which and why', async () => {
    expect(before).toHaveLength(6);
    expect(before.every((p) => (p.shas?.length ?? 0) === p.commit_count)).toBe(true);
    const { logger, lines } = memoryLogger('info');
    const r = await runRetention(
      { db: t.db, config: config(), logger },
      { now, exportMissing: false },
    );
    expect(r.firstKept).toBe('2015-04');
    expect(r.months.map((m) => [m.month, m.action])).toEqual([['2015-03', 'kept']]);
    expect(r.months[0]!.problem).toMatchObject({ hour: '2015-03-01-0', problem: 'missing' });
    const logged = lines
      .map((l) => JSON.parse(l))
      .find((l) => l.event === 'retention.kept_unexported');
    expect(logged).toMatchObject({ month: '2015-03', hour: '2015-03-01-0', problem: 'missing' });
    expect(await partitions()).toContain('push_events_2015_03');
    expect(await historyRow()).toMatchObject({ state: 'kept' });
    expect((await historyRow())!.reason).toContain('2015-03-01-0');
  });

  it('bin/export --month writes every hour of the month into ARCHIVE_DIR', {
    timeout: 300_000,
  }, async () => {
    const r = await runBin('export', ['--month', '2015-03', '--json'], {
      DATABASE_URL: t.url,
      ARCHIVE_DIR: dir,
      LOG_LEVEL: 'warn',
    });
    expect(r.code, r.err).toBe(0);
    const files = JSON.parse(r.out).files as { ok: boolean; pushes: number }[];
    expect(files).toHaveLength(31 * 24);
    expect(files.every((f) => f.ok)).toBe(true);
    expect(files.reduce((n, f) => n + f.pushes, 0)).toBe(6);
    expect(readdirSync(dir).filter((f) => f.endsWith('.manifest.json'))).toHaveLength(31 * 24);
  });

  it('a dry run says it would drop the month, and drops nothing', {
    timeout: 300_000,
  }, async () => {
    const r = await runRetention(
      { db: t.db, config: config(), logger: memoryLogger('silent').logger },
      { now, dryRun: true },
    );
    expect(r.months).toMatchObject([{ month: '2015-03', action: 'would_drop', pushes: 6 }]);
    expect(await partitions()).toContain('push_events_2015_03');
    expect(await historyRow()).toMatchObject({ state: 'kept' });
  });

  it('never drops a month written to between its check and its drop', {
    timeout: 300_000,
  }, async () => {
    const check = await checkMonth(t.db, march, [archivePlace(dir)], { now });
    expect(check.problem).toBeNull();
    // A push stored after the check, before the drop: the drop's lock finds the month changed.
    const hour = { name: '2015-03-09-9', start: new Date('2015-03-09T09:00:00Z') };
    const late = pushEvent({
      id: 2_655_555_555,
      repo: { id: 8_800_000, name: 'history-org/repo-0' },
      created_at: new Date(hour.start.getTime() + 60_000),
      payload: { head: sha('late-between'), size: 0, distinct_size: 0, commits: [] },
    });
    await importHourLines(t, hour, [late]);
    const dropped = await dropMonth(t.db, {
      month: march,
      pushes: check.pushes,
      exportedTo: dir,
      verifiedAt: check.verifiedAt,
      stillVerified: async (q) =>
        (await monthChanges(q, march)) === check.changes ? null : 'written to since',
    });
    expect(dropped).toEqual({ dropped: false, reason: 'written to since' });
    expect(await partitions()).toContain('push_events_2015_03');
    expect(await pushesOf(t.db, [late.payload.head as string])).toHaveLength(1);
    // Gone again (as if never stored), the month is what was exported once more.
    await sql`DELETE FROM push_events WHERE head = ${late.payload.head as string}`.execute(t.db);
  });

  it('drops a month once every hour is verified: partition, keys and a record, one transaction', {
    timeout: 300_000,
  }, async () => {
    expect(await keysOfMarch()).toBe(6);
    const { logger, lines } = memoryLogger('info');
    const r = await runRetention({ db: t.db, config: config(), logger }, { now });
    expect(r.months).toMatchObject([
      { month: '2015-03', action: 'dropped', pushes: 6, exportedHours: 0 },
    ]);
    expect(r.months[0]!.bytes).toBeGreaterThan(0);
    expect(await partitions()).not.toContain('push_events_2015_03');
    expect(await partitions()).toContain('push_events_2015_04');
    expect(await pushesOf(t.db, w.marchHeads)).toEqual([]);
    expect(await keysOfMarch()).toBe(0);
    expect(await pushesOf(t.db, w.aprilHeads)).toHaveLength(1);
    const row = await historyRow();
    expect(row).toMatchObject({ state: 'dropped', reason: null, pushes: '6' });
    expect(Number(row!.bytes)).toBe(r.months[0]!.bytes);
    const logged = lines
      .map((l) => JSON.parse(l))
      .find((l) => l.event === 'retention.month_dropped');
    expect(logged).toMatchObject({
      month: '2015-03',
      pushes: 6,
      bytes: r.months[0]!.bytes,
      exported_to: dir,
    });
    // Commits stay: they are shared across months.
    const commits = await sql<{ n: string }>`SELECT count(*) AS n FROM commits
      WHERE sha = ANY(${before.flatMap((p) => p.shas ?? [])})`.execute(t.db);
    expect(Number(commits.rows[0]!.n)).toBe(12);
  });

  it('status shows the months kept and dropped, with their bytes', async () => {
    const report = await readStatus({ db: t.db, config: config() }, undefined);
    const h = report.history;
    expect(h.historyMonths).toBe(1);
    const byMonth = new Map(h.months.map((m) => [m.month, m]));
    expect(byMonth.get('2015-03')).toMatchObject({ state: 'dropped', pushes: 6, exportedTo: dir });
    expect(byMonth.get('2015-03')!.bytes).toBe(Number((await historyRow())!.bytes));
    expect(byMonth.get('2015-04')).toMatchObject({ state: 'kept' });
    const april = await sql<{ bytes: string }>`
      SELECT pg_total_relation_size('push_events_2015_04')::text AS bytes`.execute(t.db);
    expect(byMonth.get('2015-04')!.bytes).toBe(Number(april.rows[0]!.bytes));
    expect(h.totals.dropped).toEqual({ months: 1, bytes: byMonth.get('2015-03')!.bytes });
    const text = renderText(report);
    expect(text).toMatch(/History: .*1 dropped/);
    expect(text).toMatch(/2015-03 +dropped/);
  });

  it('bin/backfill reads the dropped month back from the JSON hours: the same pushes and commits', {
    timeout: 600_000,
  }, async () => {
    const hours = readdirSync(dir)
      .filter((f) => /^2015-03-\d{2}-\d{1,2}\.json\.gz$/.test(f))
      .map((f) => path.join(dir, f));
    expect(hours).toHaveLength(31 * 24);
    const r = await runBin('backfill', [...hours, '--json'], {
      DATABASE_URL: t.url,
      LOG_LEVEL: 'warn',
    });
    expect(r.code, r.err).toBe(0);
    expect(await partitions()).toContain('push_events_2015_03');
    const after = await pushesOf(t.db, w.marchHeads);
    expect(after).toEqual(before);
    expect(await keysOfMarch()).toBe(6);
  });
});
