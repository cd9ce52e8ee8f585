import { mkdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { chromium } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CHROMIUM, CHROMIUM_ARGS, chromiumMissing } from '../support/chromium.ts';
import { useTestDatabase } from '../support/db.ts';
import { manyCounts, seedManySources } from '../support/many-sources.ts';
import { startTestWeb, type TestWeb } from '../support/web.ts';

/**
 * The status page at 10,000 sources in headless Chromium (as test/e2e/status-page.test.ts): counts a person can read, the worst and the
 * latest, one page of 50, and links that page and filter. Screenshot in test/.artifacts/.
 */

const ARTIFACTS = path.resolve(import.meta.dirname, '../.artifacts');
const SCREENSHOT = path.join(ARTIFACTS, 'status-page-10000-sources.png');
const N = 10_000;
const unavailable = chromiumMissing('the 10,000-source page browser test');
if (unavailable) console.warn(unavailable);

const t = useTestDatabase();

describe.skipIf(unavailable !== null)('status page at 10,000 sources in headless Chromium', () => {
  let web: TestWeb;
  const counts = manyCounts(N);
  beforeAll(async () => {
    await seedManySources(t.db, N, new Date());
    web = await startTestWeb(t);
  });
  afterAll(async () => {
    await web?.close();
  });

  it('sums, highlights and pages the sources; its links page and filter', async () => {
    const browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: CHROMIUM_ARGS,
    });
    try {
      const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
      const requested: string[] = [];
      const consoleErrors: string[] = [];
      page.on('request', (r) => requested.push(r.url()));
      page.on('console', (m) => {
        if (m.type() === 'error') consoleErrors.push(m.text());
      });

      const response = await page.goto(`${web.url}/`);
      expect(response?.status()).toBe(200);
      expect((await response!.body()).length).toBeLessThan(300_000);
      const summary = await page.locator('#source-summary').textContent();
      expect(summary).toContain(`failing ${counts.failing}`);
      expect(summary).toContain(`overdue ${counts.overdue}`);
      expect(summary).toContain(`repo ${counts.repo.toLocaleString('en-US')}`);
      expect(await page.locator('#health').textContent()).toContain(
        `${counts.failing} source(s) failing`,
      );
      expect(await page.locator('#sources-failing tbody tr').count()).toBe(10);
      expect(await page.locator('#sources-overdue tbody tr').count()).toBe(10);
      expect(await page.locator('#sources-latest tbody tr').count()).toBe(10);
      const rows = page.locator('#sources tbody tr');
      expect(await rows.count()).toBe(50);
      expect(await page.getByText('page 1 of 200').count()).toBe(1);
      // Nothing wider than the window: 10,000 sources must not make the page scroll sideways.
      const overflow = await page.evaluate<number>(
        'document.documentElement.scrollWidth - document.documentElement.clientWidth',
      );
      expect(overflow).toBeLessThanOrEqual(0);

      mkdirSync(ARTIFACTS, { recursive: true });
      await page.screenshot({ path: SCREENSHOT, fullPage: true });
      expect(statSync(SCREENSHOT).size).toBeGreaterThan(10_000);

      const firstOfPage1 = await rows.first().locator('td').first().textContent();
      await page.locator('#source-pages a[rel=next]').click();
      await page.waitForURL(/page=2/);
      expect(await page.getByText('page 2 of 200').count()).toBe(1);
      expect(await rows.first().locator('td').first().textContent()).not.toBe(firstOfPage1);
      await page.locator('#source-pages a[rel=prev]').click();
      await page.waitForURL((u) => !u.search.includes('page='));

      await page.locator('#source-summary a', { hasText: 'failing' }).click();
      await page.waitForURL(/state=failing/);
      expect(await rows.count()).toBe(Math.min(50, counts.failing));
      const failures = await page.locator('#sources tbody tr td:nth-child(9)').allInnerTexts();
      for (const f of failures) expect(Number(f)).toBeGreaterThan(0);

      expect(requested.every((u) => u.startsWith(`${web.url}/`))).toBe(true);
      expect(consoleErrors).toEqual([]);
    } finally {
      await browser.close();
    }
  });
});
