import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ANSWER_MAX_BYTES } from '../../src/github/answer-limits.ts';
import { LockSpace, lockHeldSql } from '../../src/platform/db/locks.ts';
import { addSource } from '../../src/store/sources.ts';
import { useTestDatabase } from '../support/db.ts';
import { type FakeGitHub, startFakeGitHub } from '../support/fake-github.ts';
import { pushEvent } from '../support/github-factories.ts';
import { waitFor } from './helpers.ts';
import { type Child, killAll, ROOT, spawnBin } from './world.ts';

/**
 * The red team's crash loop, against real bin/worker processes and the fake
 * GitHub. Before ADR 0120 one feed answering a 110 MB string killed every worker 11–14 s
 * after its start ("JavaScript heap out of memory"): the dead run counted no failure, so each
 * restart polled the same feed and died, and no other source was polled.
 *
 * 1. With the byte cap: a worker with a small heap (128 MB, below what the 110 MB string
 *    needed) reads 8 MB of it, refuses it and lives; the feed fails and backs off, the other
 *    feeds are polled, and the worker's peak RSS over its whole life stays bounded.
 * 2. Work that still kills its process: the fake SIGKILLs whichever worker asks for the bad
 *    feed, mid-answer. Each restart polls the other feeds and not the bad one before its poll
 *    interval has passed (the dead poll left it due one interval on, ADR 0180); the second
 *    death sets the bad feed aside for a day; the operator's `bin/sources enable` polls it
 *    again.
 * 3. The same with a feed that announces an X-Poll-Interval of 1 s, nothing moved by the test:
 *    the restart polls the bad feed again at once and dies, and the worker after it sets the
 *    feed aside — two deaths, never a crash loop.
 */

const t = useTestDatabase();
let fake: FakeGitHub;
let dir: string;
const children: Child[] = [];
const MB = 1024 * 1024;
const PEAK_HOOK = `--import=${path.join(ROOT, 'test/support/peak-rss.mjs')}`;
/** A worker's resident set with a 128 MB heap and 8 MB answers; the 110 MB string needed more. */
const PEAK_BOUND = 320 * MB;
/**
 * Each wait's bound: a hang guard, not a claim. Beside busy loops at load 50 on 2 cores a
 * bin/worker took over a minute to log its start, and a test of three worker lives over 200 s.
 */
const WAIT = 300_000;
const TEST_TIMEOUT = 900_000;

beforeAll(async () => {
  fake = await startFakeGitHub();
  dir = mkdtempSync(path.join(tmpdir(), 'gpi-hostile-'));
});
afterAll(async () => {
  await fake?.close();
  rmSync(dir, { recursive: true, force: true });
});
// Each test's processes end with it: a worker left by a failed test would poll the next
// test's feeds, and the fake kills whichever process asks for a bad one.
afterEach(async () => {
  await killAll(children.splice(0));
});
beforeEach(async () => {
  fake.reset();
  await sql`TRUNCATE event_sources, ingestion_runs, push_events, actors, repositories,
    github_requests, github_rate_limits RESTART IDENTITY CASCADE`.execute(t.db);
});

function worker(extra: Record<string, string> = {}): Child {
  const child = spawnBin('worker', {
    DATABASE_URL: t.url,
    GITHUB_MODE: 'live',
    GITHUB_API_URL: fake.url,
    GITHUB_TOKEN: 'hostile-answers-token',
    TICK_SECONDS: '1',
    ...extra,
  });
  children.push(child);
  return child;
}

async function source(target: string): Promise<{ id: number; feed: string; path: string }> {
  const { source } = await addSource(t.db, { kind: 'repo', target }, 'live');
  return { id: Number(source.id), feed: `repo:${target}`, path: `/repos/${target}/events` };
}

async function row(id: number) {
  return t.db
    .selectFrom('event_sources')
    .select(['consecutive_failures', 'poll_deaths', 'next_poll_at', 'last_error', 'updated_at'])
    .where('id', '=', String(id))
    .executeTakeFirstOrThrow();
}

async function stored(ids: string[]): Promise<boolean> {
  const r = await sql<{ n: number }>`
    SELECT count(*)::int AS n FROM push_events WHERE id::text = ANY(${ids})`.execute(t.db);
  return r.rows[0]!.n === ids.length;
}

