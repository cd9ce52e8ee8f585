import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMigrator } from '../../src/platform/db/migrate.ts';
import { downToJustBefore } from '../support/migration-steps.ts';
import { createScratchDatabase, type ScratchDatabase } from '../support/scratch-db.ts';

// poll_cost_samples (2026-12-01T1520, ADR 0141) over sources that already polled: taken down,
// filled, brought up as a deployment upgrading would. A source whose poll_cost left the prior
// (1) has learned from answers; one still at 1 is treated as not yet known.
const MIGRATION = '2026-12-01T1520_poll_cost_samples';
let s: ScratchDatabase;
let taken: string[] = [];
let before = '';

beforeAll(async () => {
  s = await createScratchDatabase();
  ({ before, taken } = await downToJustBefore(s.db, MIGRATION));
  await sql`
    INSERT INTO event_sources (kind, target, mode, commits_enabled, etag, poll_cost)
    VALUES ('repo', 'a/prior', 'live', false, NULL, 1),
           ('repo', 'a/idle', 'live', false, '"e"', 0.125),
           ('repo', 'a/busy', 'live', false, '"e"', 2.5),
           ('repo', 'a/silent', 'live', false, '"e"', 0)`.execute(s.db);
  const up = await createMigrator(s.db).migrateToLatest();
  expect(up.error).toBeUndefined();
  expect(up.results?.map((r) => [r.migrationName, r.status])).toEqual(
    [...taken].reverse().map((name) => [name, 'Success']),
  );
});

afterAll(async () => {
  await s?.drop();
});

describe(`migration ${MIGRATION}`, () => {
  it('marks the sources that learned, leaves the prior as the prior, and defaults new ones to 0', async () => {
    await sql`INSERT INTO event_sources (kind, target, mode, commits_enabled)
      VALUES ('repo', 'a/new', 'live', false)`.execute(s.db);
    const rows = await sql<{ target: string; poll_cost_samples: number }>`
      SELECT target, poll_cost_samples FROM event_sources ORDER BY target`.execute(s.db);
    expect(rows.rows).toEqual([
      { target: 'a/busy', poll_cost_samples: 1 },
      { target: 'a/idle', poll_cost_samples: 1 },
      { target: 'a/new', poll_cost_samples: 0 },
      { target: 'a/prior', poll_cost_samples: 0 },
      { target: 'a/silent', poll_cost_samples: 1 },
    ]);
    await expect(
      sql`UPDATE event_sources SET poll_cost_samples = -1`.execute(s.db),
    ).rejects.toThrow(/check/i);
  });

  it('goes down again cleanly and comes back up', async () => {
    expect((await createMigrator(s.db).migrateTo(before)).error).toBeUndefined();
    const cols = await sql<{ n: string }>`
      SELECT count(*) AS n FROM information_schema.columns
      WHERE table_name = 'event_sources' AND column_name = 'poll_cost_samples'`.execute(s.db);
    expect(Number(cols.rows[0]!.n)).toBe(0);
    expect((await createMigrator(s.db).migrateToLatest()).error).toBeUndefined();
  });
});
