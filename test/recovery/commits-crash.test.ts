import { sql } from 'kysely';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { settleAbandonedReservations } from '../../src/budget/ledger.ts';
import { fetchOnce } from '../../src/commits/fetch-rest.ts';
import { fixedClock } from '../../src/platform/clock.ts';
import { chain, insertPushes, insertRepository, pushShas } from '../support/commit-world.ts';
import { useTestDatabase } from '../support/db.ts';
import { type FakeGitHub, startFakeGitHub } from '../support/fake-github.ts';
import { captureLogger } from './helpers.ts';
import { liveDeps, spawnBin, type TestDeps } from './world.ts';

/**
 * A commits fetcher SIGKILLed mid-fetch (a real crash at a fault point of bin/commits:
 * no finally block runs). The push keeps its lease until it expires — no other fetcher
 * takes it meanwhile — and, past its backoff (the attempt was counted before the request,
 * ADR 0120), is fetched again, storing each commit and each push_commits row exactly once,
 * whatever the dead process had written. Killed mid-request twice, it is set aside.
 */

const t = useTestDatabase();
let fake: FakeGitHub;
let deps: TestDeps;
const log = captureLogger('silent');
const LEASE_SECONDS = 30;
const SPAWNED_LEASE_SECONDS = 600;

beforeAll(async () => {
  fake = await startFakeGitHub();
  deps = liveDeps(t, fake, log.logger, { ENRICH_LEASE_SECONDS: String(LEASE_SECONDS) });
});
afterAll(async () => {
  await deps?.close();
  await fake?.close();
});
beforeEach(async () => {
  await sql`TRUNCATE push_events, stored_commits, commit_fetch_turns, repositories,
    actors, github_requests, github_rate_limits, commits_graphql_minutes`.execute(t.db);
  fake.reset();
  fake.setRateLimit({ resetAt: new Date(Date.now() + 1800_000) });
});

async function rows(): Promise<{ commits: number; pushCommits: number }> {
  const r = await sql<{ c: number; p: number }>`
    SELECT (SELECT count(*)::int FROM commits) AS c, (SELECT count(*)::int FROM push_commits) AS p`.execute(
    t.db,
  );
  return { commits: r.rows[0]!.c, pushCommits: r.rows[0]!.p };
}

async function lease() {
  const r = await sql<{
    state: string;
    until: Date | null;
    ahead: boolean;
    attempts: number;
    open: boolean;
    nextAt: Date;
    deaths: number;
    error: string | null;
  }>`
    SELECT commits_state AS state, commits_claimed_until AS until,
      commits_claimed_until > now() AS ahead, commits_attempts AS attempts,
      commits_fetch_started_at IS NOT NULL AS open, commits_next_attempt_at AS "nextAt",
      commits_deaths AS deaths, commits_error AS error FROM push_events`.execute(t.db);
  return r.rows[0]!;
}

function crashAt(point: string) {
  return spawnBin(
    'commits',
    {
      DATABASE_URL: t.url,
      GITHUB_MODE: 'live',
      GITHUB_API_URL: fake.url,
      ENRICH_LEASE_SECONDS: String(LEASE_SECONDS),
      FAULT_POINT: point,
    },
    ['--limit', '1'],
  );
}

