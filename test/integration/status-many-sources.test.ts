import type { KyselyPlugin } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readStatus } from '../../src/status/model.ts';
import { runBin } from '../support/cli.ts';
import { useTestDatabase } from '../support/db.ts';
import { manyCounts, seedManySources } from '../support/many-sources.ts';
import { startTestWeb, type TestWeb } from '../support/web.ts';

/**
 * /status, the page and bin/status at 10,000 sources — summaries by state
 * and kind, the worst and the latest in full, and one page of the rest.
 */

const N = 10_000;
const t = useTestDatabase();
let web: TestWeb;
const counts = manyCounts(N);

beforeAll(async () => {
  await seedManySources(t.db, N, new Date());
  web = await startTestWeb(t);
});
afterAll(async () => {
  await web?.close();
});

// biome-ignore lint/suspicious/noExplicitAny: the report as JSON.parse gives it back
type Json = any;

async function getJson(query = ''): Promise<{ status: number; body: Json; bytes: number }> {
  const res = await fetch(`${web.url}/status${query}`);
  return {
    status: res.status,
    body: await res.json(),
    bytes: Number(res.headers.get('content-length')),
  };
}

describe('/status at 10,000 sources', () => {
  it('sums every source by state and kind, and lists one page of 50', async () => {
    const { status, body, bytes } = await getJson();
    expect(status).toBe(200);
    expect(body.sourceSummary).toMatchObject({
      total: N,
      byState: {
        ok: counts.ok,
        new: 0,
        failing: counts.failing,
        overdue: counts.overdue,
        disabled: counts.disabled,
      },
      byKind: { repo: counts.repo, org: counts.org, public: 0, user: 0 },
    });
    expect(body.sourcePage).toEqual({
      page: 1,
      perPage: 50,
      total: N,
      pages: 200,
      state: null,
      kind: null,
    });
    expect(body.sources).toHaveLength(50);
    expect(body.sources[0].id).toBeLessThan(body.sources[49].id);
    // Small enough to read: the page and 20 highlighted sources, never all 10,000.
    expect(bytes).toBeLessThan(200_000);
  });

  it('shows the most failing, the most overdue and the last polled in full', async () => {
    const { body } = await getJson('?sources=0');
    const failing = body.sourceSummary.mostFailing;
    expect(failing).toHaveLength(10);
    expect(failing[0].consecutiveFailures).toBe(20);
    const failures = failing.map((s: { consecutiveFailures: number }) => s.consecutiveFailures);
    expect(failures).toEqual([...failures].sort((a, b) => b - a));
    expect(failing[0].lastRun.status).toBe('failed');
    const overdue = body.sourceSummary.mostOverdue;
    expect(overdue).toHaveLength(10);
    const next = overdue.map((s: { nextPollAt: string; consecutiveFailures: number }) => {
      expect(s.consecutiveFailures).toBe(0);
      return s.nextPollAt;
    });
    expect(next).toEqual([...next].sort());
    // The most overdue of seedManySources is the highest g with g % 61 = 5 that is neither
    // failing nor disabled: g = 9,948, 10 minutes + 99,480 s past.
    expect(new Date(next[0]).getTime()).toBeLessThan(Date.now() - (600 + 99_000) * 1000);
    const latest = body.sourceSummary.latest;
    expect(latest).toHaveLength(10);
    const polled = latest.map((s: { lastRun: { startedAt: string } }) => s.lastRun.startedAt);
    expect(polled).toEqual([...polled].sort().reverse());
    expect(body.sources).toEqual([]);
    expect(body.sourcePage.pages).toBe(0);
  });

  it('pages through a state or a kind, and the last page holds the rest', async () => {
    const failing = await getJson(`?state=failing&sources=25&page=2`);
    expect(failing.body.sourcePage).toMatchObject({
      total: counts.failing,
      page: 2,
      pages: Math.ceil(counts.failing / 25),
    });
    expect(failing.body.sources).toHaveLength(Math.min(25, counts.failing - 25));
    for (const s of failing.body.sources) expect(s.consecutiveFailures).toBeGreaterThan(0);
    const orgs = await getJson('?kind=org&sources=1000');
    expect(orgs.body.sources).toHaveLength(counts.org);
    const last = await getJson('?sources=1000&page=10');
    expect(last.body.sources).toHaveLength(1000);
    expect(last.body.sources[999].id).toBe(
      Math.max(...last.body.sources.map((s: { id: number }) => s.id)),
    );
    expect((await getJson('?page=201')).body.sources).toEqual([]);
  });

  it('refuses a bad query with a 400 naming it', async () => {
    for (const [q, msg] of [
      ['?sources=1001', /sources must be an integer from 0 to 1000/],
      ['?page=0', /page must be an integer from 1/],
      ['?page=1e3', /page must be an integer/],
      [
        `?state=${'x'.repeat(500)}`,
        /state must be one of ok, new, failing, overdue, disabled \(got "x{20}"\)/,
      ],
      ['?kind=team', /kind must be one of public, repo, org, user/],
    ] as const) {
      const r = await getJson(q);
      expect(r.status, q).toBe(400);
      expect(r.body.error, q).toMatch(msg);
    }
    const html = await fetch(`${web.url}/?sources=-1`);
    expect(html.status).toBe(400);
    expect(await html.text()).toMatch(/sources must be an integer/);
  });

  it('readStatus asks a fixed number of statements, not one per source', async () => {
    let statements = 0;
    const counting: KyselyPlugin = {
      transformQuery: (a) => {
        statements++;
        return a.node;
      },
      transformResult: async (a) => a.result,
    };
    const report = await readStatus({ ...web.deps, db: t.db.withPlugin(counting) });
    expect(report.sources).toHaveLength(50);
    const s = report.sourceSummary;
    expect(s.mostFailing.length + s.mostOverdue.length + s.latest.length).toBe(30);
    expect(statements).toBeLessThanOrEqual(STATEMENTS_MAX);
  });
});

