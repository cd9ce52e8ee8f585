import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMigrator } from '../../src/platform/db/migrate.ts';
import { createScratchDatabase, type ScratchDatabase } from '../support/scratch-db.ts';

// The per-minute counters (2026-12-01T1300, ADR 0083) over a ledger that already holds rows:
// taken down, filled, brought up again as a deployment upgrading would — the backfill counts
// exactly the rows that spend, and the triggers keep it from there.
const MIGRATION = '2026-12-01T1300_request_minutes';
const BEFORE = '2026-12-01T1200_mirrors';
let s: ScratchDatabase;

beforeAll(async () => {
  s = await createScratchDatabase();
  const down = await createMigrator(s.db).migrateTo(BEFORE);
  expect(down.error).toBeUndefined();
  // Taken down last: every migration after it goes first (later ones are not this test's).
  const downNames = down.results?.map((r) => r.migrationName) ?? [];
  expect(downNames.at(-1)).toBe(MIGRATION);
  // Two minutes of two credentials: 200s, 304s (free), unsent abandoned (free), a sent
  // abandoned (spends), an open reservation (spends).
  await sql`
    INSERT INTO github_requests (credential, purpose, path, outcome, status, counted,
      reserved_at, sent_at, finished_at)
    VALUES
      ('c', 'poll', '/p', 'completed', 200, true, '2026-12-01 10:00:01Z', '2026-12-01 10:00:01Z', '2026-12-01 10:00:02Z'),
      ('c', 'poll', '/p', 'completed', 304, false, '2026-12-01 10:00:03Z', '2026-12-01 10:00:03Z', '2026-12-01 10:00:04Z'),
      ('c', 'enrich', '/u', 'abandoned', NULL, NULL, '2026-12-01 10:00:05Z', NULL, '2026-12-01 10:00:06Z'),
      ('c', 'enrich', '/u', 'abandoned', NULL, NULL, '2026-12-01 10:00:07Z', '2026-12-01 10:00:07Z', '2026-12-01 10:05:00Z'),
      ('c', 'commits', '/c', 'reserved', NULL, NULL, '2026-12-01 10:01:59.999Z', NULL, NULL),
      ('d', 'enrich', '/u', 'completed', 200, true, '2026-12-01 10:01:00Z', '2026-12-01 10:01:00Z', '2026-12-01 10:01:01Z')`.execute(
    s.db,
  );
  const up = await createMigrator(s.db).migrateToLatest();
  expect(up.error).toBeUndefined();
  expect(up.results?.map((r) => [r.migrationName, r.status])).toEqual(
    [...downNames].reverse().map((name) => [name, 'Success']),
  );
});

afterAll(async () => {
  await s?.drop();
});

const minutes = async () =>
  (
    await sql<{ credential: string; minute: Date; poll: number; enrich: number; commits: number }>`
      SELECT credential, minute, poll, enrich, commits FROM github_request_minutes
      ORDER BY credential, minute`.execute(s.db)
  ).rows;

describe(`migration ${MIGRATION}`, () => {
  it('backfills the counters from the rows that spend', async () => {
    expect(await minutes()).toEqual([
      { credential: 'c', minute: new Date('2026-12-01T10:00:00Z'), poll: 1, enrich: 1, commits: 0 },
      { credential: 'c', minute: new Date('2026-12-01T10:01:00Z'), poll: 0, enrich: 0, commits: 1 },
      { credential: 'd', minute: new Date('2026-12-01T10:01:00Z'), poll: 0, enrich: 1, commits: 0 },
    ]);
  });

  it('keeps them from there: a release, a move to another minute, a delete', async () => {
    await sql`UPDATE github_requests SET outcome = 'abandoned', finished_at = reserved_at
      WHERE purpose = 'commits'`.execute(s.db);
    await sql`UPDATE github_requests SET reserved_at = '2026-12-01 10:02:30Z'
      WHERE credential = 'd'`.execute(s.db);
    await sql`DELETE FROM github_requests WHERE credential = 'c' AND purpose = 'poll'`.execute(
      s.db,
    );
    expect(await minutes()).toEqual([
      { credential: 'c', minute: new Date('2026-12-01T10:00:00Z'), poll: 0, enrich: 1, commits: 0 },
      { credential: 'c', minute: new Date('2026-12-01T10:01:00Z'), poll: 0, enrich: 0, commits: 0 },
      { credential: 'd', minute: new Date('2026-12-01T10:01:00Z'), poll: 0, enrich: 0, commits: 0 },
      { credential: 'd', minute: new Date('2026-12-01T10:02:00Z'), poll: 0, enrich: 1, commits: 0 },
    ]);
  });
});
