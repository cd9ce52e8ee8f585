import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REQUEST_PURPOSES } from '../../src/platform/db/columns.ts';
import { runBin } from '../support/cli.ts';
import { useTestDatabase } from '../support/db.ts';
import { spendRows } from '../support/ledger-factories.ts';
import { seedActivity } from '../support/status-factories.ts';
import { startTestWeb, type TestWeb } from '../support/web.ts';

/**
 * Commit requests appear everywhere the budget does — bin/status's budget
 * line and credentials table, the page's budget card and credentials table, and the
 * requests chart (a colour per purpose of REQUEST_PURPOSES) — as /status JSON counts them.
 * They share the background allowance with enrichment, so both are shown against it.
 */

const t = useTestDatabase();
let web: TestWeb;
const COMMITS = 7;
const TOKEN = 'token:c0ffee00';

interface Spent {
  poll: number;
  enrich: number;
  commits: number;
}
interface Budget {
  credential: string;
  spent: Spent;
  allowance: { poll: number; enrich: number };
}
let report: { budget: Budget; credentials: (Budget & { label: string })[] };

beforeAll(async () => {
  await seedActivity(t.db);
  // Commit fetching on the fixture credential (4 minutes ago) and a second credential.
  await spendRows(t.db, 'fixture', 'commits', COMMITS, { ageSeconds: 240 });
  await spendRows(t.db, TOKEN, 'commits', 5, { ageSeconds: 300 });
  await spendRows(t.db, TOKEN, 'enrich', 2, { ageSeconds: 300 });
  // GraphQL: 3 queries of 4 points on the token's #graphql key, blocked by a rate limit.
  for (let i = 0; i < 3; i++) {
    await t.db
      .insertInto('github_requests')
      .values({
        credential: `${TOKEN}#graphql`,
        purpose: 'commits',
        method: 'POST',
        path: '/graphql',
        outcome: 'completed',
        status: 200,
        counted: true,
        points: 4,
        reserved_at: new Date(Date.now() - 120_000),
        sent_at: new Date(Date.now() - 120_000),
        finished_at: new Date(Date.now() - 120_000),
      })
      .execute();
  }
  await t.db
    .insertInto('github_rate_limits')
    .values({
      credential: `${TOKEN}#graphql`,
      quota: 5000,
      remaining: 4988,
      reset_at: new Date(Date.now() + 1_800_000),
      blocked_until: new Date(Date.now() + 600_000),
      block_reason: 'rate_limit',
    })
    .execute();
  // The commits backlog: pending pushes of each origin (2 polled, 1 webhook, 3 archive).
  let n = 0;
  for (const [origin, k] of [
    ['poll', 2],
    ['webhook', 1],
    ['archive', 3],
  ] as const) {
    for (let i = 0; i < k; i++) {
      n++;
      const head = n.toString(16).padStart(40, 'e');
      await t.db
        .insertInto('push_events')
        .values({
          id: String(80_000_000_000 + n),
          actor_id: '1',
          repository_id: '77',
          ref: `refs/heads/backlog-${n}`,
          head,
          before: '0'.repeat(40),
          created_at: new Date(),
          payload: JSON.stringify({ head }),
          origin,
          commits_state: 'pending',
          commits_next_attempt_at: new Date(),
        })
        .execute();
    }
  }
  web = await startTestWeb(t);
  report = (await (await fetch(`${web.url}/status`)).json()) as typeof report;
});
afterAll(async () => {
  await web?.close();
});

function cellsOf(html: string, tableId: string, label: string): string[] {
  const start = html.indexOf(`id="${tableId}"`);
  const table = html.slice(start, html.indexOf('</table>', start));
  const row = table.split('<tr>').find((r) => r.includes(`<code>${label}</code>`));
  expect(row, `${label} row`).toBeDefined();
  return [...row!.matchAll(/<td[^>]*>(.*?)<\/td>/g)].map((m) => m[1]!.replace(/<[^>]+>/g, ''));
}

