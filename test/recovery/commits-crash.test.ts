import { sql } from 'kysely';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { fixedClock } from '../../src/clock.ts';
import { fetchOnce } from '../../src/commits/fetch.ts';
import { settleAbandonedReservations } from '../../src/github/ledger.ts';
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

beforeAll(async () => {
  fake = await startFakeGitHub();
  deps = liveDeps(t, fake, log.logger, { ENRICH_LEASE_SECONDS: String(LEASE_SECONDS) });
});
afterAll(async () => {
  await deps?.close();
  await fake?.close();
});
beforeEach(async () => {
  await sql`TRUNCATE push_events, push_commits, commits, commit_fetch_turns, repositories,
    actors, github_requests, github_rate_limits`.execute(t.db);
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
