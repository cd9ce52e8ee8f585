import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMigrator } from '../../src/platform/db/migrate.ts';
import { downToJustBefore } from '../support/migration-steps.ts';
import { createScratchDatabase, type ScratchDatabase } from '../support/scratch-db.ts';

// push_tallies (2026-12-05T1300, ADR 0203): taken down over stored pushes of several months,
// origins and states and brought up as a deployment upgrading would: the tallies are seeded
// with exactly what counting the pushes gives, the triggers follow writes from then on,
// push_events_commits_state is gone, and down takes it all back.
const MIGRATION = '2026-12-05T1300_push_tallies';
let s: ScratchDatabase;
let before = '';

async function counted() {
  const r = await sql<{ k: string; n: string }>`
    SELECT to_char(date_trunc('month', created_at AT TIME ZONE 'UTC'), 'YYYY-MM')
      || '|' || origin || '|' || commits_state AS k, count(*) AS n
    FROM push_events GROUP BY 1 ORDER BY 1`.execute(s.db);
  return r.rows.map((x) => [x.k, Number(x.n)]);
}

async function tallied() {
  const r = await sql<{ k: string; n: string }>`
    SELECT to_char(month, 'YYYY-MM') || '|' || origin || '|' || commits_state AS k,
      sum(pushes) AS n
    FROM (SELECT * FROM push_tallies UNION ALL SELECT * FROM push_tally_deltas) x
    GROUP BY 1 HAVING sum(pushes) <> 0 ORDER BY 1`.execute(s.db);
  return r.rows.map((x) => [x.k, Number(x.n)]);
}

async function indexExists(name: string): Promise<boolean> {
  const r = await sql<{ t: string | null }>`SELECT to_regclass(${name})::text AS t`.execute(s.db);
  return r.rows[0]!.t !== null;
}

beforeAll(async () => {
  s = await createScratchDatabase();
  ({ before } = await downToJustBefore(s.db, MIGRATION));
  expect(await indexExists('push_tallies')).toBe(false);
  await sql`
    INSERT INTO push_events (actor_id, repository_id, ref, before, head, created_at, payload,
      origin, commits_state, commits_next_attempt_at)
    SELECT 1, 10 + g, 'refs/heads/main', 'b' || g, 'h' || g,
      (ARRAY[timestamptz '2015-01-31T23:30:00Z', '2015-02-01T00:30:00Z', now()])[1 + g % 3],
      '{}', (ARRAY['poll', 'webhook', 'archive'])[1 + g % 5 % 3],
      (ARRAY['pending', 'complete', 'skipped', 'none'])[1 + g % 4],
      CASE WHEN g % 4 = 0 THEN now() END
    FROM generate_series(1, 500) g`.execute(s.db);
  const up = await createMigrator(s.db).migrateToLatest();
  expect(up.error).toBeUndefined();
  expect(up.results?.map((r) => [r.migrationName, r.status])[0]).toEqual([MIGRATION, 'Success']);
});

afterAll(async () => {
  await s?.drop();
});

describe(`migration ${MIGRATION}`, () => {
  it('seeds the tallies with what counting the pushes gives, and follows writes after', async () => {
    const truth = await counted();
    expect(truth.length).toBeGreaterThan(12);
    expect(await tallied()).toEqual(truth);
    const deltas = await sql<{ n: string }>`SELECT count(*) AS n FROM push_tally_deltas`.execute(
      s.db,
    );
    expect(Number(deltas.rows[0]!.n)).toBe(0);
    expect(await indexExists('push_events_commits_state')).toBe(false);
    await sql`UPDATE push_events SET commits_state = 'complete', commits_next_attempt_at = NULL
      WHERE commits_state = 'pending' AND repository_id < 100`.execute(s.db);
    await sql`DELETE FROM push_events WHERE repository_id BETWEEN 100 AND 150`.execute(s.db);
    expect(await tallied()).toEqual(await counted());
  });

  it('goes down again cleanly and comes back up', async () => {
    expect((await createMigrator(s.db).migrateTo(before)).error).toBeUndefined();
    expect(await indexExists('push_tallies')).toBe(false);
    expect(await indexExists('push_events_commits_state')).toBe(true);
    expect((await createMigrator(s.db).migrateToLatest()).error).toBeUndefined();
    expect(await tallied()).toEqual(await counted());
  });
});
