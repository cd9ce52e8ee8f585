import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateHourFile } from '../../bench/lib/archive-gen.ts';
import { hourOf } from '../../src/store/archive-hours.ts';
import { addSource } from '../../src/store/sources.ts';
import { type ArchiveServer, startArchiveServer } from '../support/archive-server.ts';
import { useTestDatabase } from '../support/db.ts';
import { type FakeGitHub, startFakeGitHub } from '../support/fake-github.ts';
import { type GitHubEvent, pushEvent } from '../support/github-factories.ts';
import { waitFor } from './helpers.ts';
import { type Child, killAll, spawnBin } from './world.ts';

/**
 * Backfill under real failures, with real processes:
 * - bin/backfill SIGKILLed in the middle of a file (no handler, no finally), then run
 *   again: it resumes after its last committed chunk and every push is stored once;
 * - bin/worker alone, nobody typing anything: a poll overflows its feed, the gap is
 *   recorded, and the worker's backfill job fills it from the (local) archive.
 */

const t = useTestDatabase();
const children: Child[] = [];
let dir: string;
let fake: FakeGitHub;
let archive: ArchiveServer;

beforeAll(async () => {
  dir = mkdtempSync(path.join(tmpdir(), 'gpi-backfill-kill-'));
  fake = await startFakeGitHub({ pollInterval: 1 });
  archive = await startArchiveServer();
});
afterAll(async () => {
  await killAll(children);
  await fake?.close();
  await archive?.close();
  rmSync(dir, { recursive: true, force: true });
});

async function scalar(q: ReturnType<typeof sql<{ n: string }>>): Promise<number> {
  return Number((await q.execute(t.db)).rows[0]!.n);
}

describe('bin/backfill killed mid-file', () => {
  // A 120,000-event file generated and read twice: 25-30 s on a loaded 2-core machine, so the
  // default 30 s is a bound this test brushed; every wait inside is on a signal.
  it('resumes after its last committed chunk: every push stored exactly once', {
    timeout: 180_000,
  }, async () => {
    const file = path.join(dir, '2026-11-18-7.json.gz');
    const generated = await generateHourFile(file, {
      events: 120_000,
      hourStart: new Date('2026-11-18T07:00:00Z'),
      firstEventId: 80_000_000_000,
    });
    const env = { DATABASE_URL: t.url, LOG_LEVEL: 'info' };
    const first = spawnBin('backfill', env, [file]);
    children.push(first);
    // Kill it once a chunk is committed, while the file is far from done.
    const killedAt = await waitFor(
      async () => {
        const r = await sql<{ lines_done: string; state: string }>`
          SELECT lines_done, state FROM backfill_files WHERE file = ${file}`.execute(t.db);
        const done = Number(r.rows[0]?.lines_done ?? 0);
        return done > 0 ? done : null;
      },
      { timeoutMs: 60_000, intervalMs: 10, what: 'the first committed chunk' },
    );
    first.process.kill('SIGKILL');
    expect(await first.exited).toEqual({ code: null, signal: 'SIGKILL' });
    expect(killedAt).toBeLessThan(generated.events);

    const dead = await sql<{ state: string; lines_done: string; pushes_created: string }>`
      SELECT state, lines_done, pushes_created FROM backfill_files WHERE file = ${file}`.execute(
      t.db,
    );
    const checkpoint = dead.rows[0]!;
    expect(checkpoint.state).toBe('running'); // left by a process that died
    const storedAtDeath = await scalar(sql`SELECT count(*) AS n FROM push_events`);
    // The checkpoint says exactly what is in the database.
    expect(storedAtDeath).toBe(Number(checkpoint.pushes_created));
    expect(Number(checkpoint.lines_done)).toBeLessThan(generated.events);

    const second = spawnBin('backfill', env, [file]);
    children.push(second);
    expect(await second.exited).toEqual({ code: 0, signal: null });
    const out = second.stdout.join('');
    const resumedAt = (Number(checkpoint.lines_done) + 1).toLocaleString('en-US');
    expect(out).toMatch(/: completed: /);
    expect(out).toContain(`(resumed at line ${resumedAt})`);
    // The checkpoint the killed run left running was recognised as its death, once.
    expect(second.lines.filter((l) => l.event === 'backfill.file_died')).toEqual([
      expect.objectContaining({ lines_done: Number(checkpoint.lines_done), deaths: 1 }),
    ]);

    expect(await scalar(sql`SELECT count(*) AS n FROM push_events`)).toBe(generated.pushes);
    expect(await scalar(sql`SELECT count(DISTINCT id) AS n FROM push_events`)).toBe(
      generated.pushes,
    );
    const finished = await sql<{ state: string; lines_done: string; pushes_created: string }>`
      SELECT state, lines_done, pushes_created FROM backfill_files WHERE file = ${file}`.execute(
      t.db,
    );
    expect(finished.rows[0]).toEqual({
      state: 'completed',
      lines_done: String(generated.events),
      pushes_created: String(generated.pushes),
    });

    // And once more: nothing to do, nothing added.
    const third = spawnBin('backfill', env, [file]);
    children.push(third);
    expect(await third.exited).toEqual({ code: 0, signal: null });
    expect(third.stdout.join('')).toMatch(/already imported/);
    expect(await scalar(sql`SELECT count(*) AS n FROM push_events`)).toBe(generated.pushes);
  });
});

