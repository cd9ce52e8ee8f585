import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMigrator } from '../../src/platform/db/migrate.ts';
import { downToJustBefore } from '../support/migration-steps.ts';
import { createScratchDatabase, type ScratchDatabase } from '../support/scratch-db.ts';

// archive_hour_state (2026-12-04T1100, ADR 0185): the per-hour change counts /archive reads
// instead of an hour's rows, the files it built, the renamed accounts, and what marks an hour
// an import writes into. Taken down over a store with pushes and checkpoints and brought up
// as a deployment upgrading would: stored rows stay as they were, the counts start empty and
// then follow writes, a checkpoint may be `open`, and it goes down again cleanly.
const MIGRATION = '2026-12-04T1100_archive_hour_state';
let s: ScratchDatabase;
let before = '';

async function exists(name: string): Promise<boolean> {
  const r = await sql<{ t: string | null }>`SELECT to_regclass(${name})::text AS t`.execute(s.db);
  return r.rows[0]!.t !== null;
}

async function changes(hour: string): Promise<number> {
  const r = await sql<{ n: number }>`
    SELECT coalesce(sum(changes), 0)::int AS n FROM archive_hour_changes
    WHERE hour = ${hour}::timestamptz`.execute(s.db);
  return r.rows[0]!.n;
}

beforeAll(async () => {
  s = await createScratchDatabase();
  ({ before } = await downToJustBefore(s.db, MIGRATION));
  expect(await exists('archive_hour_changes')).toBe(false);
  await sql`INSERT INTO actors (id, login) VALUES (1, 'octo')`.execute(s.db);
  await sql`INSERT INTO repositories (id, full_name) VALUES (10, 'o/r')`.execute(s.db);
  await sql`
    INSERT INTO push_events (actor_id, repository_id, ref, before, head, created_at, payload,
      commits_state, commit_count)
    VALUES (1, 10, 'refs/heads/main', 'b1', 'h1', '2026-11-01T10:05:00Z', '{}', 'complete', 1)`.execute(
    s.db,
  );
  await sql`
    INSERT INTO backfill_files (file, scope, state, hour) VALUES ('2026-11-01-10', 'all',
      'completed', '2026-11-01T10:00:00Z')`.execute(s.db);
  const up = await createMigrator(s.db).migrateToLatest();
  expect(up.error).toBeUndefined();
  expect(up.results?.map((r) => [r.migrationName, r.status])[0]).toEqual([MIGRATION, 'Success']);
});

afterAll(async () => {
  await s?.drop();
});

describe(`migration ${MIGRATION}`, () => {
  it('leaves stored rows alone; the counts start empty and follow the writes after it', async () => {
    const push = await sql<{ commits_state: string }>`
      SELECT commits_state FROM push_events WHERE head = 'h1'`.execute(s.db);
    expect(push.rows).toEqual([{ commits_state: 'complete' }]);
    const file = await sql<{ state: string; writes_from: Date | null }>`
      SELECT state, writes_from FROM backfill_files`.execute(s.db);
    expect(file.rows).toEqual([{ state: 'completed', writes_from: null }]);
    expect(await changes('2026-11-01T10:00:00Z')).toBe(0);
    await sql`UPDATE push_events SET commit_count = 2 WHERE head = 'h1'`.execute(s.db);
    await sql`UPDATE actors SET login = 'octo-renamed' WHERE id = 1`.execute(s.db);
    expect(await changes('2026-11-01T10:00:00Z')).toBe(1);
    const renamed = await sql<{ actor_id: string }>`
      SELECT actor_id FROM archive_renamed_actors`.execute(s.db);
    expect(renamed.rows).toEqual([{ actor_id: '1' }]);
    await sql`UPDATE backfill_files SET state = 'open'`.execute(s.db);
    await expect(sql`UPDATE backfill_files SET state = 'done'`.execute(s.db)).rejects.toThrow(
      /check/i,
    );
  });

  it('forgets every built file when a table its lines are read from is truncated', async () => {
    await sql`
      INSERT INTO archive_hour_files (hour, format, changes, snapshot, sha256, bytes, pushes, pending)
      VALUES ('2026-11-01T10:00:00Z', 'v1/test', 1, pg_current_snapshot(), repeat('a', 64), 20, 1, 0)`.execute(
      s.db,
    );
    await sql`TRUNCATE stored_commits`.execute(s.db);
    const left = await sql<{ n: number }>`
      SELECT count(*)::int AS n FROM archive_hour_files`.execute(s.db);
    expect(left.rows[0]!.n).toBe(0);
  });

  it('goes down and up again', async () => {
    const down = await createMigrator(s.db).migrateTo(before);
    expect(down.error).toBeUndefined();
    expect(await exists('archive_hour_changes')).toBe(false);
    expect(await exists('archive_hour_files')).toBe(false);
    const states = await sql<{ state: string }>`SELECT state FROM backfill_files`.execute(s.db);
    expect(states.rows).toEqual([{ state: 'failed' }]);
    // Writes go on without the triggers.
    await sql`UPDATE push_events SET commit_count = 3 WHERE head = 'h1'`.execute(s.db);
    const up = await createMigrator(s.db).migrateToLatest();
    expect(up.error).toBeUndefined();
    expect(await exists('archive_hour_changes')).toBe(true);
  });
});
