import { sql } from 'kysely';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createGitHubClient } from '../../src/budget/client.ts';
import type { GitHubClient } from '../../src/budget/client-types.ts';
import { fetchCycle } from '../../src/commits/cycle.ts';
import { enrichCycle } from '../../src/enrichment/cycle.ts';
import { createLogger } from '../../src/platform/log.ts';
import { chain, insertPushes, insertRepository, pushShas } from '../support/commit-world.ts';
import { useTestDatabase } from '../support/db.ts';
import type { RecordedRequest } from '../support/fake-github-types.ts';
import { randomToken, testConfig } from '../support/github-client.ts';
import { userProfile } from '../support/github-factories.ts';
import { useFakeGitHub } from '../support/use-fake-github.ts';
import { insertPending, statesOf } from './enrichment-fixtures.ts';

/**
 * The fetch loop's lanes against the fake GitHub (ADR 0170): with a pool of three tokens a
 * cycle has more than one request in flight — one a credential, never two on one (the fake
 * answers a second concurrent request of a credential with a secondary-limit 403) — and still
 * works on every entity exactly once: one attempt row, one ledger row, one request each.
 * With one token the cycle stays one request at a time.
 */

const t = useTestDatabase();
const fake = useFakeGitHub();
const clients: GitHubClient[] = [];
const logger = createLogger('silent');

beforeEach(async () => {
  await sql`TRUNCATE actors, repositories, enrichment_attempts, github_requests, github_rate_limits,
    push_events, stored_commits, commit_fetch_turns`.execute(t.db);
  fake.setRateLimit({ resetAt: new Date(Date.now() + 1800_000) });
});
afterEach(async () => {
  await Promise.all(clients.splice(0).map((c) => c.close()));
});

/** Deps over `tokens` fresh tokens (no in-flight plan: the cycle plans from the client's). */
function deps(tokens: number, env: Record<string, string> = {}) {
  const list = Array.from({ length: tokens }, randomToken);
  const config = testConfig(t, {
    apiUrl: fake.url,
    token: null,
    env: { GITHUB_TOKENS: list.join(','), ...env },
    // Above the hold's bound: a held request must not time out while the others arrive.
    responseTimeoutMs: 45_000,
  });
  const github = createGitHubClient({ config, db: t.db, databaseUrl: t.url, logger });
  clients.push(github);
  return { config, db: t.db, github, logger, workerId: 'lanes' };
}

/**
 * Holds the first matching requests until `n` of them are in flight at once: a signal only
 * concurrent lanes can give. The timer is only a bound for a failing run (then `met` stays
 * false and the held request answers late); it is long, since on a loaded machine a lane's
 * work before its first request (a batch's claims) takes seconds.
 */
function holdUntilInFlight(n: number, match: (r: RecordedRequest) => boolean) {
  let met = false;
  let gaveUp = false;
  let open!: () => void;
  const opened = new Promise<void>((r) => {
    open = r;
  });
  const bound = setTimeout(() => {
    gaveUp = true;
    open();
  }, 30_000);
  let arrived = 0;
  fake.onRequest = async (r) => {
    if (met || gaveUp || !match(r)) return;
    arrived += 1;
    if (arrived >= n) {
      met = true;
      clearTimeout(bound);
      open();
      return;
    }
    await opened;
  };
  return {
    met: () => met,
    done: () => clearTimeout(bound),
  };
}

const isProfile = (r: RecordedRequest) => r.path.startsWith('/users/');
const isCompare = (r: RecordedRequest) => r.path.includes('/compare/');

async function ledger(purpose: string): Promise<{ rows: number; credentials: number }> {
  const r = await sql<{ rows: string; credentials: string }>`
    SELECT count(*) AS rows, count(DISTINCT credential) AS credentials
    FROM github_requests WHERE purpose = ${purpose}`.execute(t.db);
  return { rows: Number(r.rows[0]!.rows), credentials: Number(r.rows[0]!.credentials) };
}

