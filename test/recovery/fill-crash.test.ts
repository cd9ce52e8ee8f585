import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hourOf } from '../../src/store/archive-hours.ts';
import { addSource } from '../../src/store/sources.ts';
import { type ArchiveServer, startArchiveServer } from '../support/archive-server.ts';
import { useTestDatabase } from '../support/db.ts';
import { type FakeGitHub, startFakeGitHub } from '../support/fake-github.ts';
import { pushEvent } from '../support/github-factories.ts';
import { type LogLine, waitFor } from './helpers.ts';
import { type Child, killAll, spawnBin } from './world.ts';

/**
 * A fill that dies is a fill that backs off (ADR 0061), with real
 * processes: bin/worker fills gaps in a child process; the test SIGKILLs that child in the
 * middle of its download, twice. The attempt was counted and its backoff committed before
 * the download started, so the next start does not retry at once; after the second death
 * the gap is `unavailable` with the reason; and the worker polls on throughout.
 */

const t = useTestDatabase();
const children: Child[] = [];
let fake: FakeGitHub;
let archive: ArchiveServer;

beforeAll(async () => {
  fake = await startFakeGitHub({ pollInterval: 1 });
  archive = await startArchiveServer();
});
afterAll(async () => {
  await killAll(children);
  await fake?.close();
  await archive?.close();
});

interface GapRow {
  state: string;
  attempts: number;
  fill_deaths: number;
  open_attempt: boolean;
  backed_off: boolean;
  last_error: string | null;
}

async function gapRow(id: number): Promise<GapRow> {
  const r = await sql<GapRow>`
    SELECT state, attempts, fill_deaths, fill_started_at IS NOT NULL AS open_attempt,
           next_attempt_at > now() AS backed_off, last_error
    FROM gaps WHERE id = ${id}`.execute(t.db);
  return r.rows[0]!;
}

/** The time passes: the backoff after an attempt is over (a clock cannot be injected into a child). */
async function backoffElapses(id: number): Promise<void> {
  await sql`UPDATE gaps SET next_attempt_at = now() WHERE id = ${id}`.execute(t.db);
}

