import { CompiledQuery, sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMigrator } from '../../src/platform/db/migrate.ts';
import { ingestActivity } from '../../src/status/activity.ts';
import { ensurePushMonths } from '../../src/store/push-months.ts';
import { FORGET_MONTH_TALLIES, prunePushMinutes } from '../../src/store/push-tallies.ts';
import { backlog, countDue, foldEntityTallies } from '../../src/work/enrichment-due.ts';
import { downToJustBefore } from '../support/migration-steps.ts';
import { createScratchDatabase, type ScratchDatabase } from '../support/scratch-db.ts';

// The status tallies (migration 2026-12-05T1440, ADR 0206): taken down over stored pushes,
// actors and repositories and brought up as an upgrade would, then written to as the
// application writes. Every figure status shows is checked against counting the tables
// the old way, folded or not.
const MIGRATION = '2026-12-05T1440_status_tallies';
let s: ScratchDatabase;

const NOW = new Date();
const HOUR = 3_600_000;

/** What status said before the tallies: counts of the tables. */
async function countedBacklog(cls: 'actor' | 'repository', now: Date) {
  const table = cls === 'actor' ? 'actors' : 'repositories';
  const r = await sql<{ state: string; n: number; claimed: number; due: number }>`
    SELECT enrichment_state AS state, count(*)::int AS n,
      (count(*) FILTER (WHERE enrichment_state = 'pending' AND claimed_until > ${now}))::int
        AS claimed,
      (count(*) FILTER (WHERE (enrichment_state = 'pending' AND next_attempt_at <= ${now}
        AND (claimed_until IS NULL OR claimed_until <= ${now}))
        OR (enrichment_state = 'enriched' AND enriched_at < ${new Date(now.getTime() - 7 * 86_400_000)})))::int AS due
    FROM ${sql.table(table)} GROUP BY 1`.execute(s.db);
  const out = { pending: 0, enriched: 0, failed: 0, gone: 0, claimed: 0, due: 0 };
  for (const row of r.rows) {
    out[row.state as 'pending'] = row.n;
    out.claimed += row.claimed;
    out.due += row.due;
  }
  return out;
}

async function countedSince(column: 'ingested_at' | 'created_at', since: Date) {
  const r = await sql<{ n: number }>`
    SELECT count(*)::int AS n FROM push_events
    WHERE ${sql.ref(column)} >= date_trunc('minute', ${since}::timestamptz, 'UTC')`.execute(s.db);
  return r.rows[0]!.n;
}

async function expectStatusAsCounted(now = NOW) {
  const b = await backlog(s.db, now);
  for (const cls of ['actor', 'repository'] as const) {
    expect(b[cls], cls).toEqual(await countedBacklog(cls, now));
    expect(await countDue(s.db, cls, now)).toBe(b[cls].due);
  }
  const since = new Date(now.getTime() - 24 * HOUR);
  const a = await ingestActivity(s.db, now);
  expect(a.pushes.last24h).toBe(await countedSince('ingested_at', since));
  expect(a.pushes.pushedLast24h).toBe(await countedSince('created_at', since));
}

/** `n` archive pushes stored now, pushed a second apart from `from`, repositories from `repo`. */
async function backfilledNow(repo: number, from: string, n: number) {
  await sql`
    INSERT INTO push_events (actor_id, repository_id, ref, before, head, created_at,
      payload, origin, commits_state)
    SELECT 1, ${repo}::bigint + g, 'refs/heads/r' || ${repo}::text, 'b' || g, 'h' || g,
      ${from}::timestamptz + g * interval '1 second', '{}', 'archive', 'complete'
    FROM generate_series(1, ${n}::int) g`.execute(s.db);
}

beforeAll(async () => {
  s = await createScratchDatabase();
  await downToJustBefore(s.db, MIGRATION);
  // Held before the upgrade: entities in every state, some leased, some scheduled later;
  // pushes of today and of 2015.
  for (const table of ['actors', 'repositories'] as const) {
    const name = table === 'actors' ? 'login' : 'full_name';
    await sql`
      INSERT INTO ${sql.table(table)} (id, ${sql.ref(name)}, enrichment_state, enriched_at,
        next_attempt_at, claimed_until)
      SELECT g, 'e' || g, (ARRAY['pending', 'enriched', 'failed', 'gone'])[1 + g % 4],
        CASE WHEN g % 4 = 1 THEN now() - (g % 10) * interval '1 day' END,
        now() + CASE WHEN g % 12 = 0 THEN interval '1 hour' ELSE interval '-1 hour' END,
        CASE WHEN g % 8 = 0 THEN now() + interval '5 minutes'
             WHEN g % 8 = 4 THEN now() - interval '5 minutes' END
      FROM generate_series(1, 400) g`.execute(s.db);
  }
  await sql`
    INSERT INTO push_events (actor_id, repository_id, ref, before, head, created_at,
      ingested_at, payload, origin, commits_state, commits_next_attempt_at)
    SELECT 1, 10 + g, 'refs/heads/main', 'b' || g, 'h' || g,
      CASE WHEN g % 3 = 0 THEN timestamptz '2015-01-01T15:00:00Z' ELSE now() - g * interval '1 minute' END,
      now() - g * interval '10 seconds', '{}', (ARRAY['poll', 'webhook', 'archive'])[1 + g % 3],
      'complete', NULL
    FROM generate_series(1, 300) g`.execute(s.db);
  const up = await createMigrator(s.db).migrateToLatest();
  expect(up.error).toBeUndefined();
  expect(up.results?.[0]?.migrationName).toBe(MIGRATION);
});

