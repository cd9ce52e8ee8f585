import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { gzipSync } from 'node:zlib';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useTestDatabase } from '../support/db.ts';
import { type GitHubEvent, pushEvent } from '../support/github-factories.ts';
import { type Child, killAll, ROOT, spawnBin } from './world.ts';

/**
 * The red team's crash loop: an hour file of 5 good pushes, one 6 MB line
 * nested 3,000,000 deep (under the 8 MiB line cap), and 5 more. Before, the importer died
 * of "JavaScript heap out of memory" on it (~585 MB) and stored none of the 10. Now the
 * real bin/backfill measures the line before parsing it: it exits 0, stores the 10 pushes
 * exactly once (a forced re-read adds nothing), sets the line aside as too_deep, and its
 * peak RSS over its whole life (getrusage, written at exit) stays under 400 MB.
 */

const t = useTestDatabase();
const children: Child[] = [];
let dir: string;
afterAll(async () => {
  await killAll(children);
  rmSync(dir, { recursive: true, force: true });
});
beforeAll(() => {
  dir = mkdtempSync(path.join(tmpdir(), 'gpi-deep-line-'));
});

const PEAK_BOUND = 400 * 1024 * 1024;
const LEVELS = 3_000_000;
const PEAK_HOOK = `--import=${path.join(ROOT, 'test/support/peak-rss.mjs')}`;

async function runBackfill(file: string, extra: string[] = []) {
  const rssFile = path.join(dir, `rss-${children.length}`);
  const child = spawnBin(
    'backfill',
    {
      DATABASE_URL: t.url,
      LOG_LEVEL: 'info',
      NODE_OPTIONS: PEAK_HOOK,
      GPI_PEAK_RSS_FILE: rssFile,
    },
    [file, ...extra],
  );
  children.push(child);
  const exit = await child.exited;
  return { exit, child, peak: Number(readFileSync(rssFile, 'utf8')) };
}

describe('an hour file with a line nested 3,000,000 deep', () => {
  it('bin/backfill exits 0, stores the 10 good pushes once, sets the line aside, stays under 400 MB', async () => {
    const at = (i: number) =>
      new Date(Date.UTC(2026, 10, 18, 7, i)).toISOString().replace('.000', '');
    const good: GitHubEvent[] = Array.from({ length: 10 }, (_, i) =>
      pushEvent({ id: 71_000_000_000 + i, created_at: at(i) }),
    );
    const bomb = `{"id":"71000000999","type":"PushEvent","actor":{"id":1,"login":"x"},"repo":{"id":2,"name":"a/b"},"payload":${'['.repeat(LEVELS)}${']'.repeat(LEVELS)},"created_at":"${at(30)}"}`;
    expect(bomb.length).toBeGreaterThan(6_000_000);
    const lines = [
      ...good.slice(0, 5).map((e) => JSON.stringify(e)),
      bomb,
      ...good.slice(5).map((e) => JSON.stringify(e)),
    ];
    const file = path.join(dir, '2026-11-18-7.json.gz');
    writeFileSync(file, gzipSync(`${lines.join('\n')}\n`));

    const first = await runBackfill(file, ['--json']);
    expect(first.exit, first.child.stderr.join('')).toEqual({ code: 0, signal: null });
    console.log(
      `bin/backfill over the 3,000,000-deep line: peak RSS ${(first.peak / 1048576).toFixed(0)} MB`,
    );
    expect(first.peak).toBeGreaterThan(0);
    expect(first.peak).toBeLessThan(PEAK_BOUND);
    const out = JSON.parse(first.child.stdout.join('')) as {
      results: {
        outcome: string;
        counts: { pushes: number; created: number; malformed: number };
      }[];
    };
    expect(out.results[0]).toMatchObject({
      outcome: 'completed',
      counts: { pushes: 10, created: 10, malformed: 1 },
    });

    const stored = await sql<{ event_id: string }>`
      SELECT id::text AS event_id FROM push_events ORDER BY id`.execute(t.db);
    expect(stored.rows.map((r) => r.event_id)).toEqual(good.map((e) => String(e.id)));
    const aside = await sql<{ reason: string; message: string; n: string }>`
      SELECT reason, message, seen_count::text AS n FROM rejected_events`.execute(t.db);
    expect(aside.rows).toHaveLength(1);
    expect(aside.rows[0]).toMatchObject({ reason: 'too_deep', n: '1' });
    expect(aside.rows[0]!.message).toMatch(
      /line 6: payload(\[0\])+ is nested deeper than 64 levels/,
    );
    const checkpoint = await sql<{ state: string; malformed: string }>`
      SELECT state, malformed::text FROM backfill_files WHERE file = ${file}`.execute(t.db);
    expect(checkpoint.rows).toEqual([{ state: 'completed', malformed: '1' }]);

    // Read again from the start: nothing is stored twice, the line is the same one rejected.
    const again = await runBackfill(file, ['--force']);
    expect(again.exit).toEqual({ code: 0, signal: null });
    expect(again.peak).toBeLessThan(PEAK_BOUND);
    const after = await sql<{ pushes: string; aside: string; seen: string }>`
      SELECT (SELECT count(*) FROM push_events)::text AS pushes,
             (SELECT count(*) FROM rejected_events)::text AS aside,
             (SELECT max(seen_count) FROM rejected_events)::text AS seen`.execute(t.db);
    expect(after.rows[0]).toEqual({ pushes: '10', aside: '1', seen: '2' });
  });
});