describe('a gap fill SIGKILLed mid-download', () => {
  it('counts the attempt first, backs off, is unavailable after two deaths, and polling goes on', {
    // A worker, two fill children and five polls under a loaded machine: past the default 30 s.
    timeout: 180_000,
  }, async () => {
    const gapped = { id: 6_910_001, name: 'crash-owner/gapped' };
    const healthy = { id: 6_910_002, name: 'crash-owner/healthy' };
    await addSource(t.db, { kind: 'repo', target: gapped.name }, 'live');
    const { source: other } = await addSource(t.db, { kind: 'repo', target: healthy.name }, 'live');
    // Two days ago: plausible, and every archive hour of the window is long published.
    const t0 = hourOf(new Date(Date.now() - 2 * 86_400_000)).start.getTime();
    let id = 82_000_000_000;
    const first = Array.from({ length: 10 }, (_, i) =>
      pushEvent({ id: id++, repo: gapped, created_at: new Date(t0 + i * 60_000) }),
    );
    const later = Array.from({ length: 320 }, (_, i) =>
      pushEvent({ id: id++, repo: gapped, created_at: new Date(t0 + 20 * 60_000 + i * 10_000) }),
    );
    // Every hour the fill reads answers nothing, ever: the fill is mid-download when killed.
    for (let h = -2; h <= 4; h++) {
      archive.fail(hourOf(new Date(t0 + h * 3_600_000)).name, { hang: true, times: Infinity });
    }
    fake.addEvents(`repo:${gapped.name}`, first);
    const worker = spawnBin('worker', {
      // Idle jobs log job.completed at debug: a backfill job finding nothing due is waited for.
      LOG_LEVEL: 'debug',
      DATABASE_URL: t.url,
      GITHUB_MODE: 'live',
      GITHUB_API_URL: fake.url,
      GITHUB_TOKEN: 'ghp_recovery_fill_crash_sentinel',
      GHARCHIVE_URL: archive.url,
      TICK_SECONDS: '1',
    });
    children.push(worker);
    const workerPid = worker.process.pid!;
    await worker.waitForLine(
      (l) => l.event === 'ingestion.run_completed' && l.events_created === 10,
      'the first poll',
      30_000,
    );
    fake.addEvents(`repo:${gapped.name}`, later);
    const recorded = await worker.waitForLine((l) => l.event === 'gap.recorded', 'the gap', 60_000);
    const gapId = Number(recorded.gap_id);

    let pollsSeen = 0;
    /** A poll of the healthy source stores what was just added: polling carried on. */
    const pollStores = async (n: number) => {
      const evs = Array.from({ length: n }, () => pushEvent({ id: id++, repo: healthy }));
      fake.addEvents(`repo:${healthy.name}`, evs);
      const from = worker.lines.length;
      await worker.waitForLine(
        (l) =>
          worker.lines.indexOf(l) >= from &&
          l.event === 'ingestion.run_completed' &&
          l.source_id === Number(other.id) &&
          l.events_created === n,
        'a poll of the healthy source',
        30_000,
      );
      pollsSeen++;
    };
    const since = (from: number, pred: (l: LogLine) => boolean) => (l: LogLine) =>
      worker.lines.indexOf(l) >= from && pred(l);

    // Death 1.
    const started1 = await worker.waitForLine(
      (l) => l.event === 'gap.fill_started' && l.gap_id === gapId,
      'the first fill attempt',
      30_000,
    );
    expect(started1).toMatchObject({ attempt: 1, deaths: 0, queue: 'backfill' });
    const fillPid1 = Number(started1.pid);
    expect(fillPid1).not.toBe(workerPid); // the fill runs in a child process
    // Counted and backed off before the first byte was read.
    expect(await gapRow(gapId)).toMatchObject({
      state: 'open',
      attempts: 1,
      open_attempt: true,
      backed_off: true,
    });
    let mark = worker.lines.length;
    process.kill(fillPid1, 'SIGKILL');
    await worker.waitForLine(
      since(mark, (l) => l.event === 'backfill.fill_died' && l.signal === 'SIGKILL'),
      'the worker to see its fill die',
    );
    // The next start does not retry at once: backfill jobs keep running every tick and find
    // nothing due.
    await worker.waitForLine(
      since(
        mark,
        (l) => l.event === 'job.completed' && l.queue === 'backfill' && l.outcome === 'nothing_due',
      ),
      'a backfill job after the death',
    );
    await pollStores(3);
    expect(worker.lines.filter((l) => l.event === 'gap.fill_started')).toHaveLength(1);
    expect(await gapRow(gapId)).toMatchObject({
      state: 'open',
      attempts: 1,
      fill_deaths: 0,
      open_attempt: true,
      backed_off: true,
    });

    // Death 2: the next attempt finds the first one's death, opens attempt 2, and dies too.
    mark = worker.lines.length;
    await backoffElapses(gapId);
    const died1 = await worker.waitForLine(
      since(mark, (l) => l.event === 'gap.fill_died' && l.gap_id === gapId),
      'the first death to be found',
      30_000,
    );
    expect(died1).toMatchObject({ deaths: 1, attempts: 1 });
    const started2 = await worker.waitForLine(
      since(mark, (l) => l.event === 'gap.fill_started' && l.gap_id === gapId),
      'the second fill attempt',
      30_000,
    );
    expect(started2).toMatchObject({ attempt: 2, deaths: 1 });
    expect(await gapRow(gapId)).toMatchObject({ attempts: 2, fill_deaths: 1, backed_off: true });
    mark = worker.lines.length;
    process.kill(Number(started2.pid), 'SIGKILL');
    await worker.waitForLine(
      since(mark, (l) => l.event === 'backfill.fill_died'),
      'the second death',
    );
    await pollStores(2);

    // The third start finds two deaths: unavailable with the reason, not tried again.
    mark = worker.lines.length;
    await backoffElapses(gapId);
    const gone = await worker.waitForLine(
      since(mark, (l) => l.event === 'gap.unavailable' && l.gap_id === gapId),
      'the gap to be given up',
      30_000,
    );
    expect(gone.reason).toMatch(
      /^the fill died 2 times before it ended \(killed, or out of memory\), last while importing archive hour \d{4}-\d{2}-\d{2}-\d{1,2}; not retried$/,
    );
    const row = await gapRow(gapId);
    expect(row).toMatchObject({
      state: 'unavailable',
      attempts: 2, // no third attempt was opened
      fill_deaths: 2,
      open_attempt: false,
    });
    expect(row.last_error).toBe(gone.reason);
    await pollStores(1);
    expect(pollsSeen).toBe(3);

    // The worker itself never died: it stops as asked.
    expect(worker.process.exitCode).toBeNull();
    worker.process.kill('SIGTERM');
    expect((await worker.exited).code).toBe(0);
    // Every push the healthy source was served is stored once.
    const stored = await sql<{ n: string }>`
      SELECT count(*) AS n FROM push_events WHERE repository_id = ${healthy.id}`.execute(t.db);
    expect(Number(stored.rows[0]!.n)).toBe(6);
  });

  it('a fill child outlives neither a stopping worker nor a killed one, and a stop is no death', {
    timeout: 180_000,
  }, async () => {
    const repo = { id: 6_910_101, name: 'crash-owner/stopped' };
    const { source } = await addSource(t.db, { kind: 'repo', target: repo.name }, 'live');
    const to = hourOf(new Date(Date.now() - 3 * 86_400_000)).start;
    const gap = await t.db
      .insertInto('gaps')
      .values({ source_id: source.id, from_at: new Date(to.getTime() - 600_000), to_at: to })
      .returning('id')
      .executeTakeFirstOrThrow();
    for (let h = -2; h <= 3; h++) {
      archive.fail(hourOf(new Date(to.getTime() + h * 3_600_000)).name, {
        hang: true,
        times: Infinity,
      });
    }
    const env = {
      DATABASE_URL: t.url,
      GITHUB_MODE: 'live',
      GITHUB_API_URL: fake.url,
      GITHUB_TOKEN: 'ghp_recovery_fill_stop_sentinel',
      GHARCHIVE_URL: archive.url,
      TICK_SECONDS: '1',
    };
    const alive = (pid: number) => {
      try {
        process.kill(pid, 0);
        return true;
      } catch {
        return false;
      }
    };
    for (const how of ['SIGTERM', 'SIGKILL'] as const) {
      const worker = spawnBin('worker', env);
      children.push(worker);
      const started = await worker.waitForLine(
        (l) => l.event === 'gap.fill_started' && l.gap_id === Number(gap.id),
        `the fill (${how})`,
        60_000,
      );
      const fillPid = Number(started.pid);
      worker.process.kill(how);
      const exited = await worker.exited;
      if (how === 'SIGTERM') expect(exited.code).toBe(0);
      // The child stops after its chunk in flight: asked by a stopping worker, or by the
      // IPC channel closing with a dead one — never left holding the gap's lock.
      await waitFor(() => !alive(fillPid), { timeoutMs: 30_000, what: `fill ${fillPid} to end` });
      // A stop gives the attempt back: no death, no backoff, due again at once.
      expect(await gapRow(Number(gap.id))).toMatchObject({
        state: 'open',
        attempts: 0,
        fill_deaths: 0,
        open_attempt: false,
        backed_off: false,
      });
    }
  });
});
