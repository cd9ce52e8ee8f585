import { mkdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { chromium } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CHROMIUM, CHROMIUM_ARGS, chromiumMissing } from '../support/chromium.ts';
import { useTestDatabase } from '../support/db.ts';
import { seedActivity } from '../support/status-factories.ts';
import { startTestWeb, type TestWeb } from '../support/web.ts';

/**
 * The status page in a real browser: headless Chromium (Debian package `chromium`) loads
 * GET /, and the test looks at what a person would see, then keeps a screenshot in
 * test/.artifacts/. Without Chromium (test/support/chromium.ts) it is skipped with one line
 * saying how to install it; `.ci/run` installs it.
 */

const ARTIFACTS = path.resolve(import.meta.dirname, '../.artifacts');
const SCREENSHOT = path.join(ARTIFACTS, 'status-page.png');

const unavailable = chromiumMissing('the status page browser test');
if (unavailable) console.warn(unavailable);

const t = useTestDatabase();

describe.skipIf(unavailable !== null)('status page in headless Chromium', () => {
  let web: TestWeb;
  beforeAll(async () => {
    await seedActivity(t.db);
    // The last backfill a local file with a long path ((it pushed the Gaps card's
    // figures out of view).
    await t.db
      .insertInto('backfill_files')
      .values({
        file: `/home/operator/${'archives-of-a-very-long-name/'.repeat(6)}2026-11-29-14.json.gz`,
        scope: 'all',
        state: 'completed',
        pushes_created: 362,
        updated_at: new Date(),
      })
      .execute();
    web = await startTestWeb(t);
  });
  afterAll(async () => {
    await web?.close();
  });

  it('shows sources, backlog, budget, the activity and coverage charts, loading nothing from elsewhere', async () => {
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
      expect(await page.title()).toBe('github-push-ingestor status');

      const sources = page.locator('#sources tbody tr');
      expect(await sources.count()).toBe(3);
      expect(await sources.nth(1).textContent()).toContain('octocat/Hello-World');
      expect(await page.locator('#health').textContent()).toMatch(/source\(s\) failing/);
      for (const heading of [
        'Pushes held',
        'Request budget',
        'actor backlog',
        'repository backlog',
        'Queues',
      ]) {
        expect(await page.getByText(heading, { exact: true }).count(), heading).toBeGreaterThan(0);
      }

      // Three charts (events, requests, coverage), drawn with real bars, at a visible size.
      const charts = page.locator('figure.chart svg');
      expect(await charts.count()).toBe(3);
      for (let i = 0; i < 2; i++) {
        const box = await charts.nth(i).boundingBox();
        expect(box?.width).toBeGreaterThan(300);
        expect(box?.height).toBeGreaterThan(100);
        expect(await charts.nth(i).locator('rect').count()).toBeGreaterThan(10);
      }

      // Coverage: the last 48 hours stacked by origin, the open gap's hours shaded.
      const coverage = page.locator('#coverage figure.chart');
      expect(await coverage.locator('figcaption').textContent()).toMatch(
        /Pushes per hour by origin, last 48 h \(540 in 48 h, UTC\)/,
      );
      const box = await coverage.locator('svg').boundingBox();
      expect(box?.width).toBeGreaterThan(300);
      for (const origin of ['poll', 'webhook', 'archive']) {
        const bars = coverage.locator('rect:not(.mark) title', { hasText: ` ${origin}: ` });
        expect(await bars.count(), origin).toBeGreaterThan(0);
      }
      const marks = coverage.locator('rect.mark');
      expect(await marks.count()).toBeGreaterThan(0);
      expect(await marks.first().locator('title').textContent()).toMatch(/open gap/);

      // The Gaps card: every figure inside the card and visible, the long path shortened.
      const gapsCard = page.locator('#gaps-card');
      const cardBox = (await gapsCard.boundingBox())!;
      const values = gapsCard.locator('dd');
      expect(await values.count()).toBe(5);
      for (let i = 0; i < 5; i++) {
        const dd = values.nth(i);
        const b = (await dd.boundingBox())!;
        expect(await dd.isVisible()).toBe(true);
        expect(b.width, `dd ${i}`).toBeGreaterThan(0);
        expect(b.x + b.width, `dd ${i}`).toBeLessThanOrEqual(cardBox.x + cardBox.width + 0.5);
      }
      expect(await values.nth(0).textContent()).toBe('1');
      expect(await values.nth(1).textContent()).toBe('1');
      expect(await values.nth(4).textContent()).toMatch(/^2026-11-29-14 completed/);
      expect(await values.nth(4).getAttribute('title')).toMatch(/^\/home\/operator\//);

      expect(requested).toEqual([`${web.url}/`]);
      expect(consoleErrors).toEqual([]);

      mkdirSync(ARTIFACTS, { recursive: true });
      await page.screenshot({ path: SCREENSHOT, fullPage: true });
      expect(statSync(SCREENSHOT).size).toBeGreaterThan(10_000);
    } finally {
      await browser.close();
    }
  });
});