describe('bin/worker on its own', () => {
  it('records the gap of an overflowing poll and fills it from the archive, without a command', async () => {
    const repo = { id: 6_900_001, name: 'worker-owner/gapped' };
    await addSource(t.db, { kind: 'repo', target: repo.name }, 'live');
    // Two days ago: plausible times (ADR 0061) and every archive hour long published.
    const t0 = hourOf(new Date(Date.now() - 2 * 86_400_000)).start.getTime();
    let id = 81_000_000_000;
    const first = Array.from({ length: 10 }, (_, i) =>
      pushEvent({ id: id++, repo, created_at: new Date(t0 + i * 60_000) }),
    );
    const later = Array.from({ length: 320 }, (_, i) =>
      pushEvent({ id: id++, repo, created_at: new Date(t0 + 20 * 60_000 + i * 10_000) }),
    );
    // The archive holds the whole timeline, filed by hour.
    const hours = new Map<string, GitHubEvent[]>();
    for (const e of [...first, ...later]) {
      const h = hourOf(new Date(e.created_at)).name;
      hours.set(h, [...(hours.get(h) ?? []), e]);
    }
    for (const h of [-1, 2].map((n) => hourOf(new Date(t0 + n * 3_600_000)).name)) {
      hours.set(h, hours.get(h) ?? []);
    }
    for (const [h, evs] of hours) archive.setHour(h, evs);

    fake.addEvents(`repo:${repo.name}`, first);
    const worker = spawnBin('worker', {
      DATABASE_URL: t.url,
      GITHUB_MODE: 'live',
      GITHUB_API_URL: fake.url,
      GITHUB_TOKEN: 'ghp_recovery_backfill_sentinel',
      GHARCHIVE_URL: archive.url,
      TICK_SECONDS: '1',
    });
    children.push(worker);
    await worker.waitForLine(
      (l) => l.event === 'ingestion.run_completed' && l.events_created === 10,
      'the first poll',
      30_000,
    );
    fake.addEvents(`repo:${repo.name}`, later);
    const recorded = await worker.waitForLine(
      (l) => l.event === 'gap.recorded',
      'the gap to be recorded',
      30_000,
    );
    const filled = await worker.waitForLine(
      (l) => l.event === 'gap.filled',
      'the gap to be filled',
      30_000,
    );
    expect(filled).toMatchObject({
      gap_id: recorded.gap_id,
      events_recovered: 20,
      queue: 'backfill',
    });
    expect(typeof filled.job_id).toBe('string');

    const stored = await sql<{ id: string }>`
      SELECT id::text AS id FROM push_events WHERE repository_id = ${repo.id} ORDER BY id`.execute(
      t.db,
    );
    expect(stored.rows.map((r) => r.id)).toEqual([...first, ...later].map((e) => e.id).sort());
    const gap = await sql<{ state: string; events_recovered: number }>`
      SELECT state, events_recovered FROM gaps WHERE id = ${recorded.gap_id}`.execute(t.db);
    expect(gap.rows[0]).toEqual({ state: 'filled', events_recovered: 20 });
    // The archive is not GitHub: its downloads are not in the request ledger.
    const paths = await sql<{ path: string }>`SELECT DISTINCT path FROM github_requests`.execute(
      t.db,
    );
    expect(paths.rows.every((r) => !r.path.includes('json.gz'))).toBe(true);

    worker.process.kill('SIGTERM');
    expect((await worker.exited).code).toBe(0);
  });
});
