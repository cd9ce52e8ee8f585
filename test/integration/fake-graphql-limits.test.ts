import { describe, expect, it } from 'vitest';
import { GITHUB_API_VERSION } from '../../src/github/transport.ts';
import { chain } from '../support/commit-world.ts';
import { postGraphQL } from '../support/fake-graphql-http.ts';
import { repoProfile } from '../support/github-factories.ts';
import { useFakeGitHub } from '../support/use-fake-github.ts';

/**
 * The fake's POST /graphql keeps GitHub's rules ("Rate limits and query limits for the
 * GraphQL API"): a token, points in a window of their own, the secondary limit, resource
 * limits, timeouts that cost, 502s. Other tests rely on it doing so.
 */

const fake = useFakeGitHub();

function seed(n = 5): string[] {
  fake.setRepo(repoProfile({ id: 42, full_name: 'octo/app' }));
  return chain(fake, 'octo/app', n, null, { branch: 'main' });
}

/** `k` aliases of a 100-commit history with 100 parents each: k × 101 requests. */
const heavy = (k: number) =>
  `{ rateLimit { cost remaining used limit } ${Array.from(
    { length: k },
    (_, i) =>
      `r${i}: repository(owner: "octo", name: "app") { object(expression: "main") { ... on Commit { history(first: 100) { nodes { parents(first: 100) { totalCount } } } } } }`,
  ).join(' ')} }`;

const tip = '{ repository(owner: "octo", name: "app") { defaultBranchRef { target { oid } } } }';

describe('requests', () => {
  it('needs a token; bad JSON is a 400; parse and schema errors run nothing and cost nothing', async () => {
    seed();
    const anonymous = await postGraphQL(fake, tip, {}, null);
    expect(anonymous.status).toBe(401);
    expect(anonymous.body.message).toBe('This endpoint requires you to be authenticated.');
    const bad = await fetch(`${fake.url}/graphql`, {
      method: 'POST',
      headers: { authorization: 'bearer token-a' },
      body: '{"query": ',
    });
    expect(bad.status).toBe(400);
    const parseError = await postGraphQL(fake, '{ repository(owner: "octo" { id } }');
    expect(parseError.status).toBe(200);
    expect(parseError.body.data).toBeUndefined();
    expect(parseError.body.errors[0].message).toMatch(/Syntax Error/);
    const schemaError = await postGraphQL(
      fake,
      '{ repository(owner: "octo", name: "app") { sha } }',
    );
    expect(schemaError.body.errors[0].message).toBe(
      'Cannot query field "sha" on type "Repository".',
    );
    const paging = await postGraphQL(
      fake,
      '{ repository(owner: "octo", name: "app") { object(expression: "main") { ... on Commit { history { totalCount } } } } }',
    );
    expect(paging.body).toEqual({
      errors: [
        expect.objectContaining({
          type: 'MISSING_PAGINATION_BOUNDARIES',
          path: ['repository', 'object', 'history'],
        }),
      ],
    });
    expect(fake.graphql.pointsSpent()).toBe(0);
    expect(fake.graphql.rateLimit({ token: 'token-a' }).remaining).toBe(5000);
  });

  it('a field the fake does not implement is an error naming it, never a silent null', async () => {
    seed();
    const r = await postGraphQL(
      fake,
      '{ repository(owner: "octo", name: "app") { stargazerCount } }',
    );
    expect(r.body.errors[0].message).toBe(
      'Repository.stargazerCount is not implemented by the fake GitHub.',
    );
  });
});

