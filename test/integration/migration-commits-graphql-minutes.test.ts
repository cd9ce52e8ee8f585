import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMigrator } from '../../src/platform/db/migrate.ts';
import { downToJustBefore } from '../support/migration-steps.ts';
import { createScratchDatabase, type ScratchDatabase } from '../support/scratch-db.ts';

// commits_graphql_minutes (2026-12-02T0600, ADR 0171): the pushes GraphQL settled per minute
// and shard, for pushes a point. Taken down over stored pushes and brought up as a deployment
// upgrading would: the pushes stay as they were (nothing on push_events), the table starts
// empty, its keys and checks hold, and it goes down again cleanly.
const MIGRATION = '2026-12-02T0600_commits_graphql_minutes';
let s: ScratchDatabase;
let before = '';

async function tableExists(): Promise<boolean> {
  const r = await sql<{ t: string | null }>`
    SELECT to_regclass('commits_graphql_minutes')::text AS t`.execute(s.db);
  return r.rows[0]!.t !== null;
}

beforeAll(async () => {
  s = await createScratchDatabase();
  ({ before } = await downToJustBefore(s.db, MIGRATION));
  expect(await tableExists()).toBe(false);
  await sql`
    INSERT INTO push_events (actor_id, repository_id, ref, before, head, created_at, payload,
      commits_state, commit_count)
    VALUES (1, 10, 'refs/heads/main', 'b1', 'h1', now(), '{}', 'complete', 1)`.execute(s.db);
  const up = await createMigrator(s.db).migrateToLatest();
  expect(up.error).toBeUndefined();
  expect(up.results?.map((r) => [r.migrationName, r.status])[0]).toEqual([MIGRATION, 'Success']);
});

afterAll(async () => {
  await s?.drop();
});

describe(`migration ${MIGRATION}`, () => {
  it('starts empty, leaves pushes alone, and keeps one row a minute and shard', async () => {
    const n = await sql<{
      n: number;
    }>`SELECT count(*)::int AS n FROM commits_graphql_minutes`.execute(s.db);
    expect(n.rows[0]!.n).toBe(0);
    const push = await sql<{ commits_state: string }>`
      SELECT commits_state FROM push_events WHERE head = 'h1'`.execute(s.db);
    expect(push.rows).toEqual([{ commits_state: 'complete' }]);
    const minute = new Date('2026-12-02T06:00:00Z');
    for (let i = 0; i < 3; i++) {
      await sql`INSERT INTO commits_graphql_minutes AS m (minute, shard, pushes)
        VALUES (${minute}, 1, 1)
        ON CONFLICT (minute, shard) DO UPDATE SET pushes = m.pushes + 1`.execute(s.db);
    }
    const rows = await sql<{ shard: number; pushes: number }>`
      SELECT shard, pushes FROM commits_graphql_minutes`.execute(s.db);
    expect(rows.rows).toEqual([{ shard: 1, pushes: 3 }]);
    await expect(
      sql`INSERT INTO commits_graphql_minutes (minute, shard, pushes) VALUES (${minute}, 2, -1)`.execute(
        s.db,
      ),
    ).rejects.toThrow(/check/i);
    await expect(
      sql`INSERT INTO commits_graphql_minutes (minute, shard) VALUES (${minute}, -1)`.execute(s.db),
    ).rejects.toThrow(/check/i);
  });

  it('goes down again cleanly and comes back up', async () => {
    expect((await createMigrator(s.db).migrateTo(before)).error).toBeUndefined();
    expect(await tableExists()).toBe(false);
    expect((await createMigrator(s.db).migrateToLatest()).error).toBeUndefined();
    expect(await tableExists()).toBe(true);
  });
});
