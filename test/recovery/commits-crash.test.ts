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
 * takes it meanwhile — and is then fetched again, storing each commit and each
 * push_commits row exactly once, whatever the dead process had written.
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
  const r = await sql<{ state: string; until: Date | null; ahead: boolean }>`
    SELECT commits_state AS state, commits_claimed_until AS until,
      commits_claimed_until > now() AS ahead FROM push_events`.execute(t.db);
  return r.rows[0]!;
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
      expect(fake.requests).toHaveLength(point === 'commits.after_claim' ? 0 : 1);
      expect(await rows()).toEqual({ commits: 0, pushCommits: 0 });

      // Within the lease no fetcher takes the push (the dead one's lease still holds) ...
      const clock = fixedClock(new Date());
      const within = await fetchOnce({ ...deps, clock });
      expect(within.outcome).toBe('idle');
      // ... and past its expiry the next one does: nothing to clean up.
      clock.set(new Date(held.until!.getTime() + 1000));
      expect(await fetchOnce({ ...deps, clock })).toMatchObject({
        outcome: 'complete',
        commitCount: 5,
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
