import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { chromium, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CHROMIUM, CHROMIUM_ARGS, chromiumMissing } from '../support/chromium.ts';
import { useTestDatabase } from '../support/db.ts';
import { spendRows } from '../support/ledger-factories.ts';
import { seedActivity } from '../support/status-factories.ts';
import { startTestWeb, type TestWeb } from '../support/web.ts';

/**
 * The status page on a phone (390 px) and a desktop (1280 px) in headless
 * Chromium. Nothing runs past the screen sideways (wide tables scroll in their own box), the
 * charts' text is HTML at a readable size — the coverage chart's the same as the others',
 * never twice the page's —, their x axes carry dates, and the page shows the credentials
 * near the top, the archive mirrors with what each added, and the open gaps with their
 * source and window. Screenshots of both widths go to test/.artifacts/.
 */

const ARTIFACTS = path.resolve(import.meta.dirname, '../.artifacts');
const unavailable = chromiumMissing('the status page phone test');
if (unavailable) console.warn(unavailable);

const t = useTestDatabase();
const MIRROR_SECRET = 's3cret-pw';
const MIRRORS = [
  'https://data.gharchive.org',
  `https://reader:${MIRROR_SECRET}@mirror.example.org/gharchive`,
];

/** The smallest rendered text in px among the elements `selector` matches (0 when none). */
async function smallestText(page: Page, selector: string): Promise<{ n: number; px: number }> {
  return page.evaluate<{ n: number; px: number }>(`(() => {
    const els = [...document.querySelectorAll(${JSON.stringify(selector)})]
      .filter((el) => el.textContent.trim());
    const sizes = els.map((el) => parseFloat(getComputedStyle(el).fontSize));
    return { n: els.length, px: sizes.length ? Math.min(...sizes) : 0 };
  })()`);
}

/** `expr` evaluated in the page (a string: the test's own types know no DOM). */
function inPage<T>(page: Page, expr: string): Promise<T> {
  return page.evaluate<T>(expr);
}

