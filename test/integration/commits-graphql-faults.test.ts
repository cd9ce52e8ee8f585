import { sql } from 'kysely';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { graphqlWindowRefuses } from '../../src/budget/graphql-window.ts';
import { fetchGraphQLBatch } from '../../src/commits/fetch-graphql.ts';
import { MAX_QUERY_FAILURES } from '../../src/commits/graphql/rounds.ts';
import {
  chain,
  commitFetchers,
  freshCommitWorld,
  insertPushes,
  insertRepository,
  pushShas,
} from '../support/commit-world.ts';
import { useTestDatabase } from '../support/db.ts';
import { useFakeGitHub } from '../support/use-fake-github.ts';

/**
 * A GraphQL that answers badly, through the real fetch path (fetchGraphQLBatch →
 * github.graphql() → HTTP → the fake GitHub's `/graphql` with its faults), ADR 0182: every
 * answer that is no answer — a 5xx, a 200 that is not JSON, an empty 200, one over its byte
 * cap or its text bound, a hang past the deadline — counts as a whole query's failure; three
 * of them and the batch goes to REST compare instead of halving down to a query a push; a
 * push GraphQL failed on that REST cannot take either climbs the ladder (1m, 4m, 16m …);
 * points are what GitHub's answer says they cost.
 */

const t = useTestDatabase();
const fake = useFakeGitHub();
// No pacing of REST compares: a fixed clock never lets a pacing slot come (what is measured
// here is what is asked, not how fast).
const commitDeps = commitFetchers(t, fake, {
  env: { ENRICH_MAX_ATTEMPTS: '5', GITHUB_ENDPOINT_RATE_PER_MINUTE: '0' },
  responseTimeoutMs: 2_000,
  workerId: 'gql-faults',
});
const fetcher = (env: Record<string, string> = {}) => commitDeps.fetcher({ env });
const hangFetchers = commitFetchers(t, fake, {
  env: { GITHUB_ENDPOINT_RATE_PER_MINUTE: '0' },
  responseTimeoutMs: 300,
  workerId: 'gql-hang',
});

beforeEach(async () => {
  await freshCommitWorld(t.db, fake, ['commits_graphql_minutes']);
});
afterEach(async () => {
  await commitDeps.close();
  await hangFetchers.close();
});

const compares = () => fake.requests.filter((r) => r.path.includes('/compare/'));
const MB = 1024 * 1024;

let nextRepo = 500;
/** `n` one-commit pushes, each on a repository of its own; their heads. */
async function onePushes(n: number): Promise<string[]> {
  const seeds = [];
  for (let i = 0; i < n; i++) {
    const id = nextRepo++;
    const name = `faults/r${id}`;
    await insertRepository(t.db, id, name);
    const line = chain(fake, name, 2);
    seeds.push({ repositoryId: id, before: line[0]!, head: line[1]! });
  }
  await insertPushes(t.db, seeds);
  return seeds.map((s) => s.head);
}

async function rows() {
  const r = await sql<{
    head: string;
    state: string;
    attempts: number;
    next_at: Date;
    until: Date | null;
    open: boolean;
    error: string | null;
  }>`SELECT head, commits_state AS state, commits_attempts AS attempts,
      commits_next_attempt_at AS next_at, commits_claimed_until AS until,
      commits_fetch_started_at IS NOT NULL AS open, commits_error AS error
    FROM push_events ORDER BY head`.execute(t.db);
  return r.rows;
}

/** A 200 that is JSON and GitHub-shaped, holding more text than an answer may (8 M characters). */
function tooMuchText(): string {
  const s = 'x'.repeat(60_000);
  return `{"data":{"rateLimit":{"cost":1}},"extensions":{"padding":[${Array(150).fill(`"${s}"`).join(',')}]}}`;
}

const FAULTS = [
  ['a 502', { status: 502 }],
  ['a 200 that is not JSON', { status: 200, body: '<html><body>Bad gateway</body></html>' }],
  ['an empty 200', { status: 200, body: '' }],
  ['a 200 over the 32 MB cap', { status: 200, body: `"${'x'.repeat(33 * MB)}"` }],
  ['a 200 with more text than an answer may hold', { status: 200, body: tooMuchText() }],
] as const;