/** New pushes on the good feeds, and the feeds due: what each worker must store. */
async function freshPushes(goods: { id: number; feed: string }[], seq: number): Promise<string[]> {
  // A run still finishing would write its own next poll over the one set below. (A dead
  // worker's runs, their lock gone, wait for the next worker's reconcile.)
  await waitFor(
    async () => {
      const r = await sql<{ n: number }>`
        SELECT count(*)::int AS n FROM ingestion_runs r WHERE r.status = 'running'
          AND r.source_id = ANY(${goods.map((g) => String(g.id))}::bigint[])
          AND ${lockHeldSql(LockSpace.source, sql`r.source_id`)}`.execute(t.db);
      return r.rows[0]!.n === 0;
    },
    { timeoutMs: WAIT, what: 'the good feeds’ runs to finish' },
  );
  const ids: string[] = [];
  for (const [i, g] of goods.entries()) {
    const ev = pushEvent({ id: 60_000_000_000 + seq * 100 + i });
    fake.addEvents(g.feed, [ev]);
    ids.push(String(ev.id));
  }
  await sql`UPDATE event_sources SET next_poll_at = now()
    WHERE id = ANY(${goods.map((g) => String(g.id))}::bigint[])`.execute(t.db);
  return ids;
}

const requestsFor = (p: string) => fake.requests.filter((r) => r.path === p);

describe('a feed answering 110 MB', () => {
  it('a worker with a 128 MB heap refuses it at 8 MB and lives: the feed backs off, the others are polled, peak RSS bounded', {
    timeout: TEST_TIMEOUT,
  }, async () => {
    const bad = await source('hostile/huge');
    const goods = [await source('kind/one'), await source('kind/two')];
    fake.fail({ path: bad.path, hugeBody: { bytes: 110 * MB }, times: Number.POSITIVE_INFINITY });
    const rssFile = path.join(dir, 'rss-cap');
    const w = worker({
      NODE_OPTIONS: `--max-old-space-size=128 ${PEAK_HOOK}`,
      GPI_PEAK_RSS_FILE: rssFile,
    });
    await w.waitForLine((l) => l.event === 'worker.started', 'the worker to start', WAIT);

    for (let round = 1; round <= 3; round++) {
      const ids = await freshPushes(goods, round);
      await sql`UPDATE event_sources SET next_poll_at = now() WHERE id = ${bad.id}`.execute(t.db);
      await waitFor(
        async () => (await stored(ids)) && (await row(bad.id)).consecutive_failures === round,
        { timeoutMs: WAIT, what: `round ${round}: good pushes stored, the bad feed failed` },
      );
      const r = await row(bad.id);
      expect(r.last_error).toMatch(/^GITHUB_ANSWER_TOO_LARGE: .*8 MB cap for events answers/);
      // Backed off on the failure ladder: 1, 2, 4 minutes from the failure (the instant the
      // worker wrote it, the row's updated_at; not the test's now, which a loaded machine
      // makes later by any amount).
      expect(r.updated_at.getTime()).toBeLessThanOrEqual(Date.now());
      expect(r.next_poll_at.getTime() - r.updated_at.getTime()).toBe(60_000 * 2 ** (round - 1));
      expect(w.process.exitCode, 'the worker is alive').toBeNull();
    }
    // Each answer was read to the cap and hung up on, not to its end.
    const served = requestsFor(bad.path);
    expect(served).toHaveLength(3);
    // (The cap, and what the kernel's and Node's socket buffers held when the client hung up.)
    for (const s of served) expect(s.bytesSent!).toBeLessThan(3 * ANSWER_MAX_BYTES.events);

    w.process.kill('SIGTERM');
    expect(await w.exited).toEqual({ code: 0, signal: null });
    const peak = Number(readFileSync(rssFile, 'utf8'));
    console.log(
      `worker (128 MB heap) against a 110 MB feed, 3 answers refused at the 8 MB cap: peak RSS ${(peak / MB).toFixed(0)} MB; bytes the fake got out per answer: ${served.map((s) => (s.bytesSent! / MB).toFixed(1)).join(', ')} MB`,
    );
    expect(peak).toBeGreaterThan(0);
    expect(peak).toBeLessThan(PEAK_BOUND);
  });
});