describe('SIGKILL mid-fetch', () => {
  it.each(['commits.after_claim', 'commits.after_response'] as const)(
    'at %s: leased until expiry, then fetched once, no duplicate rows',
    async (point) => {
      await insertRepository(t.db, 80, 'crash/repo');
      const shas = chain(fake, 'crash/repo', 6);
      await insertPushes(t.db, [{ repositoryId: 80, before: shas[0]!, head: shas[5]! }]);

      const crashed = spawnBin(
        'commits',
        {
          DATABASE_URL: t.url,
          GITHUB_MODE: 'live',
          GITHUB_API_URL: fake.url,
          ENRICH_LEASE_SECONDS: String(LEASE_SECONDS),
          FAULT_POINT: point,
        },
        ['--limit', '1'],
      );
      expect(await crashed.exited).toEqual({ code: null, signal: 'SIGKILL' });
      const held = await lease();
      expect(held).toMatchObject({ state: 'pending', ahead: true });
      const sent = point !== 'commits.after_claim';
      expect(fake.requests).toHaveLength(sent ? 1 : 0);
      expect(await rows()).toEqual({ commits: 0, pushCommits: 0 });
      // Past its claim, the attempt was counted before the request (ADR 0120): one attempt,
      // open, and the push backed off a minute — a death does not make it due at once.
      expect(held).toMatchObject({ attempts: sent ? 1 : 0, open: sent, deaths: 0 });
      if (sent) expect(held.nextAt.getTime()).toBeGreaterThan(Date.now() + 30_000);

      // Within the lease no fetcher takes the push (the dead one's lease still holds) ...
      const clock = fixedClock(new Date());
      const within = await fetchOnce({ ...deps, clock });
      expect(within.outcome).toBe('idle');
      // ... and past its expiry (and its backoff) the next one does: nothing to clean up.
      clock.set(new Date(Math.max(held.until!.getTime(), held.nextAt.getTime()) + 1000));
      expect(await fetchOnce({ ...deps, clock })).toMatchObject({
        outcome: 'complete',
        commitCount: 5,
      });
      // The open attempt it found was a death; the one that completed is the second attempt.
      expect(await lease()).toMatchObject({
        state: 'complete',
        open: false,
        deaths: sent ? 1 : 0,
        attempts: sent ? 2 : 1,
      });
      expect(await rows()).toEqual({ commits: 5, pushCommits: 5 });
      expect(await pushShas(t.db, shas[5]!)).toEqual(
        shas.slice(1).map((sha, position) => ({ position, sha })),
      );
      expect((await lease()).until).toBeNull();
      // The dead process's reservation is settled by the reconciler's pass, not left open forever.
      await sql`UPDATE github_requests SET reserved_at = reserved_at - interval '1 hour'
      WHERE finished_at IS NULL`.execute(t.db);
      await settleAbandonedReservations(t.db, 300);
      const open = await sql<{ n: number }>`
      SELECT count(*)::int AS n FROM github_requests WHERE finished_at IS NULL`.execute(t.db);
      expect(open.rows[0]!.n).toBe(0);
    },
  );

  it('killed mid-request twice: the push is set aside (failed, with why), never asked a third time', async () => {
    await insertRepository(t.db, 82, 'crash/twice');
    const shas = chain(fake, 'crash/twice', 3);
    await insertPushes(t.db, [{ repositoryId: 82, before: shas[0]!, head: shas[2]! }]);
    for (let death = 1; death <= 2; death++) {
      const crashed = crashAt('commits.after_response');
      expect(await crashed.exited).toEqual({ code: null, signal: 'SIGKILL' });
      const held = await lease();
      expect(held).toMatchObject({ state: 'pending', open: true, deaths: death - 1 });
      // The backoff and the lease pass.
      await sql`UPDATE push_events SET commits_next_attempt_at = now() - interval '1 second',
        commits_claimed_until = now() - interval '1 second'`.execute(t.db);
    }
    expect(fake.requests).toHaveLength(2);
    const r = await fetchOnce(deps);
    expect(r).toMatchObject({ outcome: 'failed', requests: 0 });
    expect(r.detail).toMatch(
      /killed its process 2 times \(killed, or out of memory; last attempt started .* UTC\); not retried/,
    );
    expect(await lease()).toMatchObject({
      state: 'failed',
      open: false,
      deaths: 2,
      attempts: 2,
      until: null,
    });
    expect(fake.requests).toHaveLength(2);
    expect((await fetchOnce(deps)).outcome).toBe('idle');
    expect(await rows()).toEqual({ commits: 0, pushCommits: 0 });
  });

  it('at commits.after_store: stored once; a second fetcher finds nothing to do', async () => {
    await insertRepository(t.db, 81, 'crash/stored');
    const shas = chain(fake, 'crash/stored', 4);
    await insertPushes(t.db, [{ repositoryId: 81, before: shas[0]!, head: shas[3]! }]);
    const crashed = spawnBin(
      'commits',
      {
        DATABASE_URL: t.url,
        GITHUB_MODE: 'live',
        GITHUB_API_URL: fake.url,
        FAULT_POINT: 'commits.after_store',
      },
      ['--limit', '1'],
    );
    expect(await crashed.exited).toEqual({ code: null, signal: 'SIGKILL' });
    expect(await lease()).toMatchObject({ state: 'complete', until: null });
    expect(await rows()).toEqual({ commits: 3, pushCommits: 3 });
    const clock = fixedClock(new Date(Date.now() + 3600_000));
    expect((await fetchOnce({ ...deps, clock })).outcome).toBe('idle');
    expect(await rows()).toEqual({ commits: 3, pushCommits: 3 });
    expect(fake.requests).toHaveLength(1);
  });
});

