import { readdirSync } from 'node:fs';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMigrator, MIGRATIONS_DIR, migrateToLatest } from '../../src/platform/db/migrate.ts';
import { createScratchDatabase, type ScratchDatabase } from '../support/scratch-db.ts';

// Event ids are not keys (2026-12-01T1400 and T1401, ADR 0122) over a database that holds
// pushes, a ring and rejected events: taken down, filled, brought up again as an upgrade
// would — by migrateToLatest (the index built CONCURRENTLY between the two), and by
// Kysely's migrator alone (the index built in the migration's transaction).
const IDS = '2026-12-01T1400_event_ids';
const INDEX = '2026-12-01T1401_event_id_index';
const BEFORE = '2026-12-01T1300_request_minutes';
/** Every migration after IDS, in order: INDEX first, then those dated after it. */
const AFTER_IDS = readdirSync(MIGRATIONS_DIR)
  .filter((f) => f.endsWith('.ts'))
  .map((f) => f.replace(/\.ts$/, ''))
  .sort()
  .filter((name) => name > IDS);
let s: ScratchDatabase;

async function down() {
  const r = await createMigrator(s.db).migrateTo(BEFORE);
  expect(r.error).toBeUndefined();
  expect(r.results?.map((m) => m.migrationName).slice(-2)).toEqual([INDEX, IDS]);
}

async function indexes() {
  const r = await sql<{ name: string; def: string; valid: boolean }>`
    SELECT c.relname AS name, pg_get_indexdef(i.indexrelid) AS def, i.indisvalid AS valid
    FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
    WHERE i.indrelid IN ('push_events'::regclass, to_regclass('push_keys'))
      AND c.relname IN ('push_events_event_id', 'push_events_id_key')
    ORDER BY 1`.execute(s.db);
  return r.rows;
}

/**
 * One push per id and era, as the latest migration holds it: since push_events is
 * partitioned by month (2026-12-05T1100), on push_keys, one row a push; its era from its
 * time since 2026-12-05T1430.
 */
const EXPECTED = {
  name: 'push_events_event_id',
  def: 'CREATE UNIQUE INDEX push_events_event_id ON public.push_keys USING btree (event_id, event_id_era(created_at)) WHERE (event_id IS NOT NULL)',
  valid: true,
};

beforeAll(async () => {
  s = await createScratchDatabase();
  await down();
  await sql`INSERT INTO event_sources (kind, target, mode, commits_enabled, recent_event_ids) VALUES
    ('repo', 'octo/cat', 'live', false, '{40000000003,40000000002}')`.execute(s.db);
  await sql`
    INSERT INTO push_events (id, actor_id, repository_id, ref, head, before, created_at, payload)
    VALUES (40000000001, 1, 10, 'refs/heads/main', 'h1', 'b1', '2026-11-29T08:00:00Z', '{}'),
           (NULL, 1, 10, 'refs/heads/main', 'h2', 'b2', '2026-11-29T08:00:00Z', '{}')`.execute(
    s.db,
  );
  await sql`
    INSERT INTO rejected_events (event_id, event_key, reason, message, raw, raw_exact) VALUES
      ('5', '5', 'malformed', 'm', '{"id": "5", "created_at": "2019-06-01T12:00:00Z"}', true),
      ('6', '6', 'malformed', 'm', '{"id": "6", "created_at": "not a time"}', true),
      (NULL, 'sha256:ab', 'bad_id', 'm', '{"id": {}}', true)`.execute(s.db);
});

afterAll(async () => {
  await s?.drop();
});

