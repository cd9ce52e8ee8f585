import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { localFileSource } from '../../src/backfill/archive.ts';
import { interruptDeadImports } from '../../src/backfill/checkpoints.ts';
import { fillGap, fillGaps } from '../../src/backfill/fill.ts';
import { importFile } from '../../src/backfill/import.ts';
import type { GitHubClient } from '../../src/budget/client-types.ts';
import { handleBackfill } from '../../src/jobs/handlers.ts';
import type { Logger } from '../../src/platform/log.ts';
import { pollSource } from '../../src/poll/poll-source.ts';
import { hourOf } from '../../src/store/archive-hours.ts';
import { BEFORE_FEED_REASON } from '../../src/store/gaps.ts';
import { addSource } from '../../src/store/sources.ts';
import { type ArchiveServer, gzipLines, startArchiveServer } from '../support/archive-server.ts';
import { useTestDatabase } from '../support/db.ts';
import { type FakeGitHub, startFakeGitHub } from '../support/fake-github.ts';
import { clientFactory, memoryLogger, testConfig } from '../support/github-client.ts';
import { type GitHubEvent, pushEvent } from '../support/github-factories.ts';
import { waitFor } from '../support/wait.ts';

/**
 * Plausible time and fills that back off (ADR 0061), against a real
 * poll, a local GH Archive and the real database: an implausible created_at never decides
 * a gap, a gap window is bounded, a fill's attempt is committed before it reads, and the
 * backfill job says how its gaps really ended.
 */

const t = useTestDatabase();
const clients = clientFactory(t);
let fake: FakeGitHub;
let archive: ArchiveServer;
let github: GitHubClient;
let dir: string;

beforeAll(async () => {
  fake = await startFakeGitHub();
  archive = await startArchiveServer();
  dir = mkdtempSync(path.join(tmpdir(), 'gpi-gap-time-'));
});
beforeEach(() => {
  fake.reset();
  github = clients.make({ apiUrl: fake.url });
});
afterEach(async () => {
  await clients.closeAll();
});
afterAll(async () => {
  await fake.close();
  await archive.close();
  rmSync(dir, { recursive: true, force: true });
});

const MIN = 60_000;
const DAY = 86_400_000;

function deps(o: { logger?: Logger } = {}) {
  return {
    config: testConfig(t, { apiUrl: fake.url, env: { GHARCHIVE_URL: archive.url } }),
    db: t.db,
    pool: t.pool,
    github,
    logger: o.logger ?? memoryLogger('silent').logger,
    workerId: 'test-host:1',
  };
}

let seq = 0;
let nextId = 73_000_000_000;

/**
 * The red team's case: a repo source polled once (10 pushes, the newest of them dated
 * `rogue`), then 320 more arrive before the next poll, which overflows the feed. The good
 * pushes are from `daysAgo` days ago, filed in the archive by their hours.
 */
async function overflowWithRogue(rogue: string, daysAgo: number, logger?: Logger) {
  seq++;
  const repo = { id: 6_300_000 + seq, name: `time-owner-${seq}/time-repo` };
  const { source } = await addSource(t.db, { kind: 'repo', target: repo.name }, 'live');
  const t0 = hourOf(new Date(Date.now() - daysAgo * DAY)).start.getTime();
  const first = Array.from({ length: 10 }, (_, i) =>
    pushEvent({ id: nextId++, repo, created_at: new Date(t0 + i * MIN) }),
  );
  first[9]!.created_at = rogue;
  const later = Array.from({ length: 320 }, (_, i) =>
    pushEvent({ id: nextId++, repo, created_at: new Date(t0 + 20 * MIN + i * 10_000) }),
  );
  const feed = `repo:${repo.name}`;
  fake.addEvents(feed, first);
  await pollSource(deps(), Number(source.id), { force: true });
  fake.addEvents(feed, later);
  const run = await pollSource(deps({ logger }), Number(source.id), { force: true });
  expect(run).toMatchObject({ outcome: 'completed', gap: true });
  const gaps = await t.db
    .selectFrom('gaps')
    .selectAll()
    .where('run_id', '=', String(run.runId))
    .orderBy('from_at')
    .execute();
  // The archive holds the good pushes by their hours (the rogue one nowhere).
  const hours = new Map<string, GitHubEvent[]>();
  for (const e of [...first.slice(0, 9), ...later]) {
    const h = hourOf(new Date(e.created_at)).name;
    hours.set(h, [...(hours.get(h) ?? []), e]);
  }
  for (let h = -2; h <= 4; h++) {
    const name = hourOf(new Date(t0 + h * 3_600_000)).name;
    archive.setHour(name, hours.get(name) ?? []);
  }
  return { repo, first, later, gaps, t0 };
}

