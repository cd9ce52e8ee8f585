import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMigrator } from '../../src/platform/db/migrate.ts';
import { createScratchDatabase, type ScratchDatabase } from '../support/scratch-db.ts';

// Migration 2026-12-01T1410 (ADR 0120, ADR 0121) over a database that unclamped headers
// already wrote to: a token blocked until 2058, a reset in 2286, a source put off to 2058,
// poll intervals of -5 and 10^9. Brought up as an upgrade would, each is within the hour.
const MIGRATION = '2026-12-01T1410_deaths_and_clamps';
const BEFORE = '2026-12-01T1401_event_id_index';
let s: ScratchDatabase;

beforeAll(async () => {
  s = await createScratchDatabase();
  const down = await createMigrator(s.db).migrateTo(BEFORE);
  expect(down.error).toBeUndefined();
  const names = down.results?.map((r) => r.migrationName) ?? [];
  expect(names.at(-1)).toBe(MIGRATION);
  await sql`
    INSERT INTO github_rate_limits (credential, quota, remaining, reset_at, blocked_until, block_reason)
    VALUES ('token:old', 5000, 0, '2286-11-20 17:46:39Z', '2058-09-21 20:35:00Z', 'rate_limit'),
           ('token:fine', 5000, 10, now() + interval '20 minutes', NULL, NULL)`.execute(s.db);
  await sql`
    INSERT INTO event_sources (kind, target, mode, commits_enabled, poll_interval_seconds, next_poll_at)
    VALUES ('repo', 'a/far', 'live', false, -5, '2058-09-21 20:35:00Z'),
           ('repo', 'a/huge', 'live', false, 1000000000, now() + interval '10 minutes'),
           ('repo', 'a/fine', 'live', false, 60, now() + interval '1 minute')`.execute(s.db);
  const up = await createMigrator(s.db).migrateToLatest();
  expect(up.error).toBeUndefined();
  expect(up.results?.map((r) => r.status).every((x) => x === 'Success')).toBe(true);
});

afterAll(async () => {
  await s?.drop();
});

describe('migration 1410: what unclamped headers stored, within the hour', () => {
  it('blocks and resets past an hour are an hour; the others are untouched', async () => {
    const r = await sql<{ credential: string; reset_ok: boolean; blocked_ok: boolean | null }>`
      SELECT credential, reset_at <= now() + interval '1 hour 1 minute' AS reset_ok,
        blocked_until <= now() + interval '1 hour' AS blocked_ok
      FROM github_rate_limits ORDER BY credential`.execute(s.db);
    expect(r.rows).toEqual([
      { credential: 'token:fine', reset_ok: true, blocked_ok: null },
      { credential: 'token:old', reset_ok: true, blocked_ok: true },
    ]);
  });

  it('sources: next poll within the hour, intervals 1 – 3600 s, deaths counted from 0, a CHECK', async () => {
    const r = await sql<{ target: string; interval: number; soon: boolean; deaths: number }>`
      SELECT target, poll_interval_seconds AS interval,
        next_poll_at <= now() + interval '1 hour' AS soon, poll_deaths AS deaths
      FROM event_sources ORDER BY target`.execute(s.db);
    expect(r.rows).toEqual([
      { target: 'a/far', interval: 1, soon: true, deaths: 0 },
      { target: 'a/fine', interval: 60, soon: true, deaths: 0 },
      { target: 'a/huge', interval: 3600, soon: true, deaths: 0 },
    ]);
    await expect(
      sql`UPDATE event_sources SET poll_interval_seconds = 0`.execute(s.db),
    ).rejects.toThrow(/event_sources_poll_interval_bounds/);
  });

  it('push_events gain the fetch attempt mark and its deaths', async () => {
    const r = await sql<{ column_name: string }>`
      SELECT column_name FROM information_schema.columns
      WHERE table_name = 'push_events' AND column_name LIKE 'commits_%'
        AND column_name IN ('commits_fetch_started_at', 'commits_deaths')
      ORDER BY 1`.execute(s.db);
    expect(r.rows.map((x) => x.column_name)).toEqual([
      'commits_deaths',
      'commits_fetch_started_at',
    ]);
  });
});
