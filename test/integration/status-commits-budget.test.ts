import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REQUEST_PURPOSES } from '../../src/db/schema.ts';
import { runBin } from '../support/cli.ts';
import { useTestDatabase } from '../support/db.ts';
import { spendRows } from '../support/ledger-factories.ts';
import { seedActivity } from '../support/status-factories.ts';
import { startTestWeb, type TestWeb } from '../support/web.ts';

/**
 * Issue 25 item 7: commit requests appear everywhere the budget does — bin/status's budget
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
      'blocked',
    ]);
    expect(r.out).toMatch(
      new RegExp(
        `^\\s+${TOKEN}\\s+5000\\s+\\?\\s+never\\s+0/1,667\\s+2\\s+5\\s+7/3,333\\s+no$`,
        'm',
      ),
    );
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
    expect(bars.reduce((n, m) => n + Number(m[1]), 0)).toBe(COMMITS + 5);
  });
});
