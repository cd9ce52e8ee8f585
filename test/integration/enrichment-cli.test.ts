import { sql } from 'kysely';
import { beforeEach, describe, expect, it } from 'vitest';
import { type Exit, runBin } from '../support/cli.ts';
import { useTestDatabase } from '../support/db.ts';
import { repoProfile, userProfile } from '../support/github-factories.ts';
import { useFakeGitHub } from '../support/use-fake-github.ts';
import { insertPending, statesOf } from './enrichment-fixtures.ts';

const t = useTestDatabase();
const fake = useFakeGitHub();

/** The real executable, as an operator runs it (no TTY: one line per entity). */
function spawnEnrich(argv: string[]): Promise<Exit> {
  return runBin('enrich', argv, {
    DATABASE_URL: t.url,
    GITHUB_API_URL: fake.url,
    GITHUB_MODE: 'live',
    LOG_LEVEL: 'warn',
    GITHUB_TOKEN: undefined,
  });
}

beforeEach(async () => {
  // Mid-way through GitHub's rate-limit hour, as a running system would be.
  fake.setRateLimit({ resetAt: new Date(Date.now() + 1800_000) });
  await sql`TRUNCATE actors, repositories, enrichment_attempts, github_requests, github_rate_limits`.execute(
    t.db,
  );
});

function serveProfiles(actorIds: number[], repoIds: number[]): void {
  for (const id of actorIds) fake.setUser(userProfile({ id, login: `user-${id}` }));
  for (const id of repoIds) fake.setRepo(repoProfile({ id, full_name: `owner-${id}/repo-${id}` }));
}

describe('bin/enrich', () => {
  it('--limit 5 makes exactly 5 counted requests and moves exactly 5 entities out of pending', async () => {
    const actors = await insertPending(t.db, 'actor', 8, { firstId: 100 });
    const repos = await insertPending(t.db, 'repository', 8, { firstId: 200 });
    serveProfiles(actors, repos);

    const r = await spawnEnrich(['--limit', '5']);
    expect(r.err).toBe('');
    expect(r.code).toBe(0);
    expect(fake.countedRequests).toBe(5);
    const actorStates = await statesOf(t.db, 'actor');
    const repoStates = await statesOf(t.db, 'repository');
    expect(actorStates.pending + repoStates.pending).toBe(11);
    // Alternating classes: 3 of one, 2 of the other.
    expect([actorStates.enriched, repoStates.enriched].sort()).toEqual([2, 3]);
    const lines = r.out.trim().split('\n');
    expect(lines).toHaveLength(6);
    expect(lines.slice(0, 5).every((l) => / enriched \(200\)$/.test(l))).toBe(true);
    expect(lines[5]).toMatch(
      /^enrich: 5\/5 done \(enriched 5,.*stopped: limit reached; enrich budget left \d+/,
    );
  });

  it('stops normally when nothing is due, and --json prints one summary', async () => {
    const actors = await insertPending(t.db, 'actor', 2, { firstId: 300 });
    serveProfiles(actors, []);
    const r = await spawnEnrich(['--limit', '10', '--class', 'actor', '--json']);
    expect(r.code).toBe(0);
    const summary = JSON.parse(r.out);
    expect(summary).toMatchObject({
      limit: 10,
      done: 2,
      stoppedBy: 'nothing_due',
      outcomes: { enriched: 2 },
    });
    expect(summary.entities.map((e: { id: number }) => e.id)).toEqual([300, 301]);
  });

  it.each([['0'], ['-3'], ['abc'], ['2.5']])(
    '--limit %s is a usage error (exit 2)',
    async (limit) => {
      const r = await spawnEnrich([`--limit=${limit}`]);
      expect(r.code).toBe(2);
      expect(r.err).toMatch(/--limit must be a positive integer/);
      expect(fake.requests).toHaveLength(0);
    },
  );

  it('three concurrent --limit 10 runs: never two requests in flight, 30 distinct entities', async () => {
    const actors = await insertPending(t.db, 'actor', 15, { firstId: 1000 });
    const repos = await insertPending(t.db, 'repository', 15, { firstId: 2000 });
    serveProfiles(actors, repos);

    const runs = await Promise.all([1, 2, 3].map(() => spawnEnrich(['--limit', '10'])));
    for (const r of runs) {
      expect(r.code, r.err).toBe(0);
      expect(r.out).toMatch(/enrich: 10\/10 done/);
    }
    expect(fake.maxInFlight).toBe(1);
    expect(fake.secondaryLimitHits).toBe(0);
    const paths = fake.requests.map((q) => q.path);
    expect(paths).toHaveLength(30);
    expect(new Set(paths).size).toBe(30);
    expect(await statesOf(t.db, 'actor')).toEqual({ enriched: 15 });
    expect(await statesOf(t.db, 'repository')).toEqual({ enriched: 15 });
  });
});
