import { afterEach, describe, expect, it } from 'vitest';
import { graphqlKey } from '../../src/budget/graphql-key.ts';
import { tokenLabel } from '../../src/platform/config/credential-label.ts';
import { readStatus } from '../../src/status/model.ts';
import { createMetrics } from '../../src/web/metrics.ts';
import { chain } from '../support/commit-world.ts';
import { useTestDatabase } from '../support/db.ts';
import { clientFactory, randomToken, testConfig } from '../support/github-client.ts';
import { repoProfile } from '../support/github-factories.ts';
import { parsePrometheusText, sampleValue } from '../support/prometheus.ts';
import { useFakeGitHub } from '../support/use-fake-github.ts';

/**
 * Each credential's GraphQL window on the surfaces (ADR 0114): inside its
 * credential's entry of budget() and /status, on /metrics labelled by the credential — never
 * as a credential of its own.
 */

const t = useTestDatabase();
const clients = clientFactory(t);
const fake = useFakeGitHub();

afterEach(() => clients.closeAll());

/** `k` aliases of a 100-commit history with 100 parents each: k points (GitHub's formula). */
const heavy = (k: number) =>
  `{ rateLimit { cost remaining resetAt } ${Array.from(
    { length: k },
    (_, i) =>
      `r${i}: repository(owner: "octo", name: "app") { object(expression: "main") { ... on Commit { history(first: 100) { nodes { parents(first: 100) { totalCount } } } } } }`,
  ).join(' ')} }`;

describe('the GraphQL window on /status and /metrics', () => {
  it('shows each credential’s points, remaining, reset and blocks inside its entry', async () => {
    fake.setRepo(repoProfile({ id: 42, full_name: 'octo/app' }));
    chain(fake, 'octo/app', 3, null, { branch: 'main' });
    const tokens = [randomToken(), randomToken()];
    const env = { GITHUB_TOKENS: tokens.join(',') };
    const github = clients.make({ apiUrl: fake.url, token: null, env });
    const config = testConfig(t, { apiUrl: fake.url, token: null, env });
    const labels = tokens.map(tokenLabel);
    // Two queries (3 and 2 points); then one of the keys is rate limited by a secondary limit.
    await github.graphql({ purpose: 'commits', query: heavy(3), points: 3 });
    await github.graphql({ purpose: 'commits', query: heavy(2), points: 2 });
    await github.request({ purpose: 'poll', path: '/events' });
    const limited = labels[0]!;
    await t.db
      .insertInto('github_rate_limits')
      .values({
        credential: graphqlKey(limited),
        quota: 5000,
        remaining: 4000,
        reset_at: new Date(Date.now() + 30 * 60_000),
        blocked_until: new Date(Date.now() + 60_000),
        block_reason: 'rate_limit',
      })
      .onConflict((oc) =>
        oc.column('credential').doUpdateSet({
          blocked_until: new Date(Date.now() + 60_000),
          block_reason: 'rate_limit',
        }),
      )
      .execute();

    const report = await readStatus({ config, db: t.db });
    const json = JSON.parse(JSON.stringify(report));
    expect(json.credentials.map((c: { label: string }) => c.label)).toEqual(labels);
    const byLabel = new Map(json.credentials.map((c: { label: string }) => [c.label, c]));
    const spent = labels.map(
      (l) => (byLabel.get(l) as { graphql: { spent: number } }).graphql.spent,
    );
    expect(spent.reduce((a, b) => a + b, 0)).toBe(5);
    for (const l of labels) {
      const g = (byLabel.get(l) as { graphql: Record<string, unknown> }).graphql;
      expect(g).toMatchObject({ quota: 5000, resetAt: expect.any(String) });
      expect(typeof g.remaining).toBe('number');
    }
    expect((byLabel.get(limited) as { graphql: { blocked: unknown } }).graphql.blocked).toEqual({
      until: expect.any(String),
      reason: 'rate_limit',
    });
    // The pool's total: both windows summed; not blocked while one key is free.
    expect(json.budget.graphql).toMatchObject({ quota: 10_000, spent: 5, blocked: null });
    // REST's numbers are REST's: one poll, no commits request.
    expect(json.budget.spent).toEqual({ poll: 1, enrich: 0, commits: 0 });

    const text = await createMetrics({ db: t.db, config, github }).scrape();
    const families = parsePrometheusText(text);
    const points = labels.map(
      (credential) => sampleValue(families, 'gpi_github_graphql_points_total', { credential }) ?? 0,
    );
    expect(points.reduce((a, b) => a + b, 0)).toBe(5);
    expect(sampleValue(families, 'gpi_github_graphql_quota', { credential: labels[1]! })).toBe(
      5000,
    );
    expect(
      sampleValue(families, 'gpi_github_graphql_blocked', {
        credential: limited,
        reason: 'rate_limit',
      }),
    ).toBe(1);
    // No #graphql key appears as a credential anywhere.
    expect(text).not.toMatch(/#graphql/);
  });

  it('counts points pruned from the ledger: the total never goes down', async () => {
    fake.setRepo(repoProfile({ id: 42, full_name: 'octo/app' }));
    chain(fake, 'octo/app', 3, null, { branch: 'main' });
    const token = randomToken();
    const github = clients.make({ apiUrl: fake.url, token });
    const config = testConfig(t, { apiUrl: fake.url, token });
    await github.graphql({ purpose: 'commits', query: heavy(4), points: 4 });
    const credential = tokenLabel(token);
    const read = async () =>
      sampleValue(
        parsePrometheusText(await createMetrics({ db: t.db, config, github }).scrape()),
        'gpi_github_graphql_points_total',
        { credential },
      );
    expect(await read()).toBe(4);
    await t.db.deleteFrom('github_requests').execute();
    expect(await read()).toBe(4);
  });
});