async function stored(repoId: number): Promise<number> {
  const r = await sql<{ n: string }>`
    SELECT count(*) AS n FROM push_events WHERE repository_id = ${repoId}`.execute(t.db);
  return Number(r.rows[0]!.n);
}

describe('an implausible created_at', () => {
  it('dated 2099 does not decide the gap: its window is now, and every good push is stored', async () => {
    const { logger, lines } = memoryLogger('warn');
    const s = await overflowWithRogue('2099-12-31T12:00:00Z', 3, logger);
    expect(s.gaps).toHaveLength(1);
    const gap = s.gaps[0]!;
    // From the newest plausible push held to the oldest read: what was really missed.
    expect(gap.from_at).toEqual(new Date(s.first[8]!.created_at));
    expect(gap.to_at).toEqual(new Date(s.later[20]!.created_at));
    expect(gap.next_attempt_at.getTime()).toBeLessThan(Date.now());
    const logged = lines.map((l) => JSON.parse(l));
    expect(logged.find((l) => l.event === 'gap.time_untrusted')).toMatchObject({ pushes: 1 });
    expect(logged.find((l) => l.event === 'gap.recorded')).toMatchObject({ untrusted_times: 1 });

    const filled = await fillGap(deps(), Number(gap.id));
    expect(filled).toMatchObject({ outcome: 'filled', eventsRecovered: 20 });
    // 10 + 320 served, every one stored once (the rogue one by the poll that read it).
    expect(await stored(s.repo.id)).toBe(330);
  });

  it('dated 2012 does not make a 14-year gap: a few archive hours are read, not 129,000', async () => {
    const s = await overflowWithRogue('2012-03-01T00:00:00Z', 4);
    expect(s.gaps).toHaveLength(1);
    const gap = s.gaps[0]!;
    expect(gap.from_at).toEqual(new Date(s.first[8]!.created_at));
    const before = archive.requests.length;
    expect(await fillGap(deps(), Number(gap.id))).toMatchObject({
      outcome: 'filled',
      eventsRecovered: 20,
    });
    expect(archive.requests.length - before).toBeLessThanOrEqual(5);
    expect(await stored(s.repo.id)).toBe(330);
  });
});

async function insertGap(sourceId: string, from: Date, to: Date, nextAttemptAt = new Date()) {
  return t.db
    .insertInto('gaps')
    .values({ source_id: sourceId, from_at: from, to_at: to, next_attempt_at: nextAttemptAt })
    .returningAll()
    .executeTakeFirstOrThrow();
}

async function newSource(): Promise<string> {
  seq++;
  const { source } = await addSource(
    t.db,
    { kind: 'repo', target: `legacy-owner-${seq}/legacy` },
    'live',
  );
  return source.id;
}

