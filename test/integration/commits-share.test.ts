import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createGitHubClient } from '../../src/budget/client.ts';
import type { GitHubClient } from '../../src/budget/client-types.ts';
import { fetchCycle } from '../../src/commits/cycle.ts';
import { fetchOnce } from '../../src/commits/fetch-rest.ts';
import type { FetchDeps } from '../../src/commits/outcomes.ts';
import { enrichClasses } from '../../src/enrichment/cycle.ts';
import { enrichOnce } from '../../src/enrichment/runner.ts';
import { fixedClock } from '../../src/platform/clock.ts';
import { loadConfig } from '../../src/platform/config/config.ts';
import { createLogger } from '../../src/platform/log.ts';
import { readBackground, shareRule, splitOf } from '../../src/work/split.ts';
import {
  chain,
  freshCommitWorld,
  insertPushes,
  insertRepository,
  newSha,
  pushState,
} from '../support/commit-world.ts';
import { useTestDatabase } from '../support/db.ts';
import { userProfile } from '../support/github-factories.ts';
import { useFakeGitHub } from '../support/use-fake-github.ts';
import { insertPending } from './enrichment-fixtures.ts';

/**
 * Commits beside enrichment (ADR 0071): one background allowance, floor(60 × 2/3) = 40 for
 * an unauthenticated credential, split by COMMITS_SHARE while both sides have due work,
 * whole to either side while the other has none; polls keep their 20; never a 403.
 */

const t = useTestDatabase();
const fake = useFakeGitHub();
const clients: GitHubClient[] = [];

beforeEach(async () => {
  await freshCommitWorld(t.db, fake, ['enrichment_attempts']);
});
afterEach(async () => {
  await Promise.all(clients.splice(0).map((c) => c.close()));
});

function deps(env: Record<string, string> = {}): FetchDeps {
  const config = loadConfig({
    DATABASE_URL: t.url,
    GITHUB_API_URL: fake.url,
    LOG_LEVEL: 'silent',
    // The clock below never moves, so secondary-limit pacing measured against it would wait
    // out a full spacing in real time per request; pacing has its own tests
    // (github-pacing.test.ts), this file counts shares.
    GITHUB_ENDPOINT_RATE_PER_MINUTE: '0',
    ...env,
  });
  const logger = createLogger('silent');
  const clock = fixedClock(new Date());
  const github = createGitHubClient({ config, db: t.db, databaseUrl: t.url, logger, clock });
  clients.push(github);
  return { config, db: t.db, github, logger, workerId: 'share-test', clock };
}

async function pendingActors(n: number): Promise<void> {
  const ids = await insertPending(t.db, 'actor', n, { firstId: 500 });
  for (const id of ids) fake.setUser(userProfile({ id, login: `user-${id}` }));
}

async function pendingPushes(n: number): Promise<void> {
  await insertRepository(t.db, 77, 'share/repo');
  const shas = chain(fake, 'share/repo', 2);
  await insertPushes(
    t.db,
    Array.from({ length: n }, (_, i) => ({
      repositoryId: 77,
      ref: `refs/heads/b${i}`,
      before: shas[0]!,
      head: shas[1]!,
    })),
  );
}

/** Both sides in turn until each is told no (or has nothing left): what each spent. */
async function runBoth(d: FetchDeps) {
  const spent = { commits: 0, enrich: 0 };
  let commitsOpen = true;
  let enrichOpen = true;
  while (commitsOpen || enrichOpen) {
    if (commitsOpen) {
      const r = await fetchOnce(d);
      if (r.outcome === 'idle' || r.outcome === 'budget_exhausted') commitsOpen = false;
      else spent.commits += r.requests;
    }
    if (enrichOpen) {
      const r = await enrichOnce(d, 'actor');
      if (r.outcome === 'idle' || r.outcome === 'budget_exhausted') enrichOpen = false;
      else spent.enrich += 1;
    }
  }
  return spent;
}

const forbidden = () => fake.requests.filter((r) => r.status === 403 || r.status === 429);

describe('the share', () => {
  it('splits ceil(background × COMMITS_SHARE) for commits, the rest for enrichment', () => {
    expect(splitOf(40, 0.5)).toEqual({ commits: 20, enrich: 20 });
    expect(splitOf(3333, 0.5)).toEqual({ commits: 1667, enrich: 1666 });
    expect(splitOf(40, 0)).toEqual({ commits: 0, enrich: 40 });
    expect(splitOf(40, 1)).toEqual({ commits: 40, enrich: 0 });
  });

  it('both sides busy: each takes its part, 0 × 403, and polls keep theirs', async () => {
    const d = deps(); // token-less: 60 an hour, 40 background
    await pendingActors(30);
    await pendingPushes(30);
    expect(await runBoth(d)).toEqual({ commits: 20, enrich: 20 });
    expect(forbidden()).toHaveLength(0);
    const b = await d.github.budget();
    expect(b.spent).toEqual({ poll: 0, enrich: 20, commits: 20 });
    expect((await d.github.tryReserve('poll')).ok).toBe(true);
  });

  it('COMMITS_SHARE 0.25 gives commits a quarter while enrichment waits', async () => {
    const d = deps({ COMMITS_SHARE: '0.25' });
    await pendingActors(40);
    await pendingPushes(40);
    expect(await runBoth(d)).toEqual({ commits: 10, enrich: 30 });
    expect(forbidden()).toHaveLength(0);
  });

  it('a side with nothing due leaves its part: commits alone take the whole 40', async () => {
    const d = deps();
    await pendingPushes(50);
    expect(await runBoth(d)).toEqual({ commits: 40, enrich: 0 });
    expect(forbidden()).toHaveLength(0);
    expect((await d.github.tryReserve('poll')).ok).toBe(true);
  });

  it('and enrichment alone takes the whole 40', async () => {
    const d = deps();
    await pendingActors(50);
    expect(await runBoth(d)).toEqual({ commits: 0, enrich: 40 });
    expect(forbidden()).toHaveLength(0);
  });

  it('when enrichment runs dry, commits take what it left', async () => {
    const d = deps();
    await pendingActors(5);
    await pendingPushes(50);
    expect(await runBoth(d)).toEqual({ commits: 35, enrich: 5 });
  });
});

