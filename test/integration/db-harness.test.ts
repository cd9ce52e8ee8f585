import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { pendingMigrations } from '../../src/platform/db/migrate.ts';
import { useTestDatabase } from '../support/db.ts';

const t = useTestDatabase();

describe('test database harness', () => {
  it('gives each file its own migrated database', async () => {
    const r = await sql<{ db: string }>`SELECT current_database() AS db`.execute(t.db);
    expect(r.rows[0]!.db).toBe(t.name);
    expect(await pendingMigrations(t.db)).toEqual([]);
    const tables = await sql<{ table_name: string }>`
      SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY 1`.execute(
      t.db,
    );
    expect(tables.rows.map((r) => r.table_name)).toEqual(
      expect.arrayContaining([
        'event_sources',
        'ingestion_runs',
        'push_events',
        'actors',
        'repositories',
        'github_requests',
      ]),
    );
  });
});