describe('commit requests beside the rest of the budget', () => {
  it('/status counts them per credential and in the total', () => {
    const by = new Map(report.credentials.map((c) => [c.label, c]));
    expect(by.get('fixture')!.spent.commits).toBe(COMMITS);
    expect(by.get(TOKEN)!.spent).toEqual({ poll: 0, enrich: 2, commits: 5 });
    expect(report.budget.spent.commits).toBe(COMMITS + 5);
  });

  it('bin/status shows them in the budget line and the credentials table', async () => {
    const r = await runBin('status', [], {
      DATABASE_URL: t.url,
      GITHUB_MODE: 'fixture',
      LOG_LEVEL: 'silent',
    });
    expect(r.code, r.err).toBe(0);
    const b = report.budget;
    const bg = b.spent.enrich + b.spent.commits;
    expect(r.out).toContain(
      `  spent this window: poll ${b.spent.poll}/${b.allowance.poll.toLocaleString('en-US')}; enrich ${b.spent.enrich} + commits ${COMMITS + 5} = ${bg}/${b.allowance.enrich.toLocaleString('en-US')}`,
    );
    const head = r.out.split('\n').find((l) => /^\s+credential\s+quota/.test(l))!;
    expect(head.split(/\s{2,}/).map((s) => s.trim())).toEqual([
      '',
      'credential',
      'quota',
      'remaining',
      'resets',
      'poll',
      'enrich',
      'commits',
      'background',
      'graphql',
      'blocked',
    ]);
    expect(r.out).toMatch(
      new RegExp(
        `^\\s+${TOKEN}\\s+5000\\s+\\?\\s+never\\s+0/1,667\\s+2\\s+5\\s+7/3,333\\s+12/5,000 blocked\\s+no$`,
        'm',
      ),
    );
  });

  it('/status and bin/status show the GraphQL window and the backlog by origin', async () => {
    const token = report.credentials.find((c) => c.label === TOKEN) as unknown as {
      graphql: { spent: number; quota: number; blocked: { reason: string } | null };
    };
    expect(token.graphql).toMatchObject({
      spent: 12,
      quota: 5000,
      blocked: { reason: 'rate_limit' },
    });
    const r = await runBin('status', [], {
      DATABASE_URL: t.url,
      GITHUB_MODE: 'fixture',
      LOG_LEVEL: 'silent',
    });
    expect(r.code, r.err).toBe(0);
    expect(r.out).toMatch(/^ {2}backlog by origin: poll 2, webhook 1, archive 3$/m);
    expect(r.out).toMatch(/^ {2}GraphQL points: 12\/10,000 spent, /m);
    const html = await (await fetch(`${web.url}/`)).text();
    expect(html).toContain('<dt>backlog from archive</dt><dd>3</dd>');
    expect(html).toContain('<dt>GraphQL points</dt><dd>12 of 10,000</dd>');
    const cell = cellsOf(html, 'credentials', TOKEN)[8];
    expect(cell).toMatch(/^12\/5,000 \(\d[\d,]* left, resets in \d+m\d*s?\) rate limit until /);
  });

  it('the page shows them on the budget card, in the credentials table and in the chart', async () => {
    const html = await (await fetch(`${web.url}/`)).text();
    const b = report.budget;
    expect(html).toContain(`<dt>commits spent</dt><dd>${COMMITS + 5}</dd>`);
    expect(html).toContain(
      `<dt>enrich + commits</dt><dd>${b.spent.enrich + b.spent.commits}/${b.allowance.enrich.toLocaleString('en-US')}</dd>`,
    );
    expect(html).toContain('<th class="num">commits spent</th>');
    expect(cellsOf(html, 'credentials', TOKEN).slice(4, 8)).toEqual([
      '0/1,667',
      '2',
      '5',
      '7/3,333',
    ]);
    expect(cellsOf(html, 'credentials', 'fixture')[6]).toBe(String(COMMITS));
    // The requests chart: a key and a colour per purpose, the commit bars titled with their count.
    const chart = html.slice(html.indexOf('Requests spent per minute'));
    const colors = REQUEST_PURPOSES.map((p) => {
      const key = chart.match(new RegExp(`<i style="background:(#[0-9a-f]{6})"></i>${p}<`));
      expect(key, `${p} key`).not.toBeNull();
      return key![1];
    });
    expect(new Set(colors).size).toBe(REQUEST_PURPOSES.length);
    const commitsColor = colors[REQUEST_PURPOSES.indexOf('commits')];
    const bars = [
      ...chart.matchAll(
        new RegExp(`fill="${commitsColor}"><title>[^<]* commits: (\\d+)</title>`, 'g'),
      ),
    ];
    // Every commits request: the REST ones of both credentials and the 3 GraphQL queries.
    expect(bars.reduce((n, m) => n + Number(m[1]), 0)).toBe(COMMITS + 5 + 3);
  });
});
