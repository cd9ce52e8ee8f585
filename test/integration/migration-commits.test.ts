import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMigrator } from '../../src/platform/db/migrate.ts';
import { createScratchDatabase, type ScratchDatabase } from '../support/scratch-db.ts';

// The commits migration (2026-12-01T1000, ADR 0070) run over a database that already
// holds sources, pushes and a ledger: taken down, filled with rows of the old shape, then
// brought up again as a deployment upgrading would.
const MIGRATION = '2026-12-01T1000_commits';
// The migration right before it in name order is BEFORE. Its status indexes follow it (same
// prefix); they go down and up with it, and so do the
// migrations after them (commits-fetch's 2026-12-01T1010).
const STATUS_INDEXES = '2026-12-01T1000_commits_status';
const BEFORE = '2026-12-01T0920_auth_block_reason';
let s: ScratchDatabase;

async function insertPush(head: string) {
  await sql`
    INSERT INTO push_events (actor_id, repository_id, ref, head, before, created_at, payload)
    VALUES (1, 10, 'refs/heads/main', ${head}, ${`${'0'.repeat(39)}1`}, now(), '{}')`.execute(s.db);
}

beforeAll(async () => {
  s = await createScratchDatabase();
  const down = await createMigrator(s.db).migrateTo(BEFORE);
  expect(down.error).toBeUndefined();
  const names = down.results?.map((r) => r.migrationName) ?? [];
  expect(names.slice(-2)).toEqual([STATUS_INDEXES, MIGRATION]);
  await sql`
    INSERT INTO event_sources (kind, target, mode) VALUES
      ('public', NULL, 'live'), ('repo', 'octo/cat', 'live'), ('org', 'octo', 'live'),
      ('user', 'mona', 'live')`.execute(s.db);
  await insertPush('a'.repeat(40));
  await sql`INSERT INTO github_requests (credential, purpose, path) VALUES ('c', 'enrich', '/users/x')`.execute(
    s.db,
  );
  const up = await createMigrator(s.db).migrateToLatest();
  expect(up.error).toBeUndefined();
  expect(up.results?.slice(0, 2).map((r) => [r.migrationName, r.status])).toEqual([
    [MIGRATION, 'Success'],
    [STATUS_INDEXES, 'Success'],
  ]);
  expect(up.results?.every((r) => r.status === 'Success')).toBe(true);
});

afterAll(async () => {
  await s?.drop();
});