describe('migrateToLatest: the index built CONCURRENTLY, then the swap', () => {
  it('builds the index while pushes are written, then swaps it for UNIQUE (id), every row kept', async () => {
    expect((await createMigrator(s.db).migrateTo(IDS)).error).toBeUndefined();
    // A writer in the middle of a transaction: the build waits for it, and meanwhile other
    // writers go on (an index built in the migration's transaction would queue them).
    const writer = await s.pool.connect();
    const other = await s.pool.connect();
    try {
      await writer.query('BEGIN');
      await writer.query(`
        INSERT INTO push_events (id, actor_id, repository_id, ref, head, before, created_at, payload)
        VALUES (40000000005, 1, 10, 'refs/heads/main', 'h5', 'b5', now(), '{}')`);
      const migrating = migrateToLatest(s.db);
      for (;;) {
        const w = await other.query(`
          SELECT count(*)::int AS n FROM pg_stat_activity
          WHERE datname = current_database() AND query LIKE 'CREATE UNIQUE INDEX%'
            AND wait_event_type = 'Lock'`);
        if (w.rows[0].n > 0) break;
        await new Promise((r) => setTimeout(r, 20));
      }
      await other.query(`SET statement_timeout = '5s'`);
      await other.query(`
        INSERT INTO push_events (id, actor_id, repository_id, ref, head, before, created_at, payload)
        VALUES (40000000006, 1, 10, 'refs/heads/main', 'h6', 'b6', now(), '{}')`);
      await writer.query('COMMIT');
      // INDEX built CONCURRENTLY on its own, then every later migration.
      expect(await migrating).toEqual(AFTER_IDS);
      expect(AFTER_IDS[0]).toBe(INDEX);
    } finally {
      await other.query('RESET statement_timeout');
      writer.release();
      other.release();
    }
    expect(await indexes()).toEqual([EXPECTED]);
    const n = await sql<{ n: string }>`SELECT count(*) AS n FROM push_events`.execute(s.db);
    expect(n.rows[0]!.n).toBe('4');
    await sql`DELETE FROM push_events WHERE head IN ('h5', 'h6')`.execute(s.db);
  });

  it('gives an old ring no times, and rekeys rejected events by era when their time is plain UTC', async () => {
    const ring = await sql<{ ids: string[]; at: (Date | null)[] }>`
      SELECT recent_event_ids::text[] AS ids, recent_event_at AS at FROM event_sources`.execute(
      s.db,
    );
    expect(ring.rows).toEqual([{ ids: ['40000000003', '40000000002'], at: [null, null] }]);
    const keys = await sql<{ event_key: string }>`
      SELECT event_key FROM rejected_events ORDER BY event_key`.execute(s.db);
    expect(keys.rows.map((r) => r.event_key)).toEqual(['5@2019', '6', 'sha256:ab']);
  });

  it('stores an id of another era beside the one held, and refuses a second push of one era', async () => {
    await sql`
      INSERT INTO push_events (id, actor_id, repository_id, ref, head, before, created_at, payload)
      VALUES (40000000001, 1, 10, 'refs/heads/main', 'h3', 'b3', '2019-06-01T12:00:00Z', '{}')`.execute(
      s.db,
    );
    await expect(
      sql`
        INSERT INTO push_events (id, actor_id, repository_id, ref, head, before, created_at, payload)
        VALUES (40000000001, 1, 10, 'refs/heads/main', 'h4', 'b4', '2026-01-01T00:00:00Z', '{}')`.execute(
        s.db,
      ),
    ).rejects.toThrow(/push_events_event_id/);
  });

  it('refuses to go down while an id is held in two eras, and goes down once it is not', async () => {
    await expect(createMigrator(s.db).migrateTo(BEFORE)).resolves.toMatchObject({
      error: expect.objectContaining({
        message: expect.stringMatching(/cannot restore UNIQUE \(id\).*1 event ids/),
      }),
    });
    await sql`DELETE FROM push_events WHERE head = 'h3'`.execute(s.db);
    await down();
    const keys = await sql<{ event_key: string }>`
      SELECT event_key FROM rejected_events ORDER BY event_key`.execute(s.db);
    expect(keys.rows.map((r) => r.event_key)).toEqual(['5', '6', 'sha256:ab']);
    const back = await sql<{ name: string }>`
      SELECT c.relname AS name FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
      WHERE i.indrelid = 'push_events'::regclass AND c.relname LIKE 'push_events_%id%'`.execute(
      s.db,
    );
    expect(back.rows).toEqual([{ name: 'push_events_id_key' }]);
  });
});

describe("Kysely's migrator alone: the index built in the migration's transaction", () => {
  it('builds the same index, and rebuilds one a killed concurrent build left INVALID', async () => {
    // What a CREATE INDEX CONCURRENTLY that failed half-way leaves: an INVALID index of that
    // name (here one that met duplicates: both pushes are on refs/heads/main).
    const up1400 = await createMigrator(s.db).migrateTo(IDS);
    expect(up1400.error).toBeUndefined();
    await expect(
      sql`CREATE UNIQUE INDEX CONCURRENTLY push_events_event_id ON push_events (ref)`.execute(s.db),
    ).rejects.toThrow(/could not create unique index/);
    expect((await indexes()).map((i) => i.valid)).toEqual([false, true]);
    const up = await createMigrator(s.db).migrateToLatest();
    expect(up.error).toBeUndefined();
    expect(await indexes()).toEqual([EXPECTED]);
  });

  it('is a no-op for migrateToLatest afterwards', async () => {
    expect(await migrateToLatest(s.db)).toEqual([]);
  });
});