/**
 * Shares are floors, not fences (ADR 0181), with commits by GraphQL: their points are a
 * window of their own, so their REST floor is lent to enrichment until a push GraphQL cannot
 * prove (an octopus merge) is told no a REST compare; from then on enrichment stops at its
 * own floor until that push is served, and borrows again after.
 */
describe('floors, not fences: commits by GraphQL', () => {
  function tokenDeps() {
    const config = loadConfig({
      DATABASE_URL: t.url,
      GITHUB_API_URL: fake.url,
      GITHUB_TOKEN: `ghp_floors${Math.random().toString(36).slice(2)}`,
      LOG_LEVEL: 'silent',
      GITHUB_ENDPOINT_RATE_PER_MINUTE: '0',
    });
    const logger = createLogger('silent');
    const clock = fixedClock(new Date());
    const github = createGitHubClient({ config, db: t.db, databaseUrl: t.url, logger, clock });
    clients.push(github);
    return { config, db: t.db, github, logger, workerId: 'floors-test', clock };
  }

  /** A linear push GraphQL proves, and an octopus of nine it gives to REST compare. */
  async function pushesWithAnOctopus(): Promise<string> {
    await insertRepository(t.db, 91, 'floors/octopus');
    const root = chain(fake, 'floors/octopus', 2);
    const legs = Array.from({ length: 9 }, () => chain(fake, 'floors/octopus', 1, root[1]!)[0]!);
    const octopus = newSha();
    fake.addCommits('floors/octopus', [{ sha: octopus, parents: legs }]);
    await insertPushes(t.db, [
      { repositoryId: 91, ref: 'refs/heads/line', before: root[0]!, head: root[1]! },
      { repositoryId: 91, before: legs[0]!, head: octopus },
    ]);
    return octopus;
  }

  it('lends commits’ floor to enrichment, takes it back while a fallback waits, and lends again once it is served', async () => {
    // A token of 60 an hour: a background of 40, floors of 20 and 20.
    const reset = new Date(Date.now() + 1800_000);
    fake.setRateLimit({ limit: 60, remaining: 60, resetAt: reset });
    const d = tokenDeps();
    const read = () => readBackground(t.db, d.github, shareRule(d.config, d.github), d.clock.now());
    await pendingActors(80);
    const octopus = await pushesWithAnOctopus();
    expect(d.github.graphqlEnabled).toBe(true);

    // Commits have pushes due, but by GraphQL: nothing waits for REST, so enrichment takes
    // the whole background — its floor and the 20 commits lend.
    const first = await enrichClasses(d, ['actor']);
    expect(first).toMatchObject({ processed: 40, stoppedBy: 'budget_exhausted' });
    expect(await read()).toMatchObject({
      allowance: 40,
      floors: { enrich: 20, commits: 20 },
      spent: { enrich: 40, commits: 0 },
      lent: { enrich: 0, commits: 20 },
      waiting: { enrich: true, commits: false },
    });

    // The GraphQL cycle proves the linear push; the octopus goes to REST and is told no.
    const blocked = await fetchCycle(d);
    expect(blocked.outcomes.complete).toBe(1);
    expect(blocked.stoppedBy).toBe('budget_exhausted');
    expect(await pushState(t.db, octopus)).toMatchObject({
      commits_state: 'pending',
      commits_attempts: 0,
    });
    const waiting = await read();
    expect(waiting.waiting.commits).toBe(true);
    expect(waiting.commitsWaitingSince).not.toBeNull();

    // The next window: enrichment takes its floor and stops there, told no by the share
    // rule (not the budget), leaving commits theirs.
    fake.setRateLimit({ remaining: 60, resetAt: new Date(reset.getTime() + 1000 + 3600_000) });
    d.clock.set(new Date(reset.getTime() + 1000));
    const floor = await enrichClasses(d, ['actor']);
    expect(floor).toMatchObject({
      processed: 20,
      stoppedBy: 'budget_exhausted',
      refusal: { reason: 'share' },
    });

    // The octopus is served by REST from commits' floor, which ends the wait…
    const served = await fetchCycle(d);
    expect(served.outcomes.complete).toBe(1);
    expect(served.requests).toBe(1);
    expect(await pushState(t.db, octopus)).toMatchObject({ commits_state: 'complete' });
    expect((await read()).waiting.commits).toBe(false);

    // …and enrichment borrows what commits leave again.
    const again = await enrichClasses(d, ['actor'], { maxEntities: 5 });
    expect(again).toMatchObject({ processed: 5, stoppedBy: 'cap' });
    expect(await read()).toMatchObject({
      spent: { enrich: 25, commits: 1 },
      lent: { enrich: 0, commits: 5 },
    });
    expect(forbidden()).toHaveLength(0);
  });
});
