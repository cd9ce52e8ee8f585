import { sql } from 'kysely';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createGitHubClient } from '../../src/budget/client.ts';
import type { GitHubClient } from '../../src/budget/client-types.ts';
import { enrichCycle } from '../../src/enrichment/cycle.ts';
import { type EnrichDeps, enrichOnce } from '../../src/enrichment/runner.ts';
import { fixedClock } from '../../src/platform/clock.ts';
import { type Config, loadConfig } from '../../src/platform/config/config.ts';
import { createDb, type Db } from '../../src/platform/db/pool.ts';
import { jsonInteger } from '../../src/platform/json/exact.ts';
import { createLogger } from '../../src/platform/log.ts';
import { useTestDatabase } from '../support/db.ts';
import { repoProfile, userProfile } from '../support/github-factories.ts';
import { useFakeGitHub } from '../support/use-fake-github.ts';
import {
  attemptsOf,
  entityRow,
  insertEntities,
  insertPending,
  rowText,
  statesOf,
} from './enrichment-fixtures.ts';

const t = useTestDatabase();
const fake = useFakeGitHub();
const clients: GitHubClient[] = [];
const logger = createLogger('silent');

beforeEach(async () => {
  await sql`TRUNCATE actors, repositories, enrichment_attempts, github_requests, github_rate_limits`.execute(
    t.db,
  );
});
afterEach(async () => {
  await Promise.all(clients.splice(0).map((c) => c.close()));
});

function testConfig(env: Record<string, string> = {}): Config {
  const base = loadConfig({
    DATABASE_URL: t.url,
    GITHUB_API_URL: fake.url,
    LOG_LEVEL: 'silent',
    ENRICH_MAX_ATTEMPTS: '3',
    ...env,
  });
  // A hanging GitHub must cost a test a fraction of a second, not the default 15 s.
  return { ...base, github: { ...base.github, responseTimeoutMs: 400 } };
}

/** A runner with its own GitHub client (and, when given, its own pool: a separate process in miniature). */
function runner(
  opts: {
    env?: Record<string, string>;
    db?: Db;
    workerId?: string;
    clock?: ReturnType<typeof fixedClock>;
  } = {},
): EnrichDeps & { clock: ReturnType<typeof fixedClock> } {
  const config = testConfig(opts.env);
  const db = opts.db ?? t.db;
  // One clock for the runner and its client: moving time moves leases, backoff, TTL and
  // GitHub's rate-limit hour together.
  const clock = opts.clock ?? fixedClock(new Date());
  const github = createGitHubClient({ config, db, databaseUrl: t.url, logger, clock });
  clients.push(github);
  return { config, db, github, logger, workerId: opts.workerId ?? 'test-runner', clock };
}

/**
 * Half-way through GitHub's rate-limit hour (reset in 30 min), as a running system would
 * be. (A bucket born with the first request resets on a whole second up to 1 s after the
 * hour began, which lets requests of that first second fall outside the budget's window.)
 */
function midWindow(): void {
  fake.setRateLimit({ resetAt: new Date(Date.now() + 1800_000) });
}