/**
 * 22 when written: sources take 6 (count, page, counts by state, failing, overdue, latest), the rest of
 * the report the others; the commits section adds its own 5, none per source
 * (27). The configured mirrors, the open gaps, the GraphQL windows, the commits backlog by
 * origin and whether commits are off add one or two each, none per source (33). The background
 * allowance's floors and who waits for REST (src/work/split.ts) add one, none per source. A
 * statement per source would be 10,000.
 */
const STATEMENTS_MAX = 36;

describe('bin/status at 10,000 sources', () => {
  const env = () => ({ DATABASE_URL: t.url, GITHUB_MODE: 'live', LOG_LEVEL: 'silent' });

  it('prints counts, the most failing and overdue, the latest and one page, with the next page named', async () => {
    const r = await runBin('status', ['--sources', '5'], env());
    expect(r.code).toBe(0);
    expect(r.out).toContain(
      `Sources: 10,000 (ok ${counts.ok.toLocaleString('en-US')}, new 0, failing ${counts.failing}, overdue ${counts.overdue}, disabled ${counts.disabled}); by kind: repo 9,900, org 100`,
    );
    expect(r.out).toMatch(/Most failing/);
    expect(r.out).toMatch(/Most overdue \(next poll more than 2m past\)/);
    expect(r.out).toMatch(/Latest polled/);
    expect(r.out).toMatch(/page 1 of 2,000 \(10,000 matching, 5 a page; next: --page 2\)/);
    // Readable: a few screens, not 10,000 lines.
    expect(r.out.split('\n').length).toBeLessThan(150);
  });

  it('--state and --kind filter, --json is the same report as GET /status', async () => {
    const r = await runBin('status', ['--json', '--state', 'overdue', '--sources', '3'], env());
    expect(r.code).toBe(0);
    const j = JSON.parse(r.out);
    expect(j.sourcePage).toMatchObject({ state: 'overdue', total: counts.overdue, perPage: 3 });
    expect(j.sources).toHaveLength(3);
    const bad = await runBin('status', ['--kind', 'team'], env());
    expect(bad.code).toBe(2);
    expect(bad.err).toMatch(/--kind must be one of public, repo, org, user/);
  });
});