describe('the points window', () => {
  it('charges the query’s points in a window of its own per token, in headers and rateLimit', async () => {
    seed();
    const r = await postGraphQL(fake, heavy(3));
    expect(r.status).toBe(200);
    expect(r.body.data.rateLimit).toEqual({ cost: 3, remaining: 4997, used: 3, limit: 5000 });
    expect(r.headers.get('x-ratelimit-resource')).toBe('graphql');
    expect(r.headers.get('x-ratelimit-limit')).toBe('5000');
    expect(r.headers.get('x-ratelimit-remaining')).toBe('4997');
    expect(r.headers.get('x-ratelimit-used')).toBe('3');
    expect(Number(r.headers.get('x-ratelimit-reset'))).toBeGreaterThan(Date.now() / 1000);
    // REST's window is untouched; another token has its own GraphQL window.
    expect(fake.rateLimit({ token: 'token-a' }).remaining).toBe(5000);
    const other = await postGraphQL(fake, heavy(1), {}, 'token-b');
    expect(other.body.data.rateLimit).toMatchObject({ cost: 1, remaining: 4999 });
    expect(fake.graphql.pointsSpent({ token: 'token-a' })).toBe(3);
    expect(fake.graphql.pointsSpent()).toBe(4);
  });

  it('runs a query while a point is left and charges it whole; then answers RATE_LIMIT with 200', async () => {
    seed();
    fake.graphql.setRateLimit({ used: 4999 }, { token: 'token-a' });
    const last = await postGraphQL(fake, heavy(3));
    expect(last.body.data.rateLimit).toEqual({ cost: 3, remaining: 0, used: 5002, limit: 5000 });
    const refused = await postGraphQL(fake, tip);
    expect(refused.status).toBe(200);
    expect(refused.headers.get('x-ratelimit-remaining')).toBe('0');
    expect(refused.body).toEqual({
      errors: [
        {
          type: 'RATE_LIMIT',
          code: 'graphql_rate_limit',
          message: expect.stringMatching(/^API rate limit already exceeded for /),
        },
      ],
    });
    fake.graphql.configure({ rateLimitedType: 'RATE_LIMITED' });
    expect((await postGraphQL(fake, tip)).body.errors[0].type).toBe('RATE_LIMITED');
    // The window renews at its reset.
    fake.graphql.setRateLimit({ resetAt: new Date(Date.now() - 1) }, { token: 'token-a' });
    expect((await postGraphQL(fake, tip)).headers.get('x-ratelimit-remaining')).toBe('4999');
  });

  it('an installation’s window is its own limit', async () => {
    seed();
    fake.graphql.setRateLimit({ limit: 12_500 }, { installation: 7 });
    expect(fake.graphql.rateLimit({ installation: 7 })).toMatchObject({
      limit: 12_500,
      remaining: 12_500,
    });
  });

  it('rateLimit(dryRun: true) costs the query without running or charging it', async () => {
    seed();
    const r = await postGraphQL(
      fake,
      `{ rateLimit(dryRun: true) { cost remaining } ${heavy(2).slice(heavy(2).indexOf('r0:'))}`,
    );
    expect(r.body.data.rateLimit).toEqual({ cost: 2, remaining: 5000 });
    expect(r.body.data.r0).toBeNull();
    expect(fake.graphql.pointsSpent()).toBe(0);
  });
});