describe('a feed whose answer kills the worker', () => {
  it('each restart polls the other feeds, not the bad one; the second death sets it aside; enable polls it again', {
    timeout: TEST_TIMEOUT,
  }, async () => {
    const bad = await source('hostile/killer');
    const goods = [await source('kind/three'), await source('kind/four')];
    // The bad feed last announced an hour (the longest interval a row takes): the restart
    // below must not poll it "before its interval has passed", and that must not depend on
    // how fast a loaded machine starts a worker (with the fake's 60 s, one start of over a
    // minute made the restart poll it, rightly, and die).
    const interval = 3600;
    await sql`UPDATE event_sources SET poll_interval_seconds = ${interval}
      WHERE id = ${bad.id}`.execute(t.db);
    let victim: Child | null = null;
    let killing = true;
    // A real death mid-answer: the worker asking for the bad feed is SIGKILLed, its request
    // in flight (the answer never comes).
    fake.onRequest = (req) => {
      if (killing && req.path === bad.path && victim) victim.process.kill('SIGKILL');
    };

    // Death 1.
    const ids1 = await freshPushes(goods, 11);
    victim = worker();
    expect(await victim.exited).toEqual({ code: null, signal: 'SIGKILL' });
    const afterDeath1 = await row(bad.id);
    // Scheduled before the request: the bad feed is due one poll interval after the dead run
    // began, no later.
    const dead = await t.db
      .selectFrom('ingestion_runs')
      .select(['status', 'started_at'])
      .where('source_id', '=', String(bad.id))
      .execute();
    expect(dead).toHaveLength(1);
    expect(dead[0]!.status).toBe('running');
    expect(afterDeath1.next_poll_at.getTime()).toBe(
      dead[0]!.started_at.getTime() + interval * 1000,
    );

    // Restart: the death is counted, the good feeds are polled, the bad one is not.
    const ids2 = [...ids1, ...(await freshPushes(goods, 12))];
    victim = worker();
    await victim.waitForLine(
      (l) => l.event === 'reconcile.run_interrupted' && l.source_id === bad.id,
      'the restarted worker to count the death',
      WAIT,
    );
    await waitFor(() => stored(ids2), { timeoutMs: WAIT, what: 'the good feeds polled' });
    expect(await row(bad.id)).toMatchObject({ consecutive_failures: 1, poll_deaths: 1 });
    expect((await row(bad.id)).last_error).toMatch(/^POLL_DIED: run \d+ died on its answer/);
    expect(requestsFor(bad.path)).toHaveLength(1);

    // Death 2: its poll interval passes (the test moves it), the same worker polls it and dies.
    await sql`UPDATE event_sources SET next_poll_at = now() WHERE id = ${bad.id}`.execute(t.db);
    expect(await victim.exited).toEqual({ code: null, signal: 'SIGKILL' });
    expect(requestsFor(bad.path)).toHaveLength(2);

    // Restart: the second death sets the feed aside for a day; the good feeds go on.
    const ids3 = await freshPushes(goods, 13);
    victim = worker();
    const aside = await victim.waitForLine(
      (l) => l.event === 'source.set_aside' && l.source_id === bad.id,
      'the bad feed set aside',
      WAIT,
    );
    expect(aside.deaths).toBe(2);
    await waitFor(() => stored(ids3), { timeoutMs: WAIT, what: 'the good feeds polled again' });
    const setAside = await row(bad.id);
    expect(setAside.poll_deaths).toBe(2);
    expect(setAside.next_poll_at.getTime()).toBeGreaterThan(Date.now() + 23 * 3600_000);
    expect(setAside.last_error).toMatch(
      new RegExp(
        `set aside until \\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d UTC: bin/sources enable ${bad.id} polls it again now$`,
      ),
    );
    // More rounds of the good feeds: the bad one is never asked again.
    const ids4 = await freshPushes(goods, 14);
    await waitFor(() => stored(ids4), { timeoutMs: WAIT, what: 'the good feeds, once more' });
    expect(requestsFor(bad.path)).toHaveLength(2);
    expect(victim.process.exitCode).toBeNull();

    // The feed is fixed; the operator retries it.
    killing = false;
    const ev = pushEvent({ id: 60_000_009_999 });
    fake.addEvents(bad.feed, [ev]);
    const enable = spawnBin('sources', { DATABASE_URL: t.url, GITHUB_MODE: 'live' }, [
      'enable',
      String(bad.id),
    ]);
    children.push(enable);
    expect(await enable.exited).toEqual({ code: 0, signal: null });
    await waitFor(
      async () => (await stored([String(ev.id)])) && (await row(bad.id)).last_error === null,
      { timeoutMs: WAIT, what: 'the bad feed polled to the end' },
    );
    expect(await row(bad.id)).toMatchObject({
      consecutive_failures: 0,
      poll_deaths: 0,
      last_error: null,
    });
    victim.process.kill('SIGTERM');
    expect(await victim.exited).toEqual({ code: 0, signal: null });
    const runs = await sql<{ status: string; n: number }>`
      SELECT status, count(*)::int AS n FROM ingestion_runs WHERE source_id = ${bad.id}
      GROUP BY 1 ORDER BY 1`.execute(t.db);
    expect(Object.fromEntries(runs.rows.map((r) => [r.status, r.n]))).toEqual({
      completed: 1,
      interrupted: 2,
    });
  });
  it('a feed announcing X-Poll-Interval 1 s: the restart dies on it once more, the next sets it aside; nothing moved by the test', {
    timeout: TEST_TIMEOUT,
  }, async () => {
    const bad = await source('hostile/fast-killer');
    const goods = [await source('kind/five'), await source('kind/six')];
    fake.setPollInterval(bad.feed, 1);
    fake.addEvents(bad.feed, [pushEvent({ id: 60_000_008_000 })]);
    let victim: Child | null = null;
    let killing = false;
    const killed: string[] = [];
    fake.onRequest = (req) => {
      if (killing && req.path === bad.path && victim) {
        killed.push(req.rawUrl);
        victim.process.kill('SIGKILL');
      }
    };

    // The feed is fine at first: polled to the end, its interval of 1 s learned.
    const ids1 = await freshPushes(goods, 21);
    victim = worker();
    await waitFor(
      async () =>
        (await stored([...ids1, '60000008000'])) &&
        (await row(bad.id)).last_error === null &&
        (
          await t.db
            .selectFrom('event_sources')
            .select('poll_interval_seconds')
            .where('id', '=', String(bad.id))
            .executeTakeFirstOrThrow()
        ).poll_interval_seconds === 1,
      { timeoutMs: WAIT, what: 'every feed polled, the bad one’s interval learned' },
    );

    // Death 1: its answer now kills whoever asks (the running worker polls it within a second).
    killing = true;
    expect(await victim.exited).toEqual({ code: null, signal: 'SIGKILL' });
    const afterDeath1 = await row(bad.id);
    expect(afterDeath1.next_poll_at.getTime()).toBeLessThanOrEqual(Date.now() + 1_000);

    // Death 2: the restart counts the first and, the feed due within its second, dies on it.
    victim = worker();
    expect(await victim.exited).toEqual({ code: null, signal: 'SIGKILL' });
    expect(killed).toHaveLength(2);
    expect(await row(bad.id)).toMatchObject({ consecutive_failures: 1, poll_deaths: 1 });
    expect((await row(bad.id)).last_error).toMatch(/^POLL_DIED: run \d+ died on its answer/);

    // The next worker counts the second death and sets the feed aside; the others go on.
    const ids3 = await freshPushes(goods, 23);
    victim = worker();
    const aside = await victim.waitForLine(
      (l) => l.event === 'source.set_aside' && l.source_id === bad.id,
      'the bad feed set aside',
      WAIT,
    );
    expect(aside.deaths).toBe(2);
    await waitFor(() => stored(ids3), { timeoutMs: WAIT, what: 'the good feeds polled' });
    const ids4 = await freshPushes(goods, 24);
    await waitFor(() => stored(ids4), { timeoutMs: WAIT, what: 'the good feeds, once more' });
    expect(killed).toHaveLength(2);
    expect(victim.process.exitCode, 'the third worker is alive').toBeNull();
    expect((await row(bad.id)).next_poll_at.getTime()).toBeGreaterThan(Date.now() + 23 * 3600_000);
    victim.process.kill('SIGTERM');
    expect(await victim.exited).toEqual({ code: 0, signal: null });
  });
});