describe.skipIf(unavailable !== null)('status page on a phone and a desktop', () => {
  let web: TestWeb;
  beforeAll(async () => {
    await seedActivity(t.db);
    await spendRows(t.db, 'installation:123456789', 'commits', 4);
    await t.db
      .insertInto('backfill_files')
      .values([
        {
          file: '2026-11-28-5',
          scope: 'all',
          mirror: 'https://mirror.example.org/gharchive',
          state: 'completed',
          pushes_created: 1234,
          hour: new Date('2026-11-28T05:00:00Z'),
        },
        {
          file: '2026-11-28-6',
          scope: 'all',
          mirror: 'https://mirror.example.org/gharchive',
          state: 'missing',
          hour: new Date('2026-11-28T06:00:00Z'),
        },
      ])
      .execute();
    web = await startTestWeb(t, { env: { GHARCHIVE_URL: MIRRORS.join(',') } });
  });
  afterAll(async () => {
    await web?.close();
  });

  for (const width of [390, 1280]) {
    it(`at ${width} px: no sideways scroll, readable chart text with dates, mirrors, gaps and credentials`, async () => {
      const browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
      try {
        const page = await browser.newPage({ viewport: { width, height: 900 } });
        const response = await page.goto(`${web.url}/`);
        expect(response?.status()).toBe(200);

        // The document is no wider than the screen; the tables scroll inside their boxes.
        const overflow = await inPage<number>(
          page,
          'document.documentElement.scrollWidth - document.documentElement.clientWidth',
        );
        expect(overflow).toBeLessThanOrEqual(0);
        const boxes = await inPage<number[]>(
          page,
          "[...document.querySelectorAll('main > *, main section > *')].map((el) => el.getBoundingClientRect().right)",
        );
        expect(Math.max(...boxes)).toBeLessThanOrEqual(width + 0.5);

        // Chart text is HTML at the page's sizes: no SVG text to shrink or swell with the box.
        const body = Number.parseFloat(
          await inPage<string>(page, 'getComputedStyle(document.body).fontSize'),
        );
        expect(await page.locator('figure.chart svg text').count()).toBe(0);
        const charts = page.locator('figure.chart');
        expect(await charts.count()).toBe(3);
        for (const sel of ['.xaxis time', '.ymax', '.key', 'figcaption']) {
          const s = await smallestText(page, `figure.chart ${sel}`);
          expect(s.n, sel).toBeGreaterThan(0);
          expect(s.px, sel).toBeGreaterThanOrEqual(12);
        }
        // The coverage chart's text is no larger than the others' (it was twice the page's).
        const sizes = await inPage<number[]>(
          page,
          "[...document.querySelectorAll('figure.chart .xaxis time')].map((el) => parseFloat(getComputedStyle(el).fontSize))",
        );
        expect(Math.max(...sizes)).toBeLessThanOrEqual(body);
        const rendered = await inPage<number[]>(
          page,
          "[...document.querySelectorAll('figure.chart .xaxis time')].map((el) => el.getBoundingClientRect().height)",
        );
        expect(Math.min(...rendered)).toBeGreaterThanOrEqual(12);

        // Dates on every x axis: "Dec 2 14:05", in order, with their instant in datetime.
        for (let i = 0; i < 3; i++) {
          const ticks = charts.nth(i).locator('.xaxis time');
          expect(await ticks.count()).toBeGreaterThanOrEqual(3);
          const texts = await ticks.allTextContents();
          for (const text of texts) expect(text).toMatch(/^[A-Z][a-z]{2} \d{1,2} \d\d:\d\d$/);
          const instants = await ticks.evaluateAll((els) =>
            els.map((el) => Date.parse(el.getAttribute('datetime') ?? '')),
          );
          expect(instants).toEqual([...instants].sort((a, b) => a - b));
          // The ticks do not overlap one another.
          const xs = await ticks.evaluateAll((els) =>
            els.map((el) => {
              const r = el.getBoundingClientRect();
              return [r.left, r.right];
            }),
          );
          for (let k = 1; k < xs.length; k++)
            expect(xs[k]![0]).toBeGreaterThanOrEqual(xs[k - 1]![1]);
        }

        // The credentials come right after the cards, before the charts and the sources.
        const order = await inPage<string[]>(
          page,
          "[...document.querySelectorAll('main > section')].map((s) => s.querySelector('h2')?.textContent?.split(' ')[0])",
        );
        expect(order.slice(0, 3)).toEqual(['Credentials', 'Activity', 'Coverage']);
        expect(await page.locator('#credentials').textContent()).toContain(
          'installation:123456789',
        );

        // The mirrors configured and what each added; never a mirror's password.
        const mirrors = page.locator('#mirrors tbody tr');
        const mirrorText = await page.locator('#mirrors').textContent();
        expect(mirrorText).toContain('https://data.gharchive.org');
        expect(await page.content()).not.toContain(MIRROR_SECRET);
        const row = mirrors.filter({ hasText: 'https://mirror.example.org/gharchive' });
        expect(await row.locator('td').allTextContents()).toEqual([
          'https://mirror.example.org/gharchive',
          '1',
          '1',
          '0',
          '1,234',
          expect.stringMatching(/ago|now/),
        ]);

        // The open gaps: which source, which window.
        const gaps = page.locator('#open-gaps tbody tr');
        expect(await gaps.count()).toBe(1);
        expect(await gaps.first().textContent()).toMatch(
          /public \(\d+\).*[A-Z][a-z]{2} \d{1,2} \d\d:\d\d – [A-Z][a-z]{2} \d{1,2} \d\d:\d\d/,
        );

        mkdirSync(ARTIFACTS, { recursive: true });
        await page.screenshot({
          path: path.join(ARTIFACTS, `status-page-${width}.png`),
          fullPage: true,
        });
      } finally {
        await browser.close();
      }
    });
  }
});
