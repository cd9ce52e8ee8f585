import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import { afterEach, describe, expect, it } from 'vitest';
import { graphqlKey } from '../../src/budget/graphql-key.ts';
import {
  BudgetExhausted,
  FixtureMiss,
  GitHubAuthFailed,
  GraphQLNeedsCredential,
  RateLimited,
} from '../../src/github/errors.ts';
import { fixtureFile } from '../../src/github/transport.ts';
import { tokenLabel } from '../../src/platform/config/credential-label.ts';
import { chain } from '../support/commit-world.ts';
import { useTestDatabase } from '../support/db.ts';
import { appKeys } from '../support/github-app-keys.ts';
import { clientFactory, randomToken } from '../support/github-client.ts';
import { repoProfile } from '../support/github-factories.ts';
import { useFakeGitHub } from '../support/use-fake-github.ts';

/**
 * GitHubClient.graphql() on GitHub's GraphQL points window (ADR 0110,
 * ADR 0114): each credential's `#graphql` key has its own ledger rows, window, counters,
 * blocks, gate and pacing row; the ledger records points, from the answer's rateLimit.cost.
 */

const t = useTestDatabase();
const clients = clientFactory(t);
const fake = useFakeGitHub();

afterEach(() => clients.closeAll());

function seed(): void {
  fake.setRepo(repoProfile({ id: 42, full_name: 'octo/app' }));
  chain(fake, 'octo/app', 5, null, { branch: 'main' });
}

/** `k` aliases of a 100-commit history with 100 parents each: k points (GitHub's formula). */
const heavy = (k: number) =>
  `{ rateLimit { cost remaining resetAt } ${Array.from(
    { length: k },
    (_, i) =>
      `r${i}: repository(owner: "octo", name: "app") { object(expression: "main") { ... on Commit { history(first: 100) { nodes { parents(first: 100) { totalCount } } } } } }`,
  ).join(' ')} }`;

function client(env: Record<string, string> = {}, token = randomToken()) {
  const gh = clients.make({ apiUrl: fake.url, token, env });
  return { gh, token, label: tokenLabel(token), key: graphqlKey(tokenLabel(token)) };
}

async function ledger(credential: string) {
  return t.db
    .selectFrom('github_requests')
    .selectAll()
    .where('credential', '=', credential)
    .orderBy('id')
    .execute();
}

async function rateRow(credential: string) {
  return t.db
    .selectFrom('github_rate_limits')
    .selectAll()
    .where('credential', '=', credential)
    .executeTakeFirst();
}

const query = (k: number, points = k) => ({ purpose: 'commits', query: heavy(k), points }) as const;