describe('a gap recorded before windows were bounded', () => {
  it('spanning 14 years is split: pieces of 2 days, and what is older than 30 days unavailable', async () => {
    const sourceId = await newSource();
    const to = hourOf(new Date(Date.now() - 3 * DAY)).start;
    const gap = await insertGap(sourceId, new Date('2012-03-01T00:00:00Z'), to);
    for (let h = -60; h <= 4; h++)
      archive.setHour(hourOf(new Date(to.getTime() + h * 3_600_000)).name, []);
    const { logger, lines } = memoryLogger('warn');
    const before = archive.requests.length;
    const r = await fillGap(deps({ logger }), Number(gap.id));
    expect(r.outcome).toBe('filled');
    // One bounded window read: at most 2 days and the fill's margins (1 h before, 2 h after).
    expect(archive.requests.length - before).toBeLessThanOrEqual(48 + 4);
    const pieces = await t.db
      .selectFrom('gaps')
      .selectAll()
      .where('source_id', '=', sourceId)
      .orderBy('from_at')
      .execute();
    expect(pieces[0]).toMatchObject({ state: 'unavailable', last_error: BEFORE_FEED_REASON });
    expect(pieces[0]!.from_at).toEqual(new Date('2012-03-01T00:00:00Z'));
    expect(pieces.at(-1)).toMatchObject({ id: gap.id, state: 'filled' });
    expect(pieces.at(-1)!.to_at).toEqual(to);
    for (const [i, p] of pieces.entries()) {
      if (i > 0) expect(p.from_at).toEqual(pieces[i - 1]!.to_at);
      if (p.state !== 'unavailable') {
        expect(p.to_at.getTime() - p.from_at.getTime()).toBeLessThanOrEqual(2 * DAY);
      }
    }
    // 27 days (30 before now, to 3 days ago) cut into 2-day pieces: 14, after the unavailable one.
    expect(pieces).toHaveLength(15);
    expect(lines.map((l) => JSON.parse(l)).find((l) => l.event === 'gap.split')).toMatchObject({
      gap_id: Number(gap.id),
    });
  });

  it('ending in 2099 is due now and settled unavailable with the reason, without a download', async () => {
    await sql`UPDATE gaps SET state = 'unavailable' WHERE state = 'open'`.execute(t.db); // earlier tests' pieces
    const sourceId = await newSource();
    const gap = await insertGap(
      sourceId,
      new Date(Date.now() - DAY),
      new Date('2099-12-31T00:00:00Z'),
      new Date('2100-01-01T02:15:00Z'),
    );
    const before = archive.requests.length;
    const results = await fillGaps(deps());
    expect(results.find((r) => r.gapId === Number(gap.id))).toMatchObject({
      outcome: 'unavailable',
    });
    const row = await t.db
      .selectFrom('gaps')
      .selectAll()
      .where('id', '=', gap.id)
      .executeTakeFirstOrThrow();
    expect(row.state).toBe('unavailable');
    expect(row.last_error).toMatch(/^window ends 2099-12-31T00:00:00\.000Z, past the clock/);
    expect(archive.requests.length).toBe(before);
  });
});

/** A ready gap whose every archive hour never answers: its fill hangs mid-download. */
async function hangingGap() {
  const sourceId = await newSource();
  const to = hourOf(new Date(Date.now() - 5 * DAY - seq * 3 * 3_600_000)).start;
  const gap = await insertGap(sourceId, new Date(to.getTime() - 30 * MIN), to);
  for (let h = -2; h <= 3; h++) {
    archive.fail(hourOf(new Date(to.getTime() + h * 3_600_000)).name, {
      hang: true,
      times: Infinity,
    });
  }
  return gap;
}

const row = (id: string) =>
  sql<{ attempts: number; open: boolean; backed_off_s: number; fill_hour: string | null }>`
    SELECT attempts, fill_started_at IS NOT NULL AS open, fill_hour,
           extract(epoch FROM next_attempt_at - now())::int AS backed_off_s
    FROM gaps WHERE id = ${id}`
    .execute(t.db)
    .then((r) => r.rows[0]!);

describe('a fill attempt', () => {
  it('is counted and backed off before it reads; a stop gives the attempt back', async () => {
    const gap = await hangingGap();
    const stop = new AbortController();
    const fill = fillGap(deps(), Number(gap.id), { signal: stop.signal });
    // Mid-download (the archive never answers): what a crash here would leave behind.
    const during = await waitFor(async () => {
      const r = await row(gap.id);
      return r.open && r.fill_hour ? r : null;
    });
    expect(during.attempts).toBe(1);
    expect(during.backed_off_s).toBeGreaterThan(50); // a minute: the first rung
    stop.abort();
    expect((await fill).outcome).toBe('interrupted');
    const after = await row(gap.id);
    expect(after).toMatchObject({ attempts: 0, open: false });
    expect(after.backed_off_s).toBeLessThanOrEqual(0);
  });

  it('found still open under the lock was a death: counted, and the second makes it unavailable', async () => {
    const sourceId = await newSource();
    const to = hourOf(new Date(Date.now() - 6 * DAY)).start;
    const gap = await insertGap(sourceId, new Date(to.getTime() - 30 * MIN), to);
    for (let h = -2; h <= 3; h++)
      archive.setHour(hourOf(new Date(to.getTime() + h * 3_600_000)).name, []);
    // As a fill SIGKILLed mid-hour leaves it (test/recovery/fill-crash.test.ts does it for real).
    const died = (deaths: number) =>
      sql`
      UPDATE gaps SET fill_started_at = now(), fill_hour = '2026-01-01-1', attempts = attempts + 1,
        fill_deaths = ${deaths} WHERE id = ${gap.id}`.execute(t.db);
    await died(0);
    const { logger, lines } = memoryLogger('warn');
    expect(await fillGap(deps({ logger }), Number(gap.id))).toMatchObject({ outcome: 'filled' });
    expect(lines.map((l) => JSON.parse(l)).find((l) => l.event === 'gap.fill_died')).toMatchObject({
      deaths: 1,
      hour: '2026-01-01-1',
    });
    await sql`UPDATE gaps SET state = 'open', filled_at = NULL WHERE id = ${gap.id}`.execute(t.db);
    await died(1);
    const gone = await fillGap(deps(), Number(gap.id));
    expect(gone).toMatchObject({ outcome: 'unavailable' });
    const settled = await t.db
      .selectFrom('gaps')
      .selectAll()
      .where('id', '=', gap.id)
      .executeTakeFirstOrThrow();
    expect(settled).toMatchObject({ state: 'unavailable', fill_deaths: 2, fill_started_at: null });
    expect(settled.last_error).toBe(
      'the fill died 2 times before it ended (killed, or out of memory), last while importing archive hour 2026-01-01-1; not retried',
    );
  });
});