afterAll(async () => {
  await s?.drop();
});

describe('status tallies', () => {
  it('are seeded by the migration with what counting the tables gives', async () => {
    await expectStatusAsCounted();
  });

  it('follow inserts, state changes, leases and deletes, folded or not', async () => {
    await sql`
      INSERT INTO actors (id, login) SELECT g, 'n' || g FROM generate_series(1001, 1100) g
      ON CONFLICT (id) DO NOTHING`.execute(s.db);
    await sql`
      UPDATE actors SET enrichment_state = 'enriched', enriched_at = now()
      WHERE id BETWEEN 1001 AND 1030`.execute(s.db);
    // A claim: no state moves, so no delta.
    const deltas = async () =>
      (await sql<{ n: number }>`SELECT count(*)::int AS n FROM entity_tally_deltas`.execute(s.db))
        .rows[0]!.n;
    const before = await deltas();
    await sql`
      UPDATE actors SET claimed_until = now() + interval '1 minute', claimed_by = 'w'
      WHERE id BETWEEN 1031 AND 1040`.execute(s.db);
    expect(await deltas()).toBe(before);
    await sql`DELETE FROM repositories WHERE id % 5 = 0`.execute(s.db);
    await expectStatusAsCounted();
    expect(await foldEntityTallies(s.db)).toBeGreaterThan(0);
    expect(await deltas()).toBe(0);
    await expectStatusAsCounted();
    // A net decrease folds into an existing tally (never below zero, never an error).
    await sql`DELETE FROM actors WHERE enrichment_state = 'gone'`.execute(s.db);
    expect(await foldEntityTallies(s.db)).toBe(1);
    await expectStatusAsCounted();
  });

  it('counts the last 24 hours from minutes, by arrival and by event time', async () => {
    // A backfill of an old hour now: arrived in the window, pushed years ago.
    await backfilledNow(5000, '2015-01-01T16:00:00Z', 250);
    await expectStatusAsCounted();
    // Later in time: the window moved past every arrival but today's pushes.
    await expectStatusAsCounted(new Date(NOW.getTime() + 23 * HOUR));
  });

  it("a month retention drops takes back its pushes' minutes, by event time and by arrival", async () => {
    // Backfilled today, pushed in 2014-06: counted as arrived, until the month is dropped.
    await ensurePushMonths(s.db, [new Date('2014-06-15T00:00:00Z')]);
    await backfilledNow(7000, '2014-06-30T23:00:00Z', 120);
    await expectStatusAsCounted();
    // What retention's drop does (src/store/history-months.ts): the tallies forgotten, then
    // DETACH and DROP, which fire no trigger.
    await s.db.transaction().execute(async (trx) => {
      for (const forget of FORGET_MONTH_TALLIES) {
        await trx.executeQuery(CompiledQuery.raw(forget, ['2014-06-01']));
      }
      await sql`ALTER TABLE push_events DETACH PARTITION push_events_2014_06`.execute(trx);
      await sql`DROP TABLE push_events_2014_06`.execute(trx);
    });
    await expectStatusAsCounted();
  });

  it('forgets minutes older than two days, and TRUNCATE empties every tally', async () => {
    const rows = async () =>
      (await sql<{ n: number }>`SELECT count(*)::int AS n FROM push_minute_tallies`.execute(s.db))
        .rows[0]!.n;
    const held = await rows();
    const pruned = await prunePushMinutes(s.db, NOW);
    expect(pruned).toBeGreaterThan(0); // the 2015 minutes
    // The rest compacted to a row a minute, clock and origin.
    const compacted = await sql<{ n: number; keys: number }>`
      SELECT count(*)::int AS n, count(DISTINCT (minute, clock, origin))::int AS keys
      FROM push_minute_tallies`.execute(s.db);
    expect(compacted.rows[0]!.n).toBe(compacted.rows[0]!.keys);
    expect(compacted.rows[0]!.n).toBeLessThanOrEqual(held - pruned);
    await expectStatusAsCounted();
    expect(await prunePushMinutes(s.db, new Date(NOW.getTime() + 3 * 86_400_000))).toBe(
      compacted.rows[0]!.n,
    );
    await sql`TRUNCATE push_events, actors`.execute(s.db);
    expect(await rows()).toBe(0);
    const left = await sql<{ entity: string }>`
      SELECT DISTINCT entity FROM (SELECT entity FROM entity_tallies
        UNION ALL SELECT entity FROM entity_tally_deltas) x`.execute(s.db);
    expect(left.rows.map((r) => r.entity)).toEqual(['repository']);
    await expectStatusAsCounted();
  });

  it('goes down and up again', async () => {
    await downToJustBefore(s.db, MIGRATION);
    const gone = await sql<{ t: string | null }>`
      SELECT to_regclass('push_minute_tallies')::text AS t`.execute(s.db);
    expect(gone.rows[0]!.t).toBeNull();
    const up = await createMigrator(s.db).migrateToLatest();
    expect(up.error).toBeUndefined();
    await expectStatusAsCounted();
  });
});
