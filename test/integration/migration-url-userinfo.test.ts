import { readdirSync } from 'node:fs';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMigrator, MIGRATIONS_DIR } from '../../src/platform/db/migrate.ts';
import { createScratchDatabase, type ScratchDatabase } from '../support/scratch-db.ts';

// 2026-12-01T1421 over a database that stored mirror passwords before:
// taken down, filled as the old code filled it, brought up again as an upgrade would.
const MIGRATION = '2026-12-01T1421_url_userinfo_scrub';
const names = readdirSync(MIGRATIONS_DIR)
  .filter((f) => f.endsWith('.ts'))
  .map((f) => f.replace(/\.ts$/, ''))
  .sort();
const BEFORE = names[names.indexOf(MIGRATION) - 1]!;
const SECRET = 'MIGSENTINEL';
let s: ScratchDatabase;

beforeAll(async () => {
  s = await createScratchDatabase();
  const down = await createMigrator(s.db).migrateTo(BEFORE);
  expect(down.error).toBeUndefined();
  const mirror = `http://reader:${SECRET}-old@127.0.0.1:8080`;
  const rotated = `http://reader:${SECRET}-new@127.0.0.1:8080`;
  await sql`
    INSERT INTO backfill_files (file, scope, state, mirror, error, updated_at) VALUES
      ('2026-11-20-4', 'all', 'completed', ${mirror}, NULL, '2026-11-20 06:00Z'),
      -- The same hour after the password changed: one key once redacted; the later stands.
      ('2026-11-20-4', 'all', 'failed', ${rotated},
       ${`ARCHIVE_UNAVAILABLE: ${rotated}/2026-11-20-4.json.gz: answered 503`}, '2026-11-20 07:00Z'),
      ('2026-11-20-5', 'all', 'missing', ${mirror},
       ${`${mirror}/2026-11-20-5.json.gz is not on the archive (404)`}, '2026-11-20 06:00Z'),
      ('/tmp/local.json.gz', 'all', 'completed', '', NULL, '2026-11-20 06:00Z')`.execute(s.db);
  const source = await sql<{ id: string }>`
    INSERT INTO event_sources (kind, target, mode, commits_enabled, last_error)
    VALUES ('org', 'acme', 'live', true, ${`GITHUB_UNAVAILABLE: https://u:${SECRET}@ghe.example/api/v3: ECONNRESET`})
    RETURNING id`.execute(s.db);
  await sql`
    INSERT INTO ingestion_runs (source_id, status, error)
    VALUES (${source.rows[0]!.id}, 'failed',
            ${`proxy http://${SECRET}@proxy:3128 and mail a@b.c stay: see http://docs/x?u=a@b`})`.execute(
    s.db,
  );
  const up = await createMigrator(s.db).migrateToLatest();
  expect(up.error).toBeUndefined();
  expect(up.results?.find((r) => r.migrationName === MIGRATION)?.status).toBe('Success');
});

afterAll(async () => {
  await s?.drop();
});

describe(`migration ${MIGRATION}`, () => {
  it('removes every stored userinfo, keeps the rest of each text, one checkpoint a mirror', async () => {
    const files = await sql<{ file: string; state: string; mirror: string; error: string | null }>`
      SELECT file, state, mirror, error FROM backfill_files ORDER BY file`.execute(s.db);
    expect(files.rows).toEqual([
      { file: '/tmp/local.json.gz', state: 'completed', mirror: '', error: null },
      {
        file: '2026-11-20-4',
        state: 'failed',
        mirror: 'http://127.0.0.1:8080',
        error: 'ARCHIVE_UNAVAILABLE: http://127.0.0.1:8080/2026-11-20-4.json.gz: answered 503',
      },
      {
        file: '2026-11-20-5',
        state: 'missing',
        mirror: 'http://127.0.0.1:8080',
        error: 'http://127.0.0.1:8080/2026-11-20-5.json.gz is not on the archive (404)',
      },
    ]);
    const source = await sql<{ last_error: string }>`SELECT last_error FROM event_sources`.execute(
      s.db,
    );
    expect(source.rows[0]!.last_error).toBe(
      'GITHUB_UNAVAILABLE: https://ghe.example/api/v3: ECONNRESET',
    );
    const run = await sql<{ error: string }>`SELECT error FROM ingestion_runs`.execute(s.db);
    expect(run.rows[0]!.error).toBe(
      'proxy http://proxy:3128 and mail a@b.c stay: see http://docs/x?u=a@b',
    );
  });
});
