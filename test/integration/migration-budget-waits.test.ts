import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMigrator } from '../../src/platform/db/migrate.ts';
import { downToJustBefore } from '../support/migration-steps.ts';
import { createScratchDatabase, type ScratchDatabase } from '../support/scratch-db.ts';

// budget_waits (2026-12-04T1020, ADR 0181): a background purpose told no while it waits for
// REST requests. Taken down and brought up as a deployment upgrading would: the table starts
// empty, holds one row a purpose (only enrich or commits), and goes down again cleanly.
const MIGRATION = '2026-12-04T1020_budget_waits';
let s: ScratchDatabase;
let before = '';

async function tableExists(): Promise<boolean> {
  const r = await sql<{ t: string | null }>`
    SELECT to_regclass('budget_waits')::text AS t`.execute(s.db);
  return r.rows[0]!.t !== null;
}

beforeAll(async () => {
  s = await createScratchDatabase();
  ({ before } = await downToJustBefore(s.db, MIGRATION));
  expect(await tableExists()).toBe(false);
  const up = await createMigrator(s.db).migrateToLatest();
  expect(up.error).toBeUndefined();
  expect(up.results?.map((r) => [r.migrationName, r.status])[0]).toEqual([MIGRATION, 'Success']);
});

afterAll(async () => {
  await s?.drop();
});

describe(`migration ${MIGRATION}`, () => {
  it('starts empty and keeps one row a background purpose', async () => {
    const n = await sql<{ n: number }>`SELECT count(*)::int AS n FROM budget_waits`.execute(s.db);
    expect(n.rows[0]!.n).toBe(0);
    const at = new Date('2026-12-04T10:20:00Z');
    for (let i = 0; i < 2; i++) {
      await sql`INSERT INTO budget_waits AS b (purpose, since, refused_at)
        VALUES ('commits', ${at}, ${new Date(at.getTime() + i * 1000)})
        ON CONFLICT (purpose) DO UPDATE SET refused_at = EXCLUDED.refused_at`.execute(s.db);
    }
    const rows = await sql<{ purpose: string; refused_at: Date }>`
      SELECT purpose, refused_at FROM budget_waits`.execute(s.db);
    expect(rows.rows).toEqual([{ purpose: 'commits', refused_at: new Date(at.getTime() + 1000) }]);
    await expect(
      sql`INSERT INTO budget_waits (purpose, since, refused_at) VALUES ('poll', ${at}, ${at})`.execute(
        s.db,
      ),
    ).rejects.toThrow(/check/i);
    await expect(
      sql`INSERT INTO budget_waits (purpose, since, refused_at)
        VALUES ('enrich', ${at}, ${new Date(at.getTime() - 1)})`.execute(s.db),
    ).rejects.toThrow(/check/i);
  });

  it('goes down cleanly', async () => {
    const down = await createMigrator(s.db).migrateTo(before);
    expect(down.error).toBeUndefined();
    expect(await tableExists()).toBe(false);
  });
});
