import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMigrator, migrateToLatest } from '../../src/platform/db/migrate.ts';
import { createScratchDatabase, type ScratchDatabase } from '../support/scratch-db.ts';

// push_events_commits_awaiting (2026-12-04T1110): the pushes skipped for lack of a credential,
// by push time. Built CONCURRENTLY by migrateToLatest before the migration, which then only
// checks it; built in the migration's transaction by any other route, replacing a leftover
// of the wrong shape. Pushes already stored keep their state.
const MIGRATION = '2026-12-04T1110_commits_awaiting_credential';
const EXPECTED =
  "CREATE INDEX push_events_commits_awaiting ON public.push_events USING btree (created_at) WHERE ((commits_state = 'skipped'::text) AND (commits_next_attempt_at IS NOT NULL))";
let s: ScratchDatabase;
let before = '';

/** The index's definition; on push_events partitioned by month (2026-12-05T1100), its parent's ("ON ONLY"). */
async function indexDef(): Promise<{ def: string; valid: boolean }[]> {
  const r = await sql<{ def: string; valid: boolean }>`
    SELECT replace(pg_get_indexdef(i.indexrelid), ' ON ONLY ', ' ON ') AS def, i.indisvalid AS valid
    FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
    WHERE c.relname = 'push_events_commits_awaiting'`.execute(s.db);
  return r.rows;
}

async function down(): Promise<void> {
  const r = await createMigrator(s.db).migrateTo(before);
  expect(r.error).toBeUndefined();
  expect(r.results?.map((m) => m.migrationName)).toContain(MIGRATION);
  expect(await indexDef()).toEqual([]);
}

async function states(): Promise<string[]> {
  const r = await sql<{ s: string }>`
    SELECT commits_state || ':' || (commits_next_attempt_at IS NOT NULL) AS s FROM push_events
    ORDER BY head`.execute(s.db);
  return r.rows.map((x) => x.s);
}

beforeAll(async () => {
  s = await createScratchDatabase();
  const names = (await createMigrator(s.db).getMigrations()).map((m) => m.name).sort();
  before = names[names.indexOf(MIGRATION) - 1]!;
  await sql`
    INSERT INTO push_events (actor_id, repository_id, ref, before, head, created_at, payload,
      commits_state, commits_next_attempt_at)
    VALUES (1, 10, 'refs/heads/main', 'b1', 'h1', now(), '{}', 'skipped', NULL),
           (1, 10, 'refs/heads/main', 'b2', 'h2', now(), '{}', 'pending', now())`.execute(s.db);
});

afterAll(async () => {
  await s?.drop();
});

describe(`migration ${MIGRATION}`, () => {
  it('migrateToLatest (the CONCURRENTLY route) leaves the index valid and the migration applied', async () => {
    await down();
    const applied = await migrateToLatest(s.db);
    expect(applied).toContain(MIGRATION);
    expect(await indexDef()).toEqual([{ def: EXPECTED, valid: true }]);
    // A push skipped before is not made to wait: nothing recorded that a credential was missing.
    expect(await states()).toEqual(['skipped:false', 'pending:true']);
  });

  it("Kysely's migrator alone builds it in the transaction, replacing one of the wrong shape", async () => {
    await down();
    await sql`CREATE INDEX push_events_commits_awaiting ON push_events (commits_state)`.execute(
      s.db,
    );
    const up = await createMigrator(s.db).migrateToLatest();
    expect(up.error).toBeUndefined();
    expect(await indexDef()).toEqual([{ def: EXPECTED, valid: true }]);
    expect(await states()).toEqual(['skipped:false', 'pending:true']);
  });
});