describe('fetch cycles run a lane a credential', () => {
  it('enrichment with three tokens: requests in flight at once, every actor enriched exactly once', async () => {
    const ids = await insertPending(t.db, 'actor', 24, { firstId: 5000 });
    for (const id of ids) fake.setUser(userProfile({ id, login: `user-${id}` }));
    const d = deps(3);
    const hold = holdUntilInFlight(3, isProfile);
    const summary = await enrichCycle(d, 'actor');
    hold.done();

    expect(hold.met()).toBe(true);
    expect(fake.maxInFlight).toBe(3);
    // One request at a time per credential, as the gates promise; never a secondary limit.
    expect(Object.values(fake.maxInFlightByCredential).every((n) => n <= 1)).toBe(true);
    expect(fake.secondaryLimitHits).toBe(0);

    expect(summary).toMatchObject({ processed: 24, stoppedBy: 'idle' });
    expect(summary.outcomes).toMatchObject({ enriched: 24, retry: 0, failed: 0 });
    // Every lane's last step saw idle; no more than one a lane.
    expect(summary.outcomes.idle).toBeGreaterThanOrEqual(1);
    expect(summary.outcomes.idle).toBeLessThanOrEqual(3);

    expect(await statesOf(t.db, 'actor')).toEqual({ enriched: 24 });
    const attempts = await sql<{ id: string; n: string; outcomes: string[] }>`
      SELECT entity_id::text AS id, count(*) AS n, array_agg(outcome) AS outcomes
      FROM enrichment_attempts WHERE class = 'actor' GROUP BY entity_id`.execute(t.db);
    expect(attempts.rows).toHaveLength(24);
    expect(attempts.rows.every((a) => Number(a.n) === 1 && a.outcomes[0] === 'enriched')).toBe(
      true,
    );
    const paths = fake.requests.filter(isProfile).map((r) => r.path);
    expect(paths).toHaveLength(24);
    expect(new Set(paths).size).toBe(24);
    expect(await ledger('enrich')).toEqual({ rows: 24, credentials: 3 });
  });

  it('commits by REST compare with three tokens: compares in flight at once, each push fetched once', async () => {
    const heads: string[] = [];
    for (let i = 0; i < 9; i++) {
      await insertRepository(t.db, 700 + i, `octo/lane-${i}`);
      const shas = chain(fake, `octo/lane-${i}`, 3);
      await insertPushes(t.db, [{ repositoryId: 700 + i, before: shas[0]!, head: shas[2]! }]);
      heads.push(shas[2]!);
    }
    const d = deps(3, { COMMITS_TRANSPORT: 'rest' });
    const hold = holdUntilInFlight(2, isCompare);
    const summary = await fetchCycle(d);
    hold.done();

    expect(hold.met()).toBe(true);
    expect(fake.maxInFlight).toBeGreaterThan(1);
    expect(fake.secondaryLimitHits).toBe(0);
    expect(summary).toMatchObject({ processed: 9, requests: 9, stoppedBy: 'idle' });
    expect(summary.outcomes).toMatchObject({ complete: 9, retry: 0, failed: 0 });
    for (const head of heads) expect(await pushShas(t.db, head)).toHaveLength(2);
    const paths = fake.requests.filter(isCompare).map((r) => r.path);
    expect(paths).toHaveLength(9);
    expect(new Set(paths).size).toBe(9);
    expect((await ledger('commits')).rows).toBe(9);
  });

  it('commits by GraphQL with three tokens and a cap above one batch: batches in flight at once, each push once', async () => {
    // 320 one-commit pushes in 32 repositories: under a cap of 400 shared by the three lanes
    // (134 pushes of room each), three batches start at once, one a credential's #graphql
    // window.
    for (let r = 0; r < 32; r++) {
      await insertRepository(t.db, 800 + r, `octo/batch-${r}`);
      const shas = chain(fake, `octo/batch-${r}`, 11);
      await insertPushes(
        t.db,
        Array.from({ length: 10 }, (_, i) => ({
          repositoryId: 800 + r,
          before: shas[i]!,
          head: shas[i + 1]!,
        })),
      );
    }
    const d = deps(3);
    const hold = holdUntilInFlight(2, (r) => r.path === '/graphql');
    const summary = await fetchCycle(d, { maxPushes: 400 });
    hold.done();

    expect(hold.met()).toBe(true);
    expect(fake.maxInFlight).toBeGreaterThan(1);
    expect(Object.values(fake.maxInFlightByCredential).every((n) => n <= 1)).toBe(true);
    // Claimed once each: a push two batches held would have counted twice, the second a retry.
    expect(summary).toMatchObject({ processed: 320, requests: 0 });
    expect(summary.stoppedBy).toBe('idle');
    expect(summary.outcomes).toMatchObject({ complete: 320, retry: 0, failed: 0 });
    const rows = await sql<{ pushes: string; commits: string; states: string[] }>`
      SELECT (SELECT count(*) FROM push_events WHERE commits_state = 'complete') AS pushes,
        (SELECT count(*) FROM push_commits) AS commits,
        (SELECT array_agg(DISTINCT commits_state) FROM push_events) AS states`.execute(t.db);
    expect(rows.rows[0]).toEqual({ pushes: '320', commits: '320', states: ['complete'] });
    const spent = await sql<{ credentials: string; points: string }>`
      SELECT count(DISTINCT credential) AS credentials, sum(points) AS points
      FROM github_requests WHERE purpose = 'commits'`.execute(t.db);
    expect(Number(spent.rows[0]!.credentials)).toBeGreaterThan(1);
    expect(Number(spent.rows[0]!.points)).toBe(summary.points);
    expect(fake.requests.filter(isCompare)).toHaveLength(0);
  });

  it('one token: one lane, one request at a time, as before lanes', async () => {
    const ids = await insertPending(t.db, 'actor', 6, { firstId: 6000 });
    for (const id of ids) fake.setUser(userProfile({ id, login: `user-${id}` }));
    const summary = await enrichCycle(deps(1), 'actor');
    expect(summary).toMatchObject({ processed: 6, stoppedBy: 'idle' });
    expect(summary.outcomes).toMatchObject({ enriched: 6, idle: 1 });
    expect(fake.maxInFlight).toBe(1);
    expect(await ledger('enrich')).toEqual({ rows: 6, credentials: 1 });
  });
});