describe('the backfill job', () => {
  it('logs outcome "interrupted", not "filled", when its fill was interrupted', async () => {
    await sql`UPDATE gaps SET state = 'unavailable' WHERE state = 'open'`.execute(t.db);
    const gap = await hangingGap();
    const { logger, lines } = memoryLogger('info');
    const stop = new AbortController();
    const job = handleBackfill(
      { deps: deps({ logger }), boss: undefined as never },
      { id: 'job-interrupted', signal: stop.signal },
    );
    await waitFor(async () => (await row(gap.id)).fill_hour);
    stop.abort();
    expect(await job).toMatchObject({ outcome: 'interrupted', gaps: 1, filled: 0, interrupted: 1 });
    const done = lines.map((l) => JSON.parse(l)).find((l) => l.event === 'job.completed');
    expect(done).toMatchObject({ outcome: 'interrupted', filled: 0, interrupted: 1 });
  });
});

describe('a file import left running', () => {
  it('is recognised by the sweep, counted as a death, and after two not read again unforced', async () => {
    const file = path.join(dir, 'killer.json.gz');
    const evs = Array.from({ length: 4 }, () => pushEvent({ id: nextId++ }));
    writeFileSync(file, gzipLines(evs));
    const all = { scope: 'all', sourceId: null, gapId: null };
    const leftRunning = (deaths: number) =>
      sql`
      INSERT INTO backfill_files (file, scope, state, lines_done, deaths, attempts)
      VALUES (${file}, 'all', 'running', 2, ${deaths}, ${deaths + 1})
      ON CONFLICT (file, scope, mirror) DO UPDATE SET state = 'running', deaths = ${deaths}`.execute(
        t.db,
      );
    await leftRunning(0);
    // Nobody holds its lock: the reconciler's sweep marks it, once.
    expect(await interruptDeadImports(t.db)).toEqual([
      expect.objectContaining({ file, scope: 'all', linesDone: 2, deaths: 1 }),
    ]);
    expect(await interruptDeadImports(t.db)).toEqual([]);
    const cp = await sql<{ state: string; error: string }>`
      SELECT state, error FROM backfill_files WHERE file = ${file}`.execute(t.db);
    expect(cp.rows[0]).toEqual({
      state: 'failed',
      error:
        'interrupted: the process importing it died (killed, or out of memory) at line 2; the next import resumes there',
    });

    // Found running by the next import itself (no sweep in between): the second death.
    await leftRunning(1);
    const { logger, lines } = memoryLogger('warn');
    const refused = await importFile(
      { pool: t.pool, logger, workerId: 'test-host:1' },
      localFileSource(file),
      all,
    );
    expect(refused).toMatchObject({
      outcome: 'failed',
      error: { code: 'BACKFILL_KILLED_IMPORTER' },
    });
    expect(refused.error!.message).toMatch(
      /killed its importer 2 times \(last at line 2\); not read again: --force reads it again$/,
    );
    expect(
      lines.map((l) => JSON.parse(l)).find((l) => l.event === 'backfill.file_died'),
    ).toMatchObject({ deaths: 2 });
    const forced = await importFile(
      { pool: t.pool, logger, workerId: 'test-host:1' },
      localFileSource(file),
      all,
      { force: true },
    );
    expect(forced).toMatchObject({ outcome: 'completed', counts: { created: 4 } });
  });
});
