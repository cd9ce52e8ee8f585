import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import { beforeAll, describe, expect, it } from 'vitest';
import { useTestDatabase } from '../support/db.ts';
import { seedActivity } from '../support/status-factories.ts';

/** bin/status, the real executable, against this file's database. */

const t = useTestDatabase();
const BIN = path.resolve(import.meta.dirname, '../../bin/status');
const run = promisify(execFile);

function status(args: string[]) {
  return run(process.execPath, [BIN, ...args], {
    env: { ...process.env, DATABASE_URL: t.url, GITHUB_MODE: 'fixture', LOG_LEVEL: 'silent' },
  });
}

beforeAll(async () => {
  await seedActivity(t.db);
});

describe('bin/status', () => {
  it('prints a terminal picture of sources, backlog, budget, queues and webhooks', async () => {
    const { stdout } = await status([]);
    expect(stdout).toMatch(/^github-push-ingestor status at /);
    expect(stdout).toMatch(/Pushes: 540 held \(468 polled, 52 by webhook, 20 from the archive\)/);
    expect(stdout).toMatch(
      /^Gaps: 1 open \(next fill in (39|40)m(\d\ds)?\), 1 filled, 1 unavailable; 20 pushes recovered from the archive$/m,
    );
    expect(stdout).toMatch(
      /^Last backfill: 2026-11-29-3 \(gap:\d+\) completed 1h ago: 20 pushes stored, 180,000 lines read$/m,
    );
    expect(stdout).toMatch(/^2\s+repo octocat\/Hello-World\s+live\s+yes\s+not_modified/m);
    expect(stdout).toContain('source 3 last error: GitHub answered 502 on /orgs/github/events');
    expect(stdout).toMatch(/^actor\s+8\s+8\s+0\s+16\s+8\s+8$/m);
    expect(stdout).toMatch(/quota 60\/h, remaining \d+/);
    expect(stdout).toMatch(/^enrich-actor\s+1\s+0\s+0\s+0\s+1m/m);
    expect(stdout).toContain('last reconcile: completed');
    expect(stdout).toContain('disabled (WEBHOOK_SECRET is not set)');
  });

  it('--json prints the same report as GET /status', async () => {
    const { stdout } = await status(['--json']);
    const report = JSON.parse(stdout);
    expect(report.sources).toHaveLength(3);
    expect(report.enrichment.repository.pending).toBe(20);
    expect(report.queues.map((q: { name: string }) => q.name)).toContain('reconcile');
  });

  it('--help prints usage and exits 0', async () => {
    const { stdout } = await status(['--help']);
    expect(stdout).toMatch(/^Usage: bin\/status \[--json\]/);
  });
});
