import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMigrator, migrateToLatest } from '../../src/platform/db/migrate.ts';
import { createScratchDatabase, type ScratchDatabase } from '../support/scratch-db.ts';

// push_events_ref_created_at (2026-12-02T0500): built CONCURRENTLY by migrateToLatest
// before the migration, which then only checks it; built in the migration's transaction
// by any other route, replacing a leftover of the wrong shape. Pushes already stored stay.
const MIGRATION = '2026-12-02T0500_push_events_ref_created_at';
const EXPECTED =
  'CREATE INDEX push_events_ref_created_at ON public.push_events USING btree (repository_id, ref, created_at)';
/** The shape migration 2026-12-05T1410 gives it since: the ref by its hash. */
const LATEST =
  'CREATE INDEX push_events_ref_created_at ON public.push_events USING btree (repository_id, hashtext(ref), created_at)';
let s: ScratchDatabase;
let before = '';

/** The index's definition; on push_events partitioned by month (2026-12-05T1100), its parent's ("ON ONLY"). */
async function indexDef(): Promise<{ def: string; valid: boolean }[]> {
  const r = await sql<{ def: string; valid: boolean }>`
    SELECT replace(pg_get_indexdef(i.indexrelid), ' ON ONLY ', ' ON ') AS def, i.indisvalid AS valid
    FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
    WHERE c.relname = 'push_events_ref_created_at'`.execute(s.db);
  return r.rows;
}

async function down(): Promise<void> {
  const r = await createMigrator(s.db).migrateTo(before);
  expect(r.error).toBeUndefined();
  expect(r.results?.map((m) => m.migrationName).at(-1)).toBe(MIGRATION);
  expect(await indexDef()).toEqual([]);
}

beforeAll(async () => {
  s = await createScratchDatabase();
  const names = (await createMigrator(s.db).getMigrations()).map((m) => m.name).sort();
  before = names[names.indexOf(MIGRATION) - 1]!;
  await sql`
    INSERT INTO push_events (actor_id, repository_id, ref, before, head, created_at, payload)
    VALUES (1, 10, 'refs/heads/main', 'b1', 'h1', now(), '{}')`.execute(s.db);
});

afterAll(async () => {
  await s?.drop();
});

describe(`migration ${MIGRATION}`, () => {
  it('migrateToLatest (the CONCURRENTLY route) leaves the index valid and the migration applied', async () => {
    await down();
    const applied = await migrateToLatest(s.db);
    // it, then every migration after it (2026-12-02T0600_commits_graphql_minutes, …)
    expect(applied[0]).toBe(MIGRATION);
    expect(applied).toContain('2026-12-02T0600_commits_graphql_minutes');
    expect(await indexDef()).toEqual([{ def: LATEST, valid: true }]);
  });

  it("Kysely's migrator alone builds it in the transaction, replacing one of the wrong shape", async () => {
    await down();
    await sql`CREATE INDEX push_events_ref_created_at ON push_events (repository_id, created_at)`.execute(
      s.db,
    );
    const up = await createMigrator(s.db).migrateTo(MIGRATION);
    expect(up.error).toBeUndefined();
    expect(await indexDef()).toEqual([{ def: EXPECTED, valid: true }]);
    expect((await createMigrator(s.db).migrateToLatest()).error).toBeUndefined();
    expect(await indexDef()).toEqual([{ def: LATEST, valid: true }]);
    const n = await sql<{ n: number }>`SELECT count(*)::int AS n FROM push_events`.execute(s.db);
    expect(n.rows[0]!.n).toBe(1);
  });
});