describe('graphql()', () => {
  it('records the answer’s cost as the row’s points on the #graphql key, and its window', async () => {
    seed();
    const { gh, label, key } = client();
    const a = await gh.graphql<{ r0: unknown }>(query(3, 5));
    expect(a.cost).toBe(3);
    expect(a.errors).toEqual([]);
    expect(a.credential).toBe(label);
    expect(a.data?.r0).toBeTruthy();
    expect(a.rateLimit).toMatchObject({ limit: 5000, remaining: 4997 });
    const rows = await ledger(key);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({
      id: String(a.requestId),
      purpose: 'commits',
      method: 'POST',
      path: '/graphql',
      outcome: 'completed',
      status: 200,
      points: 3,
    });
    // REST's key spent nothing; the #graphql key holds GraphQL's window.
    expect(await ledger(label)).toHaveLength(0);
    expect(await rateRow(label)).toBeUndefined();
    expect(await rateRow(key)).toMatchObject({ quota: 5000, remaining: 4997 });
    expect(fake.graphql.pointsSpent()).toBe(3);
    // The minute counters follow the settle's points (5 reserved, 3 spent).
    const minutes = await sql<{ commits: number }>`
      SELECT sum(commits)::int AS commits FROM github_request_minutes WHERE credential = ${key}`.execute(
      t.db,
    );
    expect(minutes.rows[0]!.commits).toBe(3);
  });

  it('the window sums points: a reservation that does not fit what is left is refused', async () => {
    seed();
    const { gh, key } = client();
    fake.graphql.setRateLimit({ limit: 10 });
    await gh.graphql(query(3));
    await gh.graphql(query(4));
    // 3 left: 4 points do not fit, 3 do.
    const refused = await gh.graphql(query(4)).catch((e) => e);
    expect(refused).toBeInstanceOf(BudgetExhausted);
    expect(refused.reason).toBe('remaining');
    await gh.graphql(query(3));
    expect(await gh.graphql(query(1)).catch((e) => e)).toBeInstanceOf(BudgetExhausted);
    expect(fake.graphql.pointsSpent()).toBe(10);
    const rows = await ledger(key);
    expect(rows.map((r) => r.points)).toEqual([3, 4, 3]);
    const b = await gh.budget();
    expect(b.credentials[0]!.graphql).toMatchObject({ quota: 10, remaining: 0, spent: 10 });
  });

  it('paces points a minute: a query holds the /graphql row for points × 60 s / the rate', async () => {
    seed();
    // 600 points a minute: 100 ms a point, 500 ms for a 5-point query.
    const { gh, key } = client({ GRAPHQL_POINTS_PER_MINUTE: '600' });
    await gh.graphql(query(5));
    await gh.graphql(query(1));
    await gh.graphql(query(1));
    const sent = (await ledger(key)).map((r) => r.sent_at!.getTime());
    expect(sent[1]! - sent[0]!).toBeGreaterThanOrEqual(500 - 5);
    expect(sent[2]! - sent[1]!).toBeGreaterThanOrEqual(100 - 5);
    const pace = await t.db
      .selectFrom('github_endpoint_pace')
      .selectAll()
      .where('credential', '=', key)
      .execute();
    expect(pace.map((p) => p.endpoint)).toEqual(['/graphql']);
  });

  it('a secondary limit (403) blocks the #graphql key alone: REST goes on', async () => {
    seed();
    const { gh, label, key } = client();
    fake.graphql.configure({ secondaryPointsPerMinute: 1 });
    await gh.graphql(query(1));
    const limited = await gh.graphql(query(1)).catch((e) => e);
    expect(limited).toBeInstanceOf(RateLimited);
    expect((await rateRow(key))?.block_reason).toBe('rate_limit');
    expect((await rateRow(key))!.blocked_until!.getTime()).toBeGreaterThan(Date.now() + 30_000);
    const after = await gh.graphql(query(1)).catch((e) => e);
    expect(after).toBeInstanceOf(BudgetExhausted);
    expect(after.blockReason).toBe('rate_limit');
    // The credential's REST key is not blocked: a poll is answered.
    const poll = await gh.request({ purpose: 'poll', path: '/events' });
    expect(poll.status).toBe(200);
    expect((await rateRow(label))?.blocked_until ?? null).toBeNull();
  });

  it('a 200 of type RATE_LIMIT blocks the #graphql key until its reset', async () => {
    seed();
    const { gh, label, key, token } = client();
    await gh.graphql(query(1));
    fake.graphql.setRateLimit({ remaining: 0 });
    const limited = await gh.graphql(query(1)).catch((e) => e);
    expect(limited).toBeInstanceOf(RateLimited);
    const row = await rateRow(key);
    expect(row).toMatchObject({ block_reason: 'rate_limit', remaining: 0 });
    // This token's window (another key's window opens when first asked for, maybe a second on).
    expect(row!.blocked_until!.getTime()).toBe(fake.graphql.rateLimit({ token }).resetAt.getTime());
    expect((await gh.request({ purpose: 'poll', path: '/events' })).status).toBe(200);
    expect((await rateRow(label))?.blocked_until ?? null).toBeNull();
  });

  it('a 401 on GraphQL blocks both keys of the credential', async () => {
    seed();
    const { gh, token, label, key } = client();
    fake.revokeToken(token);
    const err = await gh.graphql(query(1)).catch((e) => e);
    expect(err).toBeInstanceOf(GitHubAuthFailed);
    expect(err.credential).toBe(label);
    for (const k of [label, key]) expect((await rateRow(k))?.block_reason).toBe('auth');
    const poll = await gh.request({ purpose: 'poll', path: '/events' }).catch((e) => e);
    expect(poll).toBeInstanceOf(BudgetExhausted);
    expect(poll.blockReason).toBe('auth');
    expect(fake.requests.filter((r) => r.path === '/events')).toHaveLength(0);
  });

  it('a 401 on REST blocks the #graphql key too', async () => {
    seed();
    const { gh, token, label, key } = client();
    fake.revokeToken(token);
    expect(await gh.request({ purpose: 'poll', path: '/events' }).catch((e) => e)).toBeInstanceOf(
      GitHubAuthFailed,
    );
    expect((await rateRow(key))?.block_reason).toBe('auth');
    const g = await gh.graphql(query(1)).catch((e) => e);
    expect(g).toBeInstanceOf(BudgetExhausted);
    expect(g.blockReason).toBe('auth');
    expect(fake.graphql.queries).toHaveLength(0);
    expect((await rateRow(label))?.block_reason).toBe('auth');
    // The token is good again (a glitch): once REST's block ran out, its accepted answer clears
    // the ladder of both keys, so GraphQL is not left waiting out its own.
    fake.reset();
    seed();
    await sql`UPDATE github_rate_limits SET blocked_until = now() - interval '1 second'
      WHERE credential = ${label}`.execute(t.db);
    expect((await gh.request({ purpose: 'poll', path: '/events' })).status).toBe(200);
    for (const k of [label, key]) {
      expect(await rateRow(k)).toMatchObject({
        auth_failures: 0,
        block_reason: null,
        blocked_until: null,
      });
    }
    expect((await gh.graphql(query(1))).cost).toBe(1);
  });

  it('RESOURCE_LIMITS_EXCEEDED is returned with its partial data and its cost', async () => {
    seed();
    const { gh, key } = client();
    fake.graphql.configure({ resourceLimits: { topLevelFields: 2 } });
    const a = await gh.graphql<Record<string, { object: unknown } | null>>(query(4));
    expect(a.data?.r0?.object).toBeTruthy();
    expect(a.data?.r2).toEqual({ object: null });
    expect(a.errors.map((e) => e.type)).toEqual([
      'RESOURCE_LIMITS_EXCEEDED',
      'RESOURCE_LIMITS_EXCEEDED',
    ]);
    expect(a.errors[0]!.path).toEqual(['r2', 'object', 'history']);
    expect(a.cost).toBe(4);
    expect((await ledger(key))[0]).toMatchObject({ outcome: 'completed', points: 4 });
  });

  it('two processes on one window never spend past it', async () => {
    seed();
    const token = randomToken();
    const p1 = client({}, token);
    const p2 = client({}, token);
    // GitHub said 20 points are left in this hour.
    await t.db
      .insertInto('github_rate_limits')
      .values({
        credential: p1.key,
        quota: 20,
        remaining: 20,
        reset_at: new Date(Math.ceil(Date.now() / 1000) * 1000 + 30 * 60_000),
        observed_at: new Date(),
      })
      .execute();
    fake.graphql.setRateLimit({ limit: 20 });
    const run = (gh: typeof p1.gh) =>
      Promise.all(
        Array.from({ length: 8 }, () =>
          gh.graphql(query(2)).then(
            () => 'ok',
            (e) => e,
          ),
        ),
      );
    const results = (await Promise.all([run(p1.gh), run(p2.gh)])).flat();
    const ok = results.filter((r) => r === 'ok').length;
    expect(ok).toBe(10);
    for (const r of results.filter((x) => x !== 'ok')) expect(r).toBeInstanceOf(BudgetExhausted);
    expect(fake.graphql.pointsSpent()).toBe(20);
    expect(fake.graphql.queries.filter((q) => q.errorTypes.length > 0)).toHaveLength(0);
    const spent = await sql<{ points: number }>`
      SELECT sum(points)::int AS points FROM github_requests
      WHERE credential = ${p1.key} AND outcome = 'completed'`.execute(t.db);
    expect(spent.rows[0]!.points).toBe(20);
  });

  it('a query in flight never holds the credential’s REST gate', async () => {
    seed();
    const { gh } = client();
    let release!: () => void;
    const held = new Promise<void>((r) => {
      release = r;
    });
    fake.onRequest = async (rec) => {
      if (rec.path === '/graphql') await held;
    };
    const q = gh.graphql(query(1));
    while (fake.inFlight === 0) await new Promise((r) => setImmediate(r));
    expect((await gh.request({ purpose: 'poll', path: '/events' })).status).toBe(200);
    release();
    expect((await q).cost).toBe(1);
  });

  it('budget() shows each credential’s GraphQL window inside its entry', async () => {
    seed();
    const { gh, label } = client();
    await gh.graphql(query(3));
    const b = await gh.budget();
    expect(b.credentials.map((c) => c.credential)).toEqual([label]);
    expect(b.credentials[0]!.graphql).toEqual({
      quota: 5000,
      remaining: 4997,
      resetAt: expect.any(Date),
      blocked: null,
      spent: 3,
    });
    expect(b.credentials[0]!.spent).toEqual({ poll: 0, enrich: 0, commits: 0 });
    expect(b.graphql).toEqual(b.credentials[0]!.graphql);
  });

  it('a pool of a token and two installations adds their GraphQL windows, each as GitHub says', async () => {
    seed();
    const keys = appKeys();
    fake.addApp({
      id: 4242,
      publicKey: keys.publicKey,
      installations: [{ id: 101 }, { id: 202 }],
    });
    fake.graphql.setRateLimit({ limit: 12_500 }, { installation: 101 });
    fake.graphql.setRateLimit({ limit: 10_000 }, { installation: 202 });
    const token = randomToken();
    const gh = clients.make({
      apiUrl: fake.url,
      token,
      env: {
        GITHUB_APP_ID: '4242',
        GITHUB_APP_PRIVATE_KEY: keys.privateKey,
        GITHUB_APP_INSTALLATION_IDS: '101,202',
      },
    });
    // Three at once go to three keys (the pick takes the one with the fewest open first);
    // a round that raced onto one key twice is followed by another, until each has answered.
    const answers: Awaited<ReturnType<typeof gh.graphql>>[] = [];
    for (let round = 0; round < 10; round++) {
      answers.push(...(await Promise.all([1, 2, 3].map(() => gh.graphql(query(1))))));
      if (new Set(answers.map((a) => a.credential)).size === 3) break;
    }
    expect(new Set(answers.map((a) => a.credential)).size).toBe(3);
    expect(answers.find((a) => a.credential === 'installation:101')!.rateLimit).toMatchObject({
      limit: 12_500,
    });
    const b = await gh.budget();
    const quota = Object.fromEntries(b.credentials.map((c) => [c.credential, c.graphql?.quota]));
    expect(quota).toEqual({
      [tokenLabel(token)]: 5000,
      'installation:101': 12_500,
      'installation:202': 10_000,
    });
    const n = answers.length;
    expect(b.graphql).toMatchObject({ quota: 27_500, remaining: 27_500 - n, spent: n });
    // Their REST windows are untouched by it.
    expect(b.spent).toEqual({ poll: 0, enrich: 0, commits: 0 });
  });

  it('fixture mode answers from post/graphql.json, or is FixtureMiss naming it', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'gpi-graphql-fixtures-'));
    try {
      const gh = clients.make({ apiUrl: fake.url, mode: 'fixture', fixturesDir: dir, token: null });
      expect(gh.graphqlEnabled).toBe(true);
      const miss = await gh.graphql(query(1)).catch((e) => e);
      expect(miss).toBeInstanceOf(FixtureMiss);
      expect(miss.message).toContain(path.join(dir, 'post', 'graphql.json'));
      const file = fixtureFile(dir, 'POST', '/graphql');
      mkdirSync(path.dirname(file), { recursive: true });
      writeFileSync(
        file,
        JSON.stringify({
          status: 200,
          body: { data: { rateLimit: { cost: 2 }, viewer: { login: 'x' } } },
        }),
      );
      const a = await gh.graphql<{ viewer: { login: string } }>(query(1));
      expect(a).toMatchObject({ credential: 'fixture', cost: 2, data: { viewer: { login: 'x' } } });
      const rows = await ledger('fixture#graphql');
      expect(rows.map((r) => [r.outcome, r.points])).toEqual([
        ['error', 1],
        ['completed', 2],
      ]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('an anonymous pool has no GraphQL', async () => {
    const gh = clients.make({ apiUrl: fake.url, token: null });
    expect(gh.graphqlEnabled).toBe(false);
    expect(await gh.graphql(query(1)).catch((e) => e)).toBeInstanceOf(GraphQLNeedsCredential);
    expect((await gh.budget()).credentials[0]!.graphql).toBeNull();
    expect(fake.graphql.queries).toHaveLength(0);
  });
});
