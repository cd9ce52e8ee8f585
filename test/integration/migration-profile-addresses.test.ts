import { createHash } from 'node:crypto';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrateToLatest } from '../../src/platform/db/migrate.ts';
import { downToJustBefore } from '../support/migration-steps.ts';
import { createScratchDatabase, type ScratchDatabase } from '../support/scratch-db.ts';

// The migration of 2026-12-05T0340 over a store enrichment filled before it: account and
// repository profiles holding a public email and addresses in text, rewritten under the
// database's recorded COMMIT_EMAILS; nothing under `keep` or with nothing recorded.
const MIGRATION = '2026-12-05T0340_profile_addresses_under_policy';
let s: ScratchDatabase;

const hashOf = (a: string) =>
  `sha256:${createHash('sha256').update(a.trim().toLowerCase()).digest('hex')}`;
const ACTORS = 2_300; // more than one batch of the migration's walk

beforeAll(async () => {
  s = await createScratchDatabase();
});
afterAll(async () => {
  await s?.drop();
});

async function oldStore(recorded: 'hash' | 'drop' | 'keep' | null) {
  await downToJustBefore(s.db, MIGRATION);
  await sql`TRUNCATE actors, repositories, stored_settings, push_events, push_commits, commits
    CASCADE`.execute(s.db);
  if (recorded) {
    await sql`INSERT INTO stored_settings (name, value, recorded_by)
      VALUES ('COMMIT_EMAILS', ${recorded}, 'test')`.execute(s.db);
  }
  // Every other account has a public email and an address in its bio; the rest none.
  await sql`
    INSERT INTO actors (id, login, bio, profile)
    SELECT g, 'dev' || g,
      CASE WHEN g % 2 = 0 THEN 'Mail Dev' || g || '@Example.com' ELSE 'no address' END,
      CASE WHEN g % 2 = 0
        THEN jsonb_build_object('id', g, 'login', 'dev' || g, 'email', 'Dev' || g || '@Example.com',
          'followers', 12345678901234567890::numeric)
        ELSE jsonb_build_object('id', g, 'login', 'dev' || g, 'email', NULL) END
    FROM generate_series(1, ${ACTORS}) g`.execute(s.db);
  // Pushes of repositories whose ids differ in length, more than a batch: the earlier walk
  // skipped some of these.
  await sql`
    INSERT INTO push_events (actor_id, repository_id, ref, head, before, created_at, payload)
    SELECT 1, g, 'refs/heads/main', 'h' || g, 'b' || g, now(),
      jsonb_build_object('size', 1, 'commits', jsonb_build_array(jsonb_build_object(
        'sha', 'c' || g, 'author', jsonb_build_object('email', 'P' || g || '@Example.com'))))
    FROM generate_series(1, ${ACTORS}) g`.execute(s.db);
  await sql`
    INSERT INTO repositories (id, full_name, description, profile)
    VALUES (7, 'o/r', 'reports: sec@example.org',
      '{"id": 7, "full_name": "o/r", "description": "reports: sec@example.org"}'::jsonb)`.execute(
    s.db,
  );
}

async function upToLatest() {
  expect(await migrateToLatest(s.db)).toContain(MIGRATION);
}

describe(`migration ${MIGRATION}`, () => {
  it('hash: every profile address is hashed, in the jsonb and the columns, numbers exact', async () => {
    await oldStore('hash');
    await upToLatest();
    const a = await sql<{ bio: string; email: string | null; followers: string }>`
      SELECT bio, profile->>'email' AS email, profile->>'followers' AS followers
      FROM actors WHERE id = 1000`.execute(s.db);
    expect(a.rows[0]).toEqual({
      bio: `Mail ${hashOf('dev1000@example.com')}`,
      email: hashOf('Dev1000@Example.com'),
      followers: '12345678901234567890',
    });
    const clear = await sql<{ n: number }>`
      SELECT count(*)::int AS n FROM actors
      WHERE profile::text ~* '[a-z0-9]@example' OR bio ~* '[a-z0-9]@example'`.execute(s.db);
    expect(clear.rows[0]!.n).toBe(0);
    const pushes = await sql<{ n: number }>`
      SELECT count(*)::int AS n FROM push_events WHERE payload::text LIKE '%@Example.com%'`.execute(
      s.db,
    );
    expect(pushes.rows[0]!.n).toBe(0);
    const odd = await sql<{ bio: string }>`SELECT bio FROM actors WHERE id = 3`.execute(s.db);
    expect(odd.rows[0]!.bio).toBe('no address');
    const r = await sql<{ description: string; profile: string }>`
      SELECT description, profile->>'description' AS profile FROM repositories`.execute(s.db);
    expect(r.rows[0]).toEqual({
      description: `reports: ${hashOf('sec@example.org')}`,
      profile: `reports: ${hashOf('sec@example.org')}`,
    });
  });

  it('drop: the public email is null and addresses in text are gone', async () => {
    await oldStore('drop');
    await upToLatest();
    const a = await sql<{ bio: string; email: string | null }>`
      SELECT bio, profile->>'email' AS email FROM actors WHERE id = 2`.execute(s.db);
    expect(a.rows[0]).toEqual({ bio: 'Mail ', email: null });
  });

  it.each(['keep', null] as const)('%s recorded: nothing changes', async (recorded) => {
    await oldStore(recorded);
    await upToLatest();
    const a = await sql<{ email: string }>`
      SELECT profile->>'email' AS email FROM actors WHERE id = 2`.execute(s.db);
    expect(a.rows[0]!.email).toBe('Dev2@Example.com');
  });
});