describe('a GraphQL that gives no answer', () => {
  it.each(FAULTS)(
    '%s on every query: three queries, not one a push, then REST compare stores every push',
    async (_what, fault) => {
      const deps = fetcher();
      const heads = await onePushes(51);
      fake.graphql.fail({ ...fault, times: Number.POSITIVE_INFINITY });
      const b = await fetchGraphQLBatch(deps, { maxPushes: 51 });
      // Halving down to single pushes asked 101 queries for these 51.
      expect(b.queries).toBe(MAX_QUERY_FAILURES);
      expect(fake.graphql.queries).toHaveLength(MAX_QUERY_FAILURES);
      expect(b.queryFailures).toBe(MAX_QUERY_FAILURES);
      expect(b.outcomes).toMatchObject({ complete: 51, retry: 0, failed: 0 });
      expect(compares()).toHaveLength(51);
      for (const head of heads)
        expect(await pushShas(t.db, head)).toEqual([{ position: 0, sha: head }]);
      for (const r of await rows())
        expect(r).toMatchObject({ until: null, open: false, attempts: 1 });
    },
  );

  it('a hang past the answer deadline: three timed-out queries, then REST, in seconds', async () => {
    const deps = hangFetchers.fetcher();
    await onePushes(20);
    fake.graphql.fail({ delayMs: 5_000, times: Number.POSITIVE_INFINITY });
    const b = await fetchGraphQLBatch(deps, { maxPushes: 20 });
    expect(b.queries).toBe(MAX_QUERY_FAILURES);
    expect(b.outcomes).toMatchObject({ complete: 20, retry: 0, failed: 0 });
    expect(compares()).toHaveLength(20);
  });

  it('REST failing too: every push is charged an attempt and climbs 1m, 4m, 16m, 64m, then failed', async () => {
    const deps = fetcher();
    await onePushes(10);
    fake.graphql.fail({ status: 200, body: 'not json', times: Number.POSITIVE_INFINITY });
    fake.fail({ path: /\/compare\//, status: 502, times: Number.POSITIVE_INFINITY });
    const gaps: number[] = [];
    for (let attempt = 1; attempt <= 5; attempt++) {
      const now = deps.clock.now();
      const queries = fake.graphql.queries.length;
      const restAsked = compares().length;
      const b = await fetchGraphQLBatch(deps, { maxPushes: 10 });
      expect(b.claimed).toBe(10);
      // Each round: three queries, three REST compares, and the rest charged without one.
      expect(fake.graphql.queries.length - queries).toBe(MAX_QUERY_FAILURES);
      expect(compares().length - restAsked).toBe(MAX_QUERY_FAILURES);
      const after = await rows();
      for (const r of after) {
        expect(r).toMatchObject({ attempts: attempt, until: null, open: false });
        expect(r.error).toMatch(/GraphQL failed 3 queries|HTTP 502/);
      }
      if (attempt < 5) {
        expect(after.every((r) => r.state === 'pending')).toBe(true);
        const next = after[0]!.next_at.getTime();
        for (const r of after) expect(r.next_at.getTime()).toBe(next);
        gaps.push((next - now.getTime()) / 1000);
        deps.clock.set(new Date(next + 1000));
      } else {
        expect(after.every((r) => r.state === 'failed')).toBe(true);
      }
    }
    expect(gaps).toEqual([60, 240, 960, 3840]);
    // Never a push stuck at no attempt, never due again at once.
    expect(await fetchGraphQLBatch(deps, { maxPushes: 10 })).toMatchObject({ claimed: 0 });
  });

  it('the breaker charges only the pushes a failed query asked about; the rest go back uncounted', async () => {
    const deps = fetcher();
    // 200 one-commit pushes: three first-round queries of at most 74; the first fails for good.
    await onePushes(200);
    fake.graphql.fail({ status: 502, times: Number.POSITIVE_INFINITY });
    fake.fail({ path: /\/compare\//, status: 503, times: Number.POSITIVE_INFINITY });
    const b = await fetchGraphQLBatch(deps, { maxPushes: 200 });
    expect(b.queries).toBe(MAX_QUERY_FAILURES);
    const asked = new Set(
      fake.graphql.queries.flatMap((q) =>
        Object.entries(q.variables)
          .filter(([k]) => /^n\d+$/.test(k))
          .map(([, v]) => `faults/${v}`),
      ),
    );
    const all = await sql<{ name: string; attempts: number; next_at: Date; until: Date | null }>`
      SELECT r.full_name AS name, p.commits_attempts AS attempts,
        p.commits_next_attempt_at AS next_at, p.commits_claimed_until AS until
      FROM push_events p JOIN repositories r ON r.id = p.repository_id`.execute(t.db);
    const charged = all.rows.filter((r) => r.attempts === 1);
    const free = all.rows.filter((r) => r.attempts === 0);
    expect(charged.length + free.length).toBe(200);
    expect(new Set(charged.map((r) => r.name))).toEqual(asked);
    expect(asked.size).toBeGreaterThan(0);
    expect(free.length).toBeGreaterThan(0);
    for (const r of free) {
      expect(r.until === null || r.until.getTime() <= deps.clock.now().getTime()).toBe(true);
      expect(r.next_at.getTime()).toBeLessThanOrEqual(deps.clock.now().getTime());
    }
  });

  it('REST out of budget: a push GraphQL failed on is charged, not given back due at once', async () => {
    const deps = fetcher();
    await onePushes(5);
    // GitHub said the REST window is spent until its reset (the #graphql window is not).
    const rest = (await deps.github.budget()).credentials[0]!.credential;
    const now = deps.clock.now();
    await sql`INSERT INTO github_rate_limits (credential, quota, remaining, reset_at, observed_at)
      VALUES (${rest}, 5000, 0, ${new Date(now.getTime() + 1800_000)}, ${now})`.execute(t.db);
    fake.graphql.fail({ status: 200, body: '', times: Number.POSITIVE_INFINITY });
    const b = await fetchGraphQLBatch(deps, { maxPushes: 5 });
    expect(b.queries).toBe(MAX_QUERY_FAILURES);
    expect(compares()).toHaveLength(0);
    for (const r of await rows()) {
      expect(r).toMatchObject({ state: 'pending', attempts: 1, until: null });
      expect(r.next_at.getTime()).toBe(deps.clock.now().getTime() + 60_000);
      expect(r.error).toMatch(/GraphQL/);
    }
  });
});

describe('points as GitHub charges them', () => {
  async function ledger() {
    const r = await sql<{ points: number; outcome: string }>`
      SELECT points, outcome FROM github_requests WHERE credential LIKE '%#graphql' ORDER BY id`.execute(
      t.db,
    );
    return r.rows;
  }

  /** What the last GraphQL answer's headers said remains of the window. */
  async function remainingSaid(): Promise<number> {
    const r = await sql<{ n: number }>`
      SELECT rate_limit_remaining AS n FROM github_requests WHERE credential LIKE '%#graphql'
      ORDER BY id DESC LIMIT 1`.execute(t.db);
    return r.rows[0]!.n;
  }

  it('an answer claiming cost 100000 beside x-ratelimit-remaining 4853 spends one point, not the window', async () => {
    const deps = fetcher();
    await onePushes(3);
    fake.graphql.setRateLimit({ used: 146 });
    fake.graphql.configure({ claimedCost: 100_000 });
    const b = await fetchGraphQLBatch(deps, { maxPushes: 3 });
    expect(b.outcomes.complete).toBe(3);
    expect(await remainingSaid()).toBe(4853);
    // Above GitHub's most a query can cost (5,000): not GitHub's figure; the estimate stands.
    expect(await ledger()).toEqual([{ points: 1, outcome: 'completed' }]);
    const budget = await deps.github.budget();
    expect(budget.graphql).toMatchObject({ remaining: 4853 });
    expect(graphqlWindowRefuses(budget.graphql)).toBe(false);
    // The window is open: the next batch is not refused.
    await onePushes(1);
    expect(await fetchGraphQLBatch(deps, { maxPushes: 1 })).toMatchObject({
      stoppedBy: null,
      outcomes: { complete: 1 },
    });
  });

  it('a cost within GitHub’s maximum but above what the answer says the window used is cut to that', async () => {
    const deps = fetcher();
    await onePushes(2);
    fake.graphql.setRateLimit({ used: 20 });
    fake.graphql.configure({ claimedCost: 4_000 });
    await fetchGraphQLBatch(deps, { maxPushes: 2 });
    // used 20, this query 1: the answer says 21 used of 5,000 — the query cannot have cost more.
    expect(await ledger()).toEqual([{ points: 21, outcome: 'completed' }]);
  });

  it('a failed query costs what the answer’s window says: nothing when GitHub charged nothing', async () => {
    const deps = fetcher();
    await onePushes(4);
    fake.graphql.fail({ status: 502, times: Number.POSITIVE_INFINITY });
    await fetchGraphQLBatch(deps, { maxPushes: 4 });
    const rows = await ledger();
    expect(rows).toHaveLength(MAX_QUERY_FAILURES);
    expect(rows.reduce((n, r) => n + r.points, 0)).toBe(fake.graphql.pointsSpent());
    expect(fake.graphql.pointsSpent()).toBe(0);
    // A timeout GitHub charges (its 502 after 10 s) is charged as GitHub counted it.
    fake.reset();
    await freshCommitWorld(t.db, fake);
    await onePushes(4);
    fake.graphql.fail({ status: 502, chargePoints: true, times: Number.POSITIVE_INFINITY });
    await fetchGraphQLBatch(fetcher(), { maxPushes: 4 });
    const charged = await ledger();
    expect(charged.reduce((n, r) => n + r.points, 0)).toBe(fake.graphql.pointsSpent());
    expect(fake.graphql.pointsSpent()).toBe(MAX_QUERY_FAILURES);
  });

  it('GitHub’s remaining wins over a local sum that contradicts it', async () => {
    const deps = fetcher();
    await onePushes(1);
    // One batch so the window and its credential are known.
    await fetchGraphQLBatch(deps, { maxPushes: 1 });
    const key = (
      await sql<{ credential: string }>`
        SELECT credential FROM github_requests WHERE credential LIKE '%#graphql' LIMIT 1`.execute(
        t.db,
      )
    ).rows[0]!.credential;
    // A row that says this window spent 100,000 points (what an older build stored).
    await sql`UPDATE github_requests SET points = 100000 WHERE credential = ${key}`.execute(t.db);
    const budget = await deps.github.budget();
    expect(budget.graphql!.spent).toBeGreaterThanOrEqual(100_000);
    expect(budget.graphql!.remaining).toBeGreaterThan(4_900);
    expect(graphqlWindowRefuses(budget.graphql)).toBe(false);
    await onePushes(2);
    expect(await fetchGraphQLBatch(deps, { maxPushes: 2 })).toMatchObject({
      stoppedBy: null,
      outcomes: { complete: 2 },
    });
  });
});

describe('what the counts show GraphQL cannot finish', () => {
  it('a push of 2,000 commits goes to REST compare after one query, not seven rounds', async () => {
    const deps = fetcher({ COMMITS_MAX_PER_PUSH: '10000' });
    await insertRepository(t.db, 490, 'faults/huge');
    const line = chain(fake, 'faults/huge', 2_001);
    await insertPushes(t.db, [{ repositoryId: 490, before: line[0]!, head: line[2_000]! }]);
    const b = await fetchGraphQLBatch(deps, { maxPushes: 1 });
    expect(b.queries).toBe(1);
    expect(b.outcomes.complete).toBe(1);
    expect(compares().length).toBe(20); // pages of 100 from the oldest
    expect((await pushShas(t.db, line[2_000]!)).length).toBe(2_000);
  });
});
