import { sql } from 'kysely';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { fetchGraphQLBatch } from '../../src/commits/fetch-graphql.ts';
import { pruneLedgers } from '../../src/jobs/prune.ts';
import { readStatus } from '../../src/status/model.ts';
import { renderText } from '../../src/status/render-text.ts';
import { captureLogger } from '../recovery/helpers.ts';
import { liveDeps, type TestDeps } from '../recovery/world.ts';
import {
  chain,
  insertPushes,
  insertRepository,
  newSha,
  pushState,
  ZERO,
} from '../support/commit-world.ts';
import { useTestDatabase } from '../support/db.ts';
import { type FakeGitHub, startFakeGitHub } from '../support/fake-github.ts';
import { parsePrometheusText, sampleValue } from '../support/prometheus.ts';
import { startTestWeb, type TestWeb } from '../support/web.ts';

/**
 * Pushes a point on every status surface (ADR 0171): the pushes GraphQL
 * batches settled in the last hour (commits_graphql_minutes, counted in each push's settling
 * transaction) over the GraphQL points the ledger says they spent, on /status, bin/status's
 * text, the page's GraphQL card and /metrics.
 */

const t = useTestDatabase();
const log = captureLogger('info');
let fake: FakeGitHub;
let deps: TestDeps;
let web: TestWeb;

beforeAll(async () => {
  fake = await startFakeGitHub();
  deps = liveDeps(t, fake, log.logger, { GITHUB_TOKEN: 'ghp_pushesapoint0000000000' });
  web = await startTestWeb(t);
});
afterAll(async () => {
  await web?.close();
  await deps?.close();
  await fake?.close();
});
beforeEach(async () => {
  await sql`TRUNCATE push_events, stored_commits, commit_fetch_turns, repositories,
    actors, github_requests, github_rate_limits, commits_graphql_minutes`.execute(t.db);
  await sql`DELETE FROM github_request_minutes`.execute(t.db);
});

async function ledgerPoints(): Promise<number> {
  const r = await sql<{ n: number }>`
    SELECT coalesce(sum(points), 0)::int AS n FROM github_requests
    WHERE credential LIKE '%#graphql'`.execute(t.db);
  return r.rows[0]!.n;
}

async function settledRows(): Promise<number> {
  const r = await sql<{ n: number }>`
    SELECT coalesce(sum(pushes), 0)::int AS n FROM commits_graphql_minutes`.execute(t.db);
  return r.rows[0]!.n;
}

describe('pushes a point', () => {
  it('counts the pushes GraphQL settled (complete and gone), not the free ones, over the points spent', async () => {
    await insertRepository(t.db, 71, 'ppp/a');
    await insertRepository(t.db, 72, 'ppp/b');
    const a = chain(fake, 'ppp/a', 5);
    const b = chain(fake, 'ppp/b', 5);
    const unknown = newSha();
    await insertPushes(t.db, [
      // four one-commit pushes and one of four commits: complete
      ...a.slice(1).map((head, i) => ({ repositoryId: 71, before: a[i]!, head })),
      { repositoryId: 72, before: b[0]!, head: b[4]! },
      // a head GitHub does not have: gone, by GraphQL
      { repositoryId: 72, ref: 'refs/heads/lost', before: b[0]!, head: unknown },
      // a deleted branch: none, no query, not GraphQL's
      { repositoryId: 72, ref: 'refs/heads/old', before: b[1]!, head: ZERO },
    ]);
    const r = await fetchGraphQLBatch(deps, { maxPushes: 50 });
    expect(r.outcomes).toMatchObject({ complete: 5, gone: 1, none: 1 });
    expect(r.requests).toBe(0); // no REST fallback
    expect((await pushState(t.db, unknown, 'refs/heads/lost')).commits_state).toBe('gone');
    const points = await ledgerPoints();
    expect(points).toBe(r.points);
    expect(points).toBeGreaterThan(0);
    expect(await settledRows()).toBe(6);
    const ratio = Math.round((6 / points) * 100) / 100;

    // /status (JSON), the report model behind every surface
    const report = await readStatus({ config: deps.config, db: t.db });
    expect(report.commits.graphql).toEqual({ pushes: 6, points, pushesPerPoint: ratio });
    const res = await fetch(`${web.url}/status`);
    expect(res.status).toBe(200);
    const json = (await res.json()) as { commits: { graphql: unknown } };
    expect(json.commits.graphql).toEqual({ pushes: 6, points, pushesPerPoint: ratio });

    // bin/status's text
    expect(renderText(report)).toContain(
      `  GraphQL, last hour: 6 pushes settled for ${points} points: ${ratio} pushes a point`,
    );

    // the page's GraphQL card
    const page = await (await fetch(`${web.url}/`)).text();
    const cardHtml = page.match(/<div class="card" id="graphql">.*?<\/dl><\/div>/s)?.[0] ?? '';
    expect(cardHtml, 'the GraphQL card').toContain(
      `<div class="big">${ratio} pushes a point</div>`,
    );
    expect(cardHtml).toContain('<dt>pushes settled (1h)</dt><dd>6</dd>');
    expect(cardHtml).toContain(`<dt>points spent (1h)</dt><dd>${points}</dd>`);

    // /metrics
    const families = parsePrometheusText(await (await fetch(`${web.url}/metrics`)).text());
    expect(sampleValue(families, 'gpi_github_graphql_pushes_last_hour', {})).toBe(6);
    expect(sampleValue(families, 'gpi_github_graphql_points_last_hour', {})).toBe(points);
    expect(sampleValue(families, 'gpi_github_graphql_pushes_per_point', {})).toBe(ratio);
  });

  it('nothing spent: no ratio (null; the gauge 0), and the text says so', async () => {
    const report = await readStatus({ config: deps.config, db: t.db });
    expect(report.commits.graphql).toEqual({ pushes: 0, points: 0, pushesPerPoint: null });
    expect(renderText(report)).toContain(
      '  GraphQL, last hour: 0 pushes settled for 0 points: no point spent',
    );
    const families = parsePrometheusText(await (await fetch(`${web.url}/metrics`)).text());
    expect(sampleValue(families, 'gpi_github_graphql_pushes_per_point', {})).toBe(0);
  });

  it('reads the last hour only, and retention prunes minutes older than 2 hours', async () => {
    const now = Date.now();
    const at = (minutesAgo: number) => new Date(now - minutesAgo * 60_000);
    await sql`INSERT INTO commits_graphql_minutes (minute, shard, pushes) VALUES
      (date_trunc('minute', ${at(5)}::timestamptz), 0, 30),
      (date_trunc('minute', ${at(5)}::timestamptz), 3, 10),
      (date_trunc('minute', ${at(90)}::timestamptz), 1, 500),
      (date_trunc('minute', ${at(200)}::timestamptz), 2, 900)`.execute(t.db);
    await sql`INSERT INTO github_request_minutes (credential, minute, commits) VALUES
      ('token:x#graphql', date_trunc('minute', ${at(5)}::timestamptz), 2),
      ('token:x#graphql', date_trunc('minute', ${at(90)}::timestamptz), 25),
      ('token:x', date_trunc('minute', ${at(5)}::timestamptz), 7)`.execute(t.db);
    const report = await readStatus({ config: deps.config, db: t.db });
    // REST's 7 commits requests are not points
    expect(report.commits.graphql).toEqual({ pushes: 40, points: 2, pushesPerPoint: 20 });
    const pruned = await pruneLedgers(t.db, { retentionDays: 30, now: new Date(now) });
    expect(pruned.deleted.commits_graphql_minutes).toBe(1);
    expect(await settledRows()).toBe(540);
  });
});
