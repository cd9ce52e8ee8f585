import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMigrator } from '../../src/platform/db/migrate.ts';
import { downToJustBefore } from '../support/migration-steps.ts';
import { createScratchDatabase, type ScratchDatabase } from '../support/scratch-db.ts';

// commits_for_every_source (2026-12-02T0250, ADR 0112) over a deployment that had the public
// source's commits off by default: taken down, filled, brought up as an upgrade would. Public
// sources turn on; a repo, org or user source someone turned off stays off; stored pushes
// keep their commits_state.
const MIGRATION = '2026-12-02T0250_commits_for_every_source';
let s: ScratchDatabase;
let before = '';

const sources = async () =>
  (
    await sql<{ kind: string; target: string | null; mode: string; commits_enabled: boolean }>`
      SELECT kind, target, mode, commits_enabled FROM event_sources
      ORDER BY kind, target NULLS FIRST, mode`.execute(s.db)
  ).rows;

beforeAll(async () => {
  s = await createScratchDatabase();
  ({ before } = await downToJustBefore(s.db, MIGRATION));
  await sql`
    INSERT INTO event_sources (kind, target, mode, commits_enabled) VALUES
      ('public', NULL, 'live', false), ('public', NULL, 'fixture', false),
      ('repo', 'a/on', 'live', true), ('repo', 'a/off', 'live', false),
      ('org', 'quiet', 'live', false)`.execute(s.db);
  await sql`
    INSERT INTO push_events (actor_id, repository_id, ref, head, before, created_at, payload,
      commits_state)
    VALUES (1, 1, 'refs/heads/main', 'h1', 'b1', now(), '{}', 'skipped'),
           (1, 2, 'refs/heads/main', 'h2', 'b2', now(), '{}', 'complete')`.execute(s.db);
  const up = await createMigrator(s.db).migrateToLatest();
  expect(up.error).toBeUndefined();
});

afterAll(async () => {
  await s?.drop();
});

describe(`migration ${MIGRATION}`, () => {
  it("turns every public source's commits on and leaves the others as they were", async () => {
    expect(await sources()).toEqual([
      { kind: 'org', target: 'quiet', mode: 'live', commits_enabled: false },
      { kind: 'public', target: null, mode: 'fixture', commits_enabled: true },
      { kind: 'public', target: null, mode: 'live', commits_enabled: true },
      { kind: 'repo', target: 'a/off', mode: 'live', commits_enabled: false },
      { kind: 'repo', target: 'a/on', mode: 'live', commits_enabled: true },
    ]);
  });

  it('leaves stored pushes in their state (a skipped push is not made due)', async () => {
    const r = await sql<{ repository_id: string; commits_state: string; due: boolean }>`
      SELECT repository_id, commits_state, commits_next_attempt_at IS NOT NULL AS due
      FROM push_events ORDER BY repository_id`.execute(s.db);
    expect(r.rows).toEqual([
      { repository_id: '1', commits_state: 'skipped', due: false },
      { repository_id: '2', commits_state: 'complete', due: false },
    ]);
  });

  it('goes down to the old default for public sources and comes back up', async () => {
    expect((await createMigrator(s.db).migrateTo(before)).error).toBeUndefined();
    const down = await sources();
    expect(down.filter((r) => r.kind === 'public').map((r) => r.commits_enabled)).toEqual([
      false,
      false,
    ]);
    expect(down.find((r) => r.target === 'a/on')?.commits_enabled).toBe(true);
    expect((await createMigrator(s.db).migrateToLatest()).error).toBeUndefined();
    expect((await sources()).filter((r) => r.commits_enabled).length).toBe(3);
  });
});