describe('GitHub’s other limits', () => {
  it('2,000 secondary points a minute (a query is 1): past them a 403 with retry-after, uncharged', async () => {
    seed();
    fake.graphql.configure({ secondaryPointsPerMinute: 3 });
    for (let i = 0; i < 3; i++) expect((await postGraphQL(fake, heavy(2))).status).toBe(200);
    const over = await postGraphQL(fake, heavy(2));
    expect(over.status).toBe(403);
    expect(over.headers.get('retry-after')).toBe('60');
    expect(over.body.message).toMatch(/^You have exceeded a secondary rate limit/);
    expect(fake.graphql.pointsSpent()).toBe(6);
    // Another token's minute is its own.
    expect((await postGraphQL(fake, tip, {}, 'token-b')).status).toBe(200);
  });

  it('a query too heavy gets a partial answer: RESOURCE_LIMITS_EXCEEDED where it struck', async () => {
    seed();
    fake.graphql.configure({ resourceLimits: { topLevelFields: 2 } });
    const r = await postGraphQL(fake, heavy(4));
    expect(r.status).toBe(200);
    expect(r.body.data.r0.object.history.nodes).toHaveLength(5);
    expect(r.body.data.r1.object.history.nodes).toHaveLength(5);
    // Past the threshold the history fails, and its nullable parent is null.
    expect(r.body.data.r2).toEqual({ object: null });
    expect(r.body.data.r3).toEqual({ object: null });
    expect(r.body.errors).toEqual([
      expect.objectContaining({
        type: 'RESOURCE_LIMITS_EXCEEDED',
        path: ['r2', 'object', 'history'],
        message: 'Resource limits for this query exceeded.',
      }),
      expect.objectContaining({
        type: 'RESOURCE_LIMITS_EXCEEDED',
        path: ['r3', 'object', 'history'],
      }),
    ]);
    expect(r.body.data.rateLimit.cost).toBe(4); // charged whole
    fake.graphql.configure({ resourceLimits: { nodes: 15_000 } }); // 10,100 nodes an alias
    const byNodes = await postGraphQL(fake, heavy(2));
    expect(byNodes.body.data.r0.object).not.toBeNull();
    expect(byNodes.body.errors.map((e: { path: string[] }) => e.path[0])).toEqual(['r1']);
  });

  it('a query slower than the timeout is a 502 after it and costs its points; a faster one answers', async () => {
    seed();
    fake.graphql.configure({ timeoutMs: 50, queryDelayMs: (q) => (q.cost > 1 ? 60_000 : 10) });
    const slow = await postGraphQL(fake, heavy(3));
    expect(slow.status).toBe(502);
    expect(slow.body.data).toBeNull();
    expect(slow.body.errors[0].message).toMatch(
      /^Something went wrong while executing your query\. This may be the result of a timeout/,
    );
    expect(fake.graphql.pointsSpent()).toBe(3);
    const fast = await postGraphQL(fake, tip);
    expect(fast.status).toBe(200);
    expect(fast.body.data.repository.defaultBranchRef.target.oid).toMatch(/^[0-9a-f]{40}$/);
  });

  it('502s on demand, uncharged unless asked; then answers again', async () => {
    seed();
    fake.graphql.fail({ times: 2 });
    fake.graphql.fail({ status: 504, chargePoints: true });
    expect((await postGraphQL(fake, heavy(2))).status).toBe(502);
    expect((await postGraphQL(fake, heavy(2))).status).toBe(502);
    expect((await postGraphQL(fake, heavy(2))).status).toBe(504);
    expect(fake.graphql.pointsSpent()).toBe(2);
    expect((await postGraphQL(fake, heavy(2))).status).toBe(200);
    expect(fake.graphql.queries.map((q) => q.status)).toEqual([502, 502, 504, 200]);
  });

  it('GraphQL is a gate of its own: a query in flight never blocks the token’s REST, a second query does', async () => {
    seed();
    let release!: () => void;
    const held = new Promise<void>((r) => {
      release = r;
    });
    let first = true;
    fake.onRequest = async (rec) => {
      if (rec.path === '/graphql' && first) {
        first = false;
        await held;
      }
    };
    const query = postGraphQL(fake, tip);
    while (fake.inFlight === 0) await new Promise((r) => setImmediate(r));
    const rest = await fetch(`${fake.url}/events`, {
      headers: { authorization: 'bearer token-a', 'x-github-api-version': GITHUB_API_VERSION },
    });
    expect(rest.status).toBe(200);
    const second = await postGraphQL(fake, tip);
    expect(second.status).toBe(403);
    release();
    expect((await query).status).toBe(200);
    expect(fake.maxInFlightByCredential).toMatchObject({
      [`${fake.requests[0]!.credential}#graphql`]: 2,
    });
  });
});
