import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { sql } from 'kysely';
import { chromium, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CHROMIUM, CHROMIUM_ARGS, chromiumMissing } from '../support/chromium.ts';
import { useTestDatabase } from '../support/db.ts';
import { spendRows } from '../support/ledger-factories.ts';
import { seedActivity } from '../support/status-factories.ts';
import { startTestWeb, type TestWeb } from '../support/web.ts';

/**
 * The status page's cards read on a phone (390 px) and a desktop (1280 px), with the values
 * that once broke them: five-digit counts, "3,333/3,333" allowances, a GraphQL window, a
 * long backfill file name. In headless Chromium, every card value is on at most two lines,
 * no word or number of a value or label is broken across lines, no value is cut or runs past
 * its card, and the GraphQL card's window parts add up to its quota.
 */

const ARTIFACTS = path.resolve(import.meta.dirname, '../.artifacts');
const unavailable = chromiumMissing('the status page cards test');
if (unavailable) console.warn(unavailable);

const t = useTestDatabase();
const TOKEN = 'token:c0ffee00';

interface Problem {
  card: string;
  label: string;
  value: string;
  problem: string;
}

/**
 * Every card row's problems, measured in the page: a text run (a word or a number: no
 * whitespace inside) whose pieces lie on different lines is broken; a value whose text lies
 * on more than two lines is too tall; a value narrower than its text (cut) or reaching past
 * its card overflows. Lines are told apart by the tops of the text's client rects.
 */
async function cardProblems(page: Page): Promise<Problem[]> {
  return page.evaluate<Problem[]>(`(() => {
    const out = [];
    const linesOf = (rects) => {
      const tops = [];
      for (const r of rects) {
        if (r.width === 0 || r.height === 0) continue;
        if (!tops.some((t) => Math.abs(t - r.top) < r.height / 2)) tops.push(r.top);
      }
      return tops.length;
    };
    const brokenRuns = (el) => {
      const broken = [];
      const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
      for (let n = walker.nextNode(); n; n = walker.nextNode()) {
        const re = /\\S+/g;
        for (let m = re.exec(n.data); m; m = re.exec(n.data)) {
          const range = document.createRange();
          range.setStart(n, m.index);
          range.setEnd(n, m.index + m[0].length);
          if (linesOf(range.getClientRects()) > 1) broken.push(m[0]);
        }
      }
      return broken;
    };
    for (const card of document.querySelectorAll('.card')) {
      const title = card.querySelector('h2').textContent;
      const box = card.getBoundingClientRect();
      for (const dd of card.querySelectorAll('dd')) {
        const dt = dd.previousElementSibling;
        const row = { card: title, label: dt.textContent, value: dd.textContent };
        for (const w of brokenRuns(dd)) out.push({ ...row, problem: 'value broken inside "' + w + '"' });
        for (const w of brokenRuns(dt)) out.push({ ...row, problem: 'label broken inside "' + w + '"' });
        const range = document.createRange();
        range.selectNodeContents(dd);
        const lines = linesOf(range.getClientRects());
        if (lines > 2) out.push({ ...row, problem: lines + ' lines' });
        if (dd.scrollWidth > dd.clientWidth + 0.5) out.push({ ...row, problem: 'cut: text wider than its box' });
        const r = dd.getBoundingClientRect();
        if (r.right > box.right + 0.5 || r.left < box.left - 0.5) out.push({ ...row, problem: 'runs past its card' });
      }
    }
    return out;
  })()`);
}

/** The rows of one card, label → value, as the page shows them. */
async function cardRows(page: Page, id: string): Promise<Record<string, string>> {
  return page.evaluate<Record<string, string>>(`Object.fromEntries(
    [...document.querySelectorAll('#${id} dd')].map((dd) => [
      dd.previousElementSibling.textContent, dd.textContent,
    ]))`);
}

const num = (s: string | undefined) => Number((s ?? '').replaceAll(',', ''));

describe.skipIf(unavailable !== null)('status page cards in headless Chromium', () => {
  let web: TestWeb;
  beforeAll(async () => {
    await seedActivity(t.db);
    // Five-digit counts: commits stored, a pending backlog, pushes held.
    await sql`
      INSERT INTO push_events (actor_id, repository_id, ref, head, before, created_at, payload,
        commits_state, commits_next_attempt_at)
      SELECT 1, 700000 + g % 500, 'refs/heads/b' || g, 'h' || g, 'b' || g, now(), '{}',
        'pending', now() - interval '1 minute'
      FROM generate_series(1, 12345) g`.execute(t.db);
    await sql`
      INSERT INTO commits (repository_id, sha) SELECT 1, 'c' || g FROM generate_series(1, 6193) g`.execute(
      t.db,
    );
    // A token whose background allowance is spent to the last request (3,333 of 3,333) and
    // whose GraphQL window GitHub counts one point short of the ledger.
    await t.db
      .insertInto('github_rate_limits')
      .values([
        {
          credential: TOKEN,
          quota: 5000,
          remaining: 1200,
          reset_at: new Date(Date.now() + 40 * 60_000),
        },
        {
          credential: `${TOKEN}#graphql`,
          quota: 5000,
          remaining: 4964,
          reset_at: new Date(Date.now() + 40 * 60_000),
        },
      ])
      .execute();
    await spendRows(t.db, TOKEN, 'enrich', 3333);
    await spendRows(t.db, TOKEN, 'poll', 1234);
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
        points: 37,
        reserved_at: new Date(Date.now() - 120_000),
        sent_at: new Date(Date.now() - 120_000),
        finished_at: new Date(Date.now() - 120_000),
      })
      .execute();
    // The last backfill: a local file with a long path, failed.
    await t.db
      .insertInto('backfill_files')
      .values({
        file: '/var/lib/gharchive/mirror-of-mirrors/2026-11-29-8.json.gz',
        scope: 'all',
        state: 'failed',
        error: 'unexpected end of file',
      })
      .execute();
    web = await startTestWeb(t);
  });
  afterAll(async () => {
    await web?.close();
  });

  for (const width of [390, 1280]) {
    it(`at ${width} px: every card value on at most two lines, no number or word broken, none cut`, async () => {
      const browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
      try {
        const page = await browser.newPage({ viewport: { width, height: 900 } });
        expect((await page.goto(`${web.url}/`))?.status()).toBe(200);
        mkdirSync(ARTIFACTS, { recursive: true });
        await page.locator('.cards').screenshot({
          path: path.join(ARTIFACTS, `status-cards-${width}.png`),
        });

        // The values that broke: they are on the page, whole.
        const text = (await page.locator('.cards').textContent()) ?? '';
        expect(text).toContain('6,193 stored');
        expect(text).toContain('12,345');
        expect(text).toMatch(/\d,\d{3}\/\d,\d{3}/); // the pool's allowances, e.g. 3,337/3,373
        expect(text).toContain('2026-11-29-8 failed');
        expect(await page.locator('#gaps-card dd[title]').getAttribute('title')).toBe(
          '/var/lib/gharchive/mirror-of-mirrors/2026-11-29-8.json.gz',
        );

        expect(await cardProblems(page)).toEqual([]);

        // The GraphQL window in parts that add up to its quota.
        const g = await cardRows(page, 'graphql');
        expect(num(g['spent here'])).toBe(37);
        expect(
          num(g['spent here']) + num(g['spent elsewhere'] ?? '0') + num(g.left),
          JSON.stringify(g),
        ).toBe(num(g['points window']));
      } finally {
        await browser.close();
      }
    });
  }
});