const profileRequests = () =>
  fake.requests.filter((r) => /^\/(users|repos|repositories)\//.test(r.path));

describe('enrichOnce outcomes', () => {
  it('a 64-bit id beyond 2^53: claimed, fetched and stored under its exact id', async () => {
    const id = '9007199254740993'; // 2^53 + 1: Number() would make it ...992
    await sql`INSERT INTO actors (id, login) VALUES (${id}::bigint, 'bigid')`.execute(t.db);
    // Served as a JSON number with every digit, as GitHub would send it.
    fake.setUser({ ...userProfile({ login: 'bigid' }), id: jsonInteger(id) as unknown as number });
    const r = await enrichOnce(runner(), 'actor');
    expect(r).toMatchObject({ outcome: 'enriched', entityId: id, status: 200 });
    const row = await sql<{ state: string; profile_id: string }>`
      SELECT enrichment_state AS state, profile->>'id' AS profile_id FROM actors
      WHERE id = ${id}::bigint`.execute(t.db);
    expect(row.rows).toEqual([{ state: 'enriched', profile_id: id }]);
    await sql`DELETE FROM actors WHERE id = ${id}::bigint`.execute(t.db);
  });

  it('200: stores the actor profile and etag, records the attempt, then is idle', async () => {
    await insertEntities(t.db, 'actor', [{ id: 583231, name: 'octocat' }]);
    fake.setUser(userProfile({ id: 583231, login: 'octocat', name: 'The Octocat', followers: 99 }));
    const deps = runner();

    const r = await enrichOnce(deps, 'actor', { jobId: 'job-1' });
    expect(r).toMatchObject({
      outcome: 'enriched',
      class: 'actor',
      entityId: '583231',
      status: 200,
    });
    const row = await entityRow(t.db, 'actor', 583231);
    expect(row).toMatchObject({
      enrichment_state: 'enriched',
      name: 'The Octocat',
      followers: 99,
      type: 'User',
      attempts: 0,
      claimed_until: null,
      claimed_by: null,
    });
    expect(row.etag).toMatch(/^W\/"/);
    expect((row.profile as { login: string }).login).toBe('octocat');
    const [attempt] = await attemptsOf(t.db, 'actor', 583231);
    expect(attempt).toMatchObject({
      attempt: 1,
      outcome: 'enriched',
      http_status: 200,
      job_id: 'job-1',
    });
    expect(attempt!.finished_at).not.toBeNull();
    const ledger = await t.db.selectFrom('github_requests').selectAll().execute();
    expect(ledger).toMatchObject([
      { purpose: 'enrich', entity_class: 'actor', entity_id: '583231', status: 200 },
    ]);

    // Twice on the same state changes nothing twice: idle, no second request.
    expect(await enrichOnce(deps, 'actor')).toEqual({ outcome: 'idle', class: 'actor' });
    expect(profileRequests()).toHaveLength(1);
  });

  it('[bot] logins are path-encoded and enriched', async () => {
    await insertEntities(t.db, 'actor', [{ id: 49699333, name: 'dependabot[bot]' }]);
    fake.setUser(userProfile({ id: 49699333, login: 'dependabot[bot]' }));
    const r = await enrichOnce(runner(), 'actor');
    expect(r).toMatchObject({ outcome: 'enriched', status: 200 });
    expect(fake.requests[0]).toMatchObject({
      path: '/users/dependabot[bot]',
      rawUrl: '/users/dependabot%5Bbot%5D',
    });
    expect(await entityRow(t.db, 'actor', 49699333)).toMatchObject({
      type: 'Bot',
      enrichment_state: 'enriched',
    });
  });

  it('TTL refresh is a conditional request: 304 moves enriched_at and costs no quota', async () => {
    await insertEntities(t.db, 'repository', [{ id: 1296269, name: 'octocat/Hello-World' }]);
    fake.setRepo(repoProfile({ id: 1296269, full_name: 'octocat/Hello-World' }));
    const deps = runner();
    expect((await enrichOnce(deps, 'repository')).outcome).toBe('enriched');
    const first = await entityRow(t.db, 'repository', 1296269);

    // Within the TTL: nothing to do.
    deps.clock.advance(6 * 86400_000);
    expect((await enrichOnce(deps, 'repository')).outcome).toBe('idle');
    // Past it: the sweep makes it due, and the refresh carries the etag.
    deps.clock.advance(2 * 86400_000);
    const r = await enrichOnce(deps, 'repository');
    expect(r).toMatchObject({ outcome: 'not_modified', status: 304 });
    const refresh = profileRequests()[1]!;
    expect(refresh.headers['if-none-match']).toBe(first.etag);
    expect(refresh.counted).toBe(false);
    const after = await entityRow(t.db, 'repository', 1296269);
    expect(after).toMatchObject({ enrichment_state: 'enriched', etag: first.etag });
    expect(after.enriched_at).toEqual(deps.clock.now());
    expect((after.enriched_at as Date) > (first.enriched_at as Date)).toBe(true);
    expect(fake.countedRequests).toBe(1);
  });

  it('404 → gone (terminal): never asked for again', async () => {
    await insertEntities(t.db, 'actor', [{ id: 77, name: 'deleted-user' }]);
    const deps = runner();
    expect(await enrichOnce(deps, 'actor')).toMatchObject({ outcome: 'gone', status: 404 });
    expect(await entityRow(t.db, 'actor', 77)).toMatchObject({
      enrichment_state: 'gone',
      claimed_until: null,
    });
    expect((await attemptsOf(t.db, 'actor', 77))[0]).toMatchObject({
      outcome: 'gone',
      http_status: 404,
    });
    deps.clock.advance(30 * 86400_000);
    expect((await enrichOnce(deps, 'actor')).outcome).toBe('idle');
    expect(profileRequests()).toHaveLength(1);
  });

  it('301 renamed repository: the new full_name is stored under the same id', async () => {
    await insertEntities(t.db, 'repository', [{ id: 42, name: 'old-owner/old-name' }]);
    fake.setRepo(repoProfile({ id: 42, full_name: 'old-owner/old-name' }));
    fake.renameRepo('old-owner/old-name', 'new-owner/new-name');
    const r = await enrichOnce(runner(), 'repository');
    expect(r).toMatchObject({ outcome: 'enriched', status: 200, name: 'new-owner/new-name' });
    expect(await entityRow(t.db, 'repository', 42)).toMatchObject({
      full_name: 'new-owner/new-name',
      enrichment_state: 'enriched',
    });
    expect(fake.requests.map((q) => q.path)).toEqual([
      '/repos/old-owner/old-name',
      '/repositories/42',
    ]);
  });

  it.each([
    ['5xx', { status: 502 }],
    ['timeout', { hang: true }],
    ['malformed body', { status: 200, body: '{"id": 5, "login": "trunc' }],
  ])('%s → retry: attempts + 1, next attempt on the backoff ladder', async (_, fault) => {
    // Due a second ago by the JS clock: the database's now() default can be microseconds past
    // the millisecond the runner's fixed clock is created at, and then it is not due yet.
    const due = new Date(Date.now() - 1000);
    await insertEntities(t.db, 'actor', [{ id: 5, name: 'flaky', next_attempt_at: due }]);
    fake.setUser(userProfile({ id: 5, login: 'flaky' }));
    fake.fail({ path: '/users/flaky', ...fault });
    const deps = runner();
    const now = deps.clock.now();
    const r = await enrichOnce(deps, 'actor');
    expect(r.outcome).toBe('retry');
    const row = await entityRow(t.db, 'actor', 5);
    expect(row).toMatchObject({ enrichment_state: 'pending', attempts: 1, claimed_until: null });
    expect(row.next_attempt_at).toEqual(new Date(now.getTime() + 60_000));
    expect(row.last_error).toBeTruthy();
    expect((await attemptsOf(t.db, 'actor', 5))[0]).toMatchObject({ outcome: 'retry', attempt: 1 });
    // Not due again until the backoff has passed; then it succeeds.
    expect((await enrichOnce(deps, 'actor')).outcome).toBe('idle');
    deps.clock.advance(61_000);
    expect(await enrichOnce(deps, 'actor')).toMatchObject({ outcome: 'enriched', entityId: '5' });
    expect((await attemptsOf(t.db, 'actor', 5)).map((a) => a.attempt)).toEqual([1, 2]);
  });

  it('exhausted attempts land in failed, not in a loop', async () => {
    await insertEntities(t.db, 'repository', [{ id: 9, name: 'broken/repo' }]);
    fake.fail({ path: '/repos/broken/repo', status: 500, times: Number.POSITIVE_INFINITY });
    const deps = runner(); // ENRICH_MAX_ATTEMPTS=3
    const outcomes: string[] = [];
    for (let i = 0; i < 6; i++) {
      outcomes.push((await enrichOnce(deps, 'repository')).outcome);
      deps.clock.advance(7 * 3600_000);
    }
    expect(outcomes).toEqual(['retry', 'retry', 'failed', 'idle', 'idle', 'idle']);
    expect(await entityRow(t.db, 'repository', 9)).toMatchObject({
      enrichment_state: 'failed',
      attempts: 3,
    });
    expect(profileRequests()).toHaveLength(3);
  });

  it('403 rate limit: released without penalty until the reset, and the cycle stops', async () => {
    await insertPending(t.db, 'actor', 3, { firstId: 300 });
    for (const id of [300, 301, 302]) fake.setUser(userProfile({ id, login: `user-${id}` }));
    const resetAt = new Date(Math.ceil(Date.now() / 1000) * 1000 + 1800_000);
    fake.fail({
      path: '/users/user-300',
      status: 403,
      body: JSON.stringify({ message: 'API rate limit exceeded' }),
      headers: {
        'x-ratelimit-remaining': '0',
        'x-ratelimit-reset': String(resetAt.getTime() / 1000),
      },
    });
    const deps = runner();
    const summary = await enrichCycle(deps, 'actor');
    expect(summary).toMatchObject({ stoppedBy: 'rate_limited', processed: 1 });
    const row = await entityRow(t.db, 'actor', 300);
    expect(row).toMatchObject({ enrichment_state: 'pending', attempts: 0, claimed_until: null });
    expect((row.next_attempt_at as Date).getTime()).toBeGreaterThanOrEqual(resetAt.getTime());
    expect((await attemptsOf(t.db, 'actor', 300))[0]).toMatchObject({
      outcome: 'rate_limited',
      http_status: 403,
    });
    expect(profileRequests()).toHaveLength(1);
  });
});

describe('claims under concurrency and crashes', () => {
  it('two runners on separate pools never claim the same entity or request a path twice', async () => {
    const ids = await insertPending(t.db, 'actor', 12, { firstId: 1000 });
    for (const id of ids) fake.setUser(userProfile({ id, login: `user-${id}` }));
    const a = runner({ workerId: 'a' });
    const b = runner({ db: createDb(t.newPool(3)), workerId: 'b' });
    const [sa, sb] = await Promise.all([enrichCycle(a, 'actor'), enrichCycle(b, 'actor')]);
    expect(sa.processed + sb.processed).toBe(12);
    const paths = profileRequests().map((r) => r.path);
    expect(paths).toHaveLength(12);
    expect(new Set(paths).size).toBe(12);
    expect(fake.maxInFlight).toBe(1);
    expect(await statesOf(t.db, 'actor')).toEqual({ enriched: 12 });
  });

  it("a crashed worker's lease is skipped until it expires, then enriched (no cleanup code)", async () => {
    const deps = runner();
    const now = deps.clock.now();
    await insertEntities(t.db, 'actor', [
      {
        id: 88,
        name: 'leased',
        next_attempt_at: new Date(now.getTime() - 3600_000),
        claimed_until: new Date(now.getTime() + 45_000),
        claimed_by: 'crashed-host:123',
      },
    ]);
    // The crashed attempt's ledger row, left open.
    await t.db
      .insertInto('enrichment_attempts')
      .values({ class: 'actor', entity_id: 88, attempt: 1, worker: 'crashed-host:123' })
      .execute();
    fake.setUser(userProfile({ id: 88, login: 'leased' }));
    expect((await enrichOnce(deps, 'actor')).outcome).toBe('idle');
    expect(fake.requests).toHaveLength(0);
    deps.clock.advance(46_000);
    expect(await enrichOnce(deps, 'actor')).toMatchObject({ outcome: 'enriched', entityId: '88' });
    expect((await attemptsOf(t.db, 'actor', 88)).map((a) => a.outcome)).toEqual([
      'interrupted',
      'enriched',
    ]);
  });

  it('a runner whose lease expired mid-request changes nothing; its attempt is interrupted', async () => {
    await insertEntities(t.db, 'actor', [{ id: 99, name: 'slow' }]);
    fake.setUser(userProfile({ id: 99, login: 'slow' }));
    // While the request is in flight the lease runs out and another worker takes the row.
    fake.onRequest = async () => {
      await sql`UPDATE actors SET claimed_by = 'other:1', claimed_until = now() + interval '1 minute' WHERE id = 99`.execute(
        t.db,
      );
    };
    try {
      const r = await enrichOnce(runner(), 'actor');
      expect(r).toMatchObject({ outcome: 'retry', entityId: '99' });
      expect(r.detail).toMatch(/lease lost/);
    } finally {
      fake.onRequest = null;
    }
    expect(await entityRow(t.db, 'actor', 99)).toMatchObject({
      enrichment_state: 'pending',
      claimed_by: 'other:1',
      name: null,
      attempts: 0,
    });
    expect((await attemptsOf(t.db, 'actor', 99))[0]).toMatchObject({
      outcome: 'interrupted',
      http_status: 200,
    });
  });
});

describe('budget and fairness', () => {
  it('budget told no: the claim is released and the row is byte-identical', async () => {
    await insertEntities(t.db, 'repository', [
      {
        id: 7,
        name: 'o/r',
        etag: '"e"',
        attempts: 1,
        claimed_until: '2020-01-01T00:00:00.123456Z',
        claimed_by: 'old',
      },
    ]);
    const before = await rowText(t.db, 'repository', 7);
    // ENRICH_SHARE 0.01 of 60/h: enrichment's allowance is 0 — the budget says no.
    const deps = runner({ env: { ENRICH_SHARE: '0.01' } });
    const r = await enrichOnce(deps, 'repository');
    expect(r).toMatchObject({ outcome: 'budget_exhausted', entityId: '7' });
    expect(await rowText(t.db, 'repository', 7)).toBe(before);
    expect(fake.requests).toHaveLength(0);
    expect(await attemptsOf(t.db, 'repository', 7)).toHaveLength(0);
  });

  it('1,000 pending repositories and 10 pending actors with a budget of 20: actors are not starved', async () => {
    await insertPending(t.db, 'repository', 1000, { firstId: 10_000 });
    const actorIds = await insertPending(t.db, 'actor', 10, { firstId: 500 });
    for (const id of actorIds) fake.setUser(userProfile({ id, login: `user-${id}` }));
    for (let id = 10_000; id < 11_000; id++)
      fake.setRepo(repoProfile({ id, full_name: `owner-${id}/repo-${id}` }));
    midWindow();
    // 60/h × 1/3 = an enrichment allowance of 20.
    const deps = runner({ env: { ENRICH_SHARE: '0.3334' } });
    expect((await deps.github.budget()).allowance.enrich).toBe(20);

    // The repository flood goes first and takes everything it may…
    const repos = await enrichCycle(deps, 'repository');
    expect(repos).toMatchObject({ stoppedBy: 'budget_exhausted', processed: 10 });
    // …which leaves the actors their half.
    const actors = await enrichCycle(deps, 'actor');
    expect(actors.processed).toBe(10);
    expect(await statesOf(t.db, 'actor')).toEqual({ enriched: 10 });
    expect((await enrichCycle(deps, 'repository')).processed).toBe(0);
    expect(fake.countedRequests).toBe(20);
  });

  it('the split is work-conserving: with no actors due, repositories use the whole allowance', async () => {
    await insertPending(t.db, 'repository', 30, { firstId: 20_000 });
    for (let id = 20_000; id < 20_030; id++)
      fake.setRepo(repoProfile({ id, full_name: `owner-${id}/repo-${id}` }));
    midWindow();
    const deps = runner({ env: { ENRICH_SHARE: '0.3334' } });
    const summary = await enrichCycle(deps, 'repository');
    expect(summary).toMatchObject({ stoppedBy: 'budget_exhausted', processed: 20 });
    expect(fake.countedRequests).toBe(20);
  });

  it('with the quota nearly exhausted, stops before GitHub answers 403 and resumes after the reset', async () => {
    await insertPending(t.db, 'actor', 10, { firstId: 700 });
    for (let id = 700; id < 710; id++) fake.setUser(userProfile({ id, login: `user-${id}` }));
    fake.setRateLimit({ remaining: 4, resetAt: new Date(Date.now() + 1800_000) });
    const deps = runner();
    const first = await enrichCycle(deps, 'actor');
    expect(first).toMatchObject({ stoppedBy: 'budget_exhausted', processed: 4 });
    expect(fake.requests.map((r) => r.status)).toEqual([200, 200, 200, 200]);
    expect(await statesOf(t.db, 'actor')).toEqual({ enriched: 4, pending: 6 });

    // GitHub's hour ends: its bucket refills, and our clock passes the reset it announced.
    const { resetAt } = fake.rateLimit();
    fake.setRateLimit({ remaining: 60, resetAt: new Date(Date.now() + 3600_000) });
    deps.clock.set(new Date(resetAt.getTime() + 1000));
    const second = await enrichCycle(deps, 'actor');
    expect(second).toMatchObject({ stoppedBy: 'idle', processed: 6 });
    expect(await statesOf(t.db, 'actor')).toEqual({ enriched: 10 });
    expect(fake.requests.some((r) => r.status === 403)).toBe(false);
  });
});