describe('migration 2026-12-01T1000_commits', () => {
  it('marks every push stored before it skipped, with nothing yet counted', async () => {
    const r = await sql<Record<string, unknown>>`
      SELECT commits_state, commit_count, commits_attempts, commits_next_attempt_at
      FROM push_events`.execute(s.db);
    expect(r.rows).toEqual([
      {
        commits_state: 'skipped',
        commit_count: null,
        commits_attempts: 0,
        commits_next_attempt_at: null,
      },
    ]);
  });

  it('turns commits on for repo, org and user sources (and 2026-12-02T0250 for public)', async () => {
    // This migration set the public timeline off; 2026-12-02T0250_commits_for_every_source
    // (ADR 0112, its own test) turned it on, and this database is at the latest.
    const r = await sql<{ kind: string; commits_enabled: boolean }>`
      SELECT kind, commits_enabled FROM event_sources ORDER BY id`.execute(s.db);
    expect(r.rows).toEqual([
      { kind: 'public', commits_enabled: true },
      { kind: 'repo', commits_enabled: true },
      { kind: 'org', commits_enabled: true },
      { kind: 'user', commits_enabled: true },
    ]);
  });

  it('leaves commits_enabled without a default: a writer that does not decide is refused', async () => {
    await expect(
      sql`INSERT INTO event_sources (kind, target, mode) VALUES ('repo', 'x/y', 'fixture')`.execute(
        s.db,
      ),
    ).rejects.toThrow(/commits_enabled/);
  });

  it('accepts only the seven commits states, and a pending push only with a due time', async () => {
    await expect(sql`UPDATE push_events SET commits_state = 'bogus'`.execute(s.db)).rejects.toThrow(
      /push_events_commits_state_check/,
    );
    await expect(
      sql`UPDATE push_events SET commits_state = 'pending'`.execute(s.db),
    ).rejects.toThrow(/push_events_commits_pending_due/);
    for (const state of ['complete', 'partial', 'none', 'skipped', 'gone', 'failed']) {
      await sql`UPDATE push_events SET commits_state = ${state}`.execute(s.db);
    }
    await sql`UPDATE push_events SET commits_state = 'pending', commits_next_attempt_at = now()`.execute(
      s.db,
    );
  });

  it('finds due pending pushes through the partial index', async () => {
    const r = await sql<{ indexdef: string }>`
      SELECT indexdef FROM pg_indexes WHERE indexname = 'push_events_commits_due'`.execute(s.db);
    // Since 2026-12-04T1050 (ADR 0184) the fetcher's index covers unverified pushes too.
    expect(r.rows[0]?.indexdef).toMatch(
      /\(commits_next_attempt_at\) WHERE \(commits_state = ANY \(ARRAY\['pending'::text, 'unverified'::text\]\)\)/,
    );
  });

  it('accepts the commits purpose in the ledger and still refuses others', async () => {
    await sql`INSERT INTO github_requests (credential, purpose, path) VALUES ('c', 'commits', '/repos/a/b/compare/x...y')`.execute(
      s.db,
    );
    await expect(
      sql`INSERT INTO github_requests (credential, purpose, path) VALUES ('c', 'other', '/')`.execute(
        s.db,
      ),
    ).rejects.toThrow(/github_requests_purpose_check/);
  });

  it('keeps one commit per repository and sha, and one push_commits row per position', async () => {
    // Through the commits view (migration 2026-12-05T1400): its rows are stored_commits',
    // whose key refuses a second row of one repository and sha.
    const commit = (name: string) =>
      sql`INSERT INTO commits (repository_id, sha, author_name) VALUES (10, 'c1', ${name})`.execute(
        s.db,
      );
    await commit('first');
    await expect(commit('second')).rejects.toThrow(/commits_pkey/);
    const c = await sql<{ author_name: string; first_seen_at: Date }>`
      SELECT author_name, first_seen_at FROM commits`.execute(s.db);
    expect(c.rows).toEqual([{ author_name: 'first', first_seen_at: expect.any(Date) }]);

    // A push's list is held in its row since 2026-12-05T1110: its pushes are stored first.
    await sql`
      INSERT INTO push_events (actor_id, repository_id, ref, head, before, created_at, payload)
      VALUES (1, 10, 'refs/heads/main', 'h1', 'b0', now(), '{}'),
             (1, 10, 'refs/heads/other', 'h1', 'b0', now(), '{}')`.execute(s.db);
    await sql`
      INSERT INTO push_commits (repository_id, ref, before, head, position, sha, "distinct") VALUES
        (10, 'refs/heads/main', 'b0', 'h1', 0, 'c1', true),
        (10, 'refs/heads/other', 'b0', 'h1', 0, 'c1', NULL)`.execute(s.db);
    await expect(
      sql`INSERT INTO push_commits (repository_id, ref, before, head, position, sha)
          VALUES (10, 'refs/heads/main', 'b0', 'h1', 0, 'c2')`.execute(s.db),
    ).rejects.toThrow(/push_commits_pkey/);
    await expect(
      sql`INSERT INTO push_commits (repository_id, ref, before, head, position, sha)
          VALUES (10, 'refs/heads/main', 'b0', 'h1', -1, 'c2')`.execute(s.db),
    ).rejects.toThrow(/push_commits_position_check/);
  });

  it('goes down again cleanly and comes back up', async () => {
    const down = await createMigrator(s.db).migrateTo(BEFORE);
    expect(down.error).toBeUndefined();
    const cols = await sql<{ n: number }>`
      SELECT count(*)::int AS n FROM information_schema.columns
      WHERE (table_name = 'push_events' AND column_name LIKE 'commit%')
         OR (table_name = 'event_sources' AND column_name = 'commits_enabled')`.execute(s.db);
    expect(cols.rows[0]!.n).toBe(0);
    const tables = await sql<{ n: number }>`
      SELECT count(*)::int AS n FROM information_schema.tables
      WHERE table_name IN ('commits', 'push_commits')`.execute(s.db);
    expect(tables.rows[0]!.n).toBe(0);
    const up = await createMigrator(s.db).migrateToLatest();
    expect(up.error).toBeUndefined();
  });
});