/**
 * The same by GraphQL batches (bin/commits with a token: COMMITS_TRANSPORT=graphql, the
 * default): many pushes claimed at once, proven in rounds of queries on the token's points
 * window, stored one by one. Killed at each window of the batch — a query marked sent but
 * not sent, a query answered and settled with more rounds to go, every answer in and nothing
 * stored, the first push stored and the rest not — then run again: every push ends with
 * exactly its commits, once each, the dead leases expire and are taken, the ledger's points
 * are all settled, each push is counted once in commits_graphql_minutes, and a death is
 * charged only to the pushes of the query that was in flight.
 */
describe('SIGKILL mid-GraphQL batch', () => {
  const TOKEN = 'ghp_crashgraphql0000000000';
  const compares = () => fake.requests.filter((r) => r.path.includes('/compare/'));

  function commitsRun(env: Record<string, string> = {}) {
    return spawnBin(
      'commits',
      {
        DATABASE_URL: t.url,
        GITHUB_MODE: 'live',
        GITHUB_API_URL: fake.url,
        GITHUB_TOKEN: TOKEN,
        COMMITS_TRANSPORT: 'graphql',
        // Real time here: the dead batch's leases must outlast the next run's start on a
        // loaded machine; the test expires them itself when it means to.
        ENRICH_LEASE_SECONDS: String(SPAWNED_LEASE_SECONDS),
        LOG_LEVEL: 'warn',
        ...env,
      },
      ['--limit', '20', '--json'],
    );
  }

  /** Six pushes of three kinds on three repositories; each one's commits, oldest first. */
  async function world(): Promise<{ head: string; ref: string; commits: string[] }[]> {
    await insertRepository(t.db, 90, 'gcrash/lines');
    await insertRepository(t.db, 91, 'gcrash/long');
    await insertRepository(t.db, 92, 'gcrash/forced');
    const a = chain(fake, 'gcrash/lines', 5);
    const b = chain(fake, 'gcrash/long', 8);
    const c = chain(fake, 'gcrash/forced', 4, null, { branch: 'main' });
    // a force push: main's last two commits replaced by two others on c[1]
    const forced = chain(fake, 'gcrash/forced', 2, c[1]!);
    const pushes = [
      // four one-commit pushes
      ...a.slice(1).map((head, i) => ({
        seed: { repositoryId: 90, before: a[i]!, head },
        commits: [head],
      })),
      // one of seven commits
      { seed: { repositoryId: 91, before: b[0]!, head: b[7]! }, commits: b.slice(1) },
      // a force push: what head has and before has not
      { seed: { repositoryId: 92, before: c[3]!, head: forced[1]! }, commits: forced },
    ];
    await insertPushes(
      t.db,
      pushes.map((p) => p.seed),
    );
    return pushes.map((p) => ({ head: p.seed.head, ref: 'refs/heads/main', commits: p.commits }));
  }

  async function states(): Promise<Record<string, number>> {
    const r = await sql<{ s: string; n: number }>`
      SELECT commits_state AS s, count(*)::int AS n FROM push_events GROUP BY 1`.execute(t.db);
    return Object.fromEntries(r.rows.map((x) => [x.s, x.n]));
  }

  async function counted(): Promise<number> {
    const r = await sql<{ n: number }>`
      SELECT coalesce(sum(pushes), 0)::int AS n FROM commits_graphql_minutes`.execute(t.db);
    return r.rows[0]!.n;
  }

  it.each([
    'github.after_sent',
    'github.after_settle',
    'commits.after_response',
    'commits.after_store',
  ] as const)('killed at %s, run again: every push has exactly its commits', async (point) => {
    const pushes = await world();
    const crashed = commitsRun({ FAULT_POINT: point });
    expect(await crashed.exited).toEqual({ code: null, signal: 'SIGKILL' });
    expect(crashed.stderr.join('')).toContain(`FAULT_POINT ${point}`);
    const answered = fake.graphql.queries.length;
    // Only after_sent dies before its query leaves; every other point after an answer, and
    // after_settle with the proof's later rounds still to ask (mid-batch).
    expect(answered > 0).toBe(point !== 'github.after_sent');
    if (point === 'github.after_settle') expect(answered).toBe(1);
    // Stored: at most the one push whose store the kill followed.
    const storedAtDeath = point === 'commits.after_store' ? 1 : 0;
    expect(await states()).toEqual(
      storedAtDeath ? { complete: 1, pending: pushes.length - 1 } : { pending: pushes.length },
    );
    expect(await counted()).toBe(storedAtDeath);
    // The dead batch's leases hold: a fetcher started now takes none of its pushes.
    const held = await sql<{ n: number }>`
      SELECT count(*)::int AS n FROM push_events
      WHERE commits_state = 'pending' AND commits_claimed_until > now()`.execute(t.db);
    expect(held.rows[0]!.n).toBe(pushes.length - storedAtDeath);
    const within = commitsRun();
    expect(await within.exited).toEqual({ code: 0, signal: null });
    expect(JSON.parse(within.stdout.join(''))).toMatchObject({
      fetched: 0,
      stoppedBy: 'nothing_due',
    });
    expect(fake.graphql.queries).toHaveLength(answered);

    // Time passes: the leases expire, the attempts' backoff ends, the reconciler's pass
    // settles what the dead process left open in the ledger.
    await sql`UPDATE push_events SET commits_claimed_until = now() - interval '1 second',
      commits_next_attempt_at = now() - interval '1 second' WHERE commits_state = 'pending'`.execute(
      t.db,
    );
    await sql`UPDATE github_requests SET reserved_at = reserved_at - interval '1 hour'
      WHERE finished_at IS NULL`.execute(t.db);
    await settleAbandonedReservations(t.db, 300);

    const again = commitsRun();
    expect(await again.exited).toEqual({ code: 0, signal: null });
    const summary = JSON.parse(again.stdout.join(''));
    expect(summary).toMatchObject({
      transport: 'graphql',
      fetched: pushes.length - storedAtDeath,
      stoppedBy: 'nothing_due',
      requests: 0,
      outcomes: { complete: pushes.length - storedAtDeath, failed: 0, retry: 0 },
    });
    expect(compares()).toHaveLength(0);
    if (point === 'github.after_settle') {
      expect(fake.graphql.queries.length - answered).toBeGreaterThan(1);
    }

    // Every push: complete, exactly its commits in order, no lease, no attempt left open. A
    // death is charged only where the batch died with a query in flight (ADR 0182): the six
    // pushes were one query's, so each is a suspect of that one batch death — never a death
    // of its own, and never one where the kill came after every answer was in.
    expect(await states()).toEqual({ complete: pushes.length });
    for (const p of pushes) {
      expect(await pushShas(t.db, p.head, p.ref)).toEqual(
        p.commits.map((sha, position) => ({ position, sha })),
      );
    }
    const rowsLeft = await sql<{
      until: Date | null;
      open: boolean;
      deaths: number;
      batchDeaths: number;
      n: number;
    }>`
      SELECT commits_claimed_until AS until, commits_fetch_started_at IS NOT NULL AS open,
        commits_deaths AS deaths, commits_batch_deaths AS "batchDeaths", commit_count AS n
      FROM push_events`.execute(t.db);
    for (const r of rowsLeft.rows) expect(r).toMatchObject({ until: null, open: false, deaths: 0 });
    const inFlight = point === 'github.after_sent' || point === 'github.after_settle';
    expect(rowsLeft.rows.map((r) => r.batchDeaths)).toEqual(
      Array(pushes.length).fill(inFlight ? 1 : 0),
    );
    expect(rowsLeft.rows.map((r) => r.n).sort()).toEqual(
      pushes.map((p) => p.commits.length).sort(),
    );
    const distinct = new Set(pushes.flatMap((p) => p.commits)).size;
    expect(await rows()).toEqual({
      commits: distinct,
      pushCommits: pushes.reduce((n, p) => n + p.commits.length, 0),
    });

    // The ledger: nothing left open; the points of the answered queries are what GitHub charged.
    const ledger = await sql<{ open: number; answered: number }>`
      SELECT count(*) FILTER (WHERE finished_at IS NULL)::int AS open,
        coalesce(sum(points) FILTER (WHERE outcome = 'completed'), 0)::int AS answered
      FROM github_requests WHERE credential LIKE '%#graphql'`.execute(t.db);
    expect(ledger.rows[0]).toEqual({ open: 0, answered: fake.graphql.pointsSpent() });
    // Each push counted once as settled by GraphQL, whichever process settled it.
    expect(await counted()).toBe(pushes.length);
  });
});
