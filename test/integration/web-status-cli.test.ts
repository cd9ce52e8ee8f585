import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import { sql } from 'kysely';
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

  it('names both 24 hours: the pushes pushed in them (event time) and the ones that arrived', async () => {
    // An old hour backfilled now: arrived in the last 24 hours, pushed three days ago.
    await sql`
      INSERT INTO push_events (actor_id, repository_id, ref, head, before, created_at, payload,
        origin)
      VALUES (1, 1, 'refs/heads/old', 'h-old', 'b-old', now() - interval '3 days', '{}',
        'archive')`.execute(t.db);
    try {
      const { stdout } = await status([]);
      expect(stdout).toMatch(
        /^Pushes: 541 held \(468 polled, 52 by webhook, 21 from the archive\); in the last 24h 540 pushed, 541 arrived$/m,
      );
      const json = JSON.parse((await status(['--json'])).stdout);
      expect(json.activity.pushes).toMatchObject({ last24h: 541, pushedLast24h: 540 });
    } finally {
      await sql`DELETE FROM push_events WHERE head = 'h-old'`.execute(t.db);
    }
  });

  it('--json prints the same report as GET /status', async () => {
    const { stdout } = await status(['--json']);
    const report = JSON.parse(stdout);
    expect(report.sources).toHaveLength(3);
    expect(report.enrichment.repository.pending).toBe(20);
    expect(report.queues.map((q: { name: string }) => q.name)).toContain('reconcile');
  });

  it('--coverage prints every stored push once per hour, by first origin, with open gaps', async () => {
    const { stdout } = await status(['--coverage', '--hours', '6']);
    const lines = stdout.trimEnd().split('\n');
    expect(lines[0]).toMatch(
      /^hour \(UTC\)\s+pushes\s+poll\s+webhook\s+archive\s+gaps open\s+mirrors read$/,
    );
    expect(lines).toHaveLength(2 + 6 + 2);
    // Seeded: 520 polled/webhook pushes over the last ~3 h, 20 from the archive ~5 h ago,
    // an open gap 100–110 minutes ago.
    // (The gap's 10 minutes fall in one hour or straddle two.)
    expect(lines.at(-1)).toMatch(
      /^6 hours: 540 pushes: 468 polled \(87%\), 52 by webhook \(10%\), 20 from the archive \(4%\); [12] hours with an open gap$/,
    );
    const json = JSON.parse((await status(['--coverage', '--json'])).stdout);
    expect(json.coverage).toHaveLength(48);
    const sum = (k: string) =>
      json.coverage.reduce((n: number, r: Record<string, number>) => n + r[k]!, 0);
    expect([sum('pushes'), sum('poll'), sum('webhook'), sum('archive')]).toEqual([
      540, 468, 52, 20,
    ]);
    expect(
      json.coverage.filter((r: { gapsOpen: number }) => r.gapsOpen > 0).length,
    ).toBeGreaterThan(0);
    for (const r of json.coverage) expect(r.pushes).toBe(r.poll + r.webhook + r.archive);
  });

  it('the view hourly_coverage accounts for every stored push once', async () => {
    const v = await sql<{ pushes: string; origins: string; held: string }>`
      SELECT (SELECT sum(pushes) FROM hourly_coverage) AS pushes,
             (SELECT sum(poll + webhook + archive) FROM hourly_coverage) AS origins,
             (SELECT count(*) FROM push_events) AS held`.execute(t.db);
    expect(v.rows[0]).toEqual({ pushes: '540', origins: '540', held: '540' });
    // An hour read from two mirrors (and failed on a third) counts two.
    const hour = new Date('2026-10-01T07:00:00Z');
    await t.db
      .insertInto('backfill_files')
      .values(
        ['http://a.example', 'http://b.example', 'http://c.example'].map((mirror, i) => ({
          file: '2026-10-01-7',
          scope: 'all',
          mirror,
          hour,
          state: i < 2 ? 'completed' : 'missing',
        })),
      )
      .execute();
    const mirrors = await sql<{ pushes: string; mirrors_read: string }>`
      SELECT pushes, mirrors_read FROM hourly_coverage WHERE hour = ${hour}`.execute(t.db);
    expect(mirrors.rows).toEqual([{ pushes: '0', mirrors_read: '2' }]);
  });

  it('--coverage refuses a bad --hours with exit 2', async () => {
    for (const args of [
      ['--coverage', '--hours', '0'],
      ['--coverage', '--hours', '9000'],
      ['--hours', '3'],
    ]) {
      const err = await status(args).then(
        () => null,
        (e: { code: number; stderr: string }) => e,
      );
      expect(err?.code, args.join(' ')).toBe(2);
      expect(err?.stderr, args.join(' ')).toMatch(/--hours/);
    }
  });

  it('--help prints usage and exits 0', async () => {
    const { stdout } = await status(['--help']);
    expect(stdout).toMatch(/^Usage: bin\/status \[--json\]/);
  });
});
