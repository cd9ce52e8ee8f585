import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrateToLatest } from '../../src/platform/db/migrate.ts';
import { downToJustBefore } from '../support/migration-steps.ts';
import { createScratchDatabase, type ScratchDatabase } from '../support/scratch-db.ts';

// The migration of 2026-12-05T1100 over a store of a million pushes (PUSH_MIGRATION_PUSHES
// to run it on another size): every push moves into its month's partition, once, with its
// key in push_keys and its payload reduced to what the columns lack; the time it took and
// the disk it needed are printed.
const MIGRATION = '2026-12-05T1100_push_events_by_month';
const PUSHES = Number(process.env.PUSH_MIGRATION_PUSHES ?? 1_000_000);
let s: ScratchDatabase;

beforeAll(async () => {
  s = await createScratchDatabase();
  await downToJustBefore(s.db, MIGRATION);
}, 600_000);
afterAll(async () => {
  await s?.drop();
});

async function bytes(): Promise<number> {
  const r = await sql<{
    b: string;
  }>`SELECT pg_database_size(current_database())::text AS b`.execute(s.db);
  return Number(r.rows[0]!.b);
}

describe(`migrating push_events of ${PUSHES.toLocaleString('en-US')} pushes to monthly partitions`, () => {
  it('moves every push into its month once, keys each, keeps only what columns lack', async () => {
    // Pushes over 14 months of 2025–2026, one in 50 with an event id of the era before (a
    // reused id, legal across eras), every tenth with two commits in its payload (an event's
    // shape) that push_commits and commits hold, every hundredth with one they do not (a
    // refused list: kept), and one in a thousand whose `size` is text (kept: the column
    // would give back a number).
    await sql`
      INSERT INTO push_events (id, actor_id, repository_id, push_id, ref, head, before, created_at,
        payload, size, distinct_size, commits_state, commit_count, repo_name)
      SELECT CASE WHEN g % 50 = 0 THEN g / 50 ELSE 1000000000 + g END, g % 5000, g % 70000,
        g, 'refs/heads/b' || (g % 7), lpad(to_hex(g), 40, 'a'), lpad(to_hex(g), 40, 'b'),
        timestamptz '2025-01-01' + (g % 420) * interval '1 day' + (g % 86400) * interval '1 second',
        jsonb_build_object('repository_id', g % 70000, 'push_id', g, 'ref', 'refs/heads/b' || (g % 7),
          'head', lpad(to_hex(g), 40, 'a'), 'before', lpad(to_hex(g), 40, 'b'),
          'size', CASE WHEN g % 1000 = 3 THEN to_jsonb('2'::text) ELSE to_jsonb(2) END)
          || CASE WHEN g % 10 = 0 THEN jsonb_build_object('commits', (
                 SELECT jsonb_agg(jsonb_build_object('sha', 'c' || k,
                   'author', jsonb_build_object('email', 'a' || k || '@example.com', 'name', 'A'),
                   'message', 'm' || k, 'distinct', true,
                   'url', 'https://api.github.com/repos/o/r' || (g % 70000) || '/commits/c' || k))
                 FROM generate_series(1, 2) k))
               WHEN g % 100 = 1 THEN jsonb_build_object('commits', jsonb_build_array(
                 jsonb_build_object('sha', 'r1')), 'extra', 'kept')
               ELSE '{}'::jsonb END,
        2, 2, CASE WHEN g % 10 = 0 THEN 'complete' ELSE 'skipped' END,
        CASE WHEN g % 10 = 0 THEN 2 END, 'o/r' || (g % 70000)
      FROM generate_series(1, ${PUSHES}) g`.execute(s.db);
    await sql`
      INSERT INTO push_commits (repository_id, ref, before, head, position, sha, "distinct")
      SELECT p.repository_id, p.ref, p.before, p.head, k, 'c' || (k + 1), true
      FROM push_events p, generate_series(0, 1) k WHERE p.commits_state = 'complete'`.execute(s.db);
    await sql`
      INSERT INTO commits (repository_id, sha, author_name, author_email, message, source)
      SELECT DISTINCT repository_id, sha, 'A', 'a' || substr(sha, 2) || '@example.com',
        'm' || substr(sha, 2), 'archive'
      FROM push_commits`.execute(s.db);
    await sql`VACUUM ANALYZE push_events`.execute(s.db);
    const before = await sql<{ n: string; b: string; months: string }>`
      SELECT count(*)::text AS n, pg_total_relation_size('push_events')::text AS b,
        count(DISTINCT date_trunc('month', created_at AT TIME ZONE 'UTC'))::text AS months
      FROM push_events`.execute(s.db);
    const diskBefore = await bytes();

    const started = performance.now();
    expect(await migrateToLatest(s.db)).toContain(MIGRATION);
    const seconds = (performance.now() - started) / 1000;
    const diskAfter = await bytes();
    await sql`VACUUM ANALYZE push_events`.execute(s.db);
    const after = await sql<{ n: string; b: string; keys: string; with_payload: string }>`
      SELECT (SELECT count(*) FROM push_events)::text AS n,
        (SELECT sum(pg_total_relation_size(relid)) FROM pg_partition_tree('push_events'))::text AS b,
        (SELECT count(*) FROM push_keys)::text AS keys,
        (SELECT count(*) FROM push_events WHERE payload IS NOT NULL)::text AS with_payload`.execute(
      s.db,
    );
    const oldBytes = Number(before.rows[0]!.b);
    const newBytes = Number(after.rows[0]!.b);
    console.log(
      `migration ${MIGRATION} of ${PUSHES} pushes: ${seconds.toFixed(1)} s; push_events ` +
        `${(oldBytes / 1e6).toFixed(1)} MB before, ${(newBytes / 1e6).toFixed(1)} MB after ` +
        `(push_keys apart); disk peak needs about old + new = ${((oldBytes + newBytes) / 1e6).toFixed(1)} MB; ` +
        `database ${(diskBefore / 1e6).toFixed(1)} → ${(diskAfter / 1e6).toFixed(1)} MB`,
    );

    expect(after.rows[0]).toMatchObject({ n: String(PUSHES), keys: String(PUSHES) });
    // Only the pushes whose payload held something else keep one: a refused list (one in a
    // hundred), a `size` of another type (one in a thousand).
    const odd = (m: number, r: number) => Math.floor((PUSHES - r) / m) + 1;
    expect(Number(after.rows[0]!.with_payload)).toBe(odd(100, 1) + odd(1000, 3));
    // Every payload comes back whole.
    const whole = await sql<{ n: string }>`
      SELECT count(*)::text AS n FROM push_events p
      WHERE push_payload(p) <> jsonb_build_object('repository_id', p.repository_id,
          'push_id', p.push_id, 'ref', p.ref, 'head', p.head, 'before', p.before,
          'size', CASE WHEN p.push_id % 1000 = 3 THEN to_jsonb('2'::text) ELSE to_jsonb(2) END)
        || CASE WHEN p.push_id % 10 = 0 THEN jsonb_build_object('commits', (
             SELECT jsonb_agg(jsonb_build_object('sha', 'c' || k,
               'author', jsonb_build_object('email', 'a' || k || '@example.com', 'name', 'A'),
               'message', 'm' || k, 'distinct', true,
               'url', 'https://api.github.com/repos/o/r' || (p.push_id % 70000) || '/commits/c' || k))
             FROM generate_series(1, 2) k))
           WHEN p.push_id % 100 = 1 THEN '{"commits": [{"sha": "r1"}], "extra": "kept"}'::jsonb
           ELSE '{}'::jsonb END`.execute(s.db);
    expect(whole.rows[0]!.n).toBe('0');
    const kept = await sql<{ payload: unknown }>`
      SELECT payload FROM push_events WHERE push_id = 101`.execute(s.db);
    expect(kept.rows[0]!.payload).toEqual({ commits: [{ sha: 'r1' }], extra: 'kept' });

    // One partition a month of the store, each push in its own; the default one empty.
    const placed = await sql<{ misplaced: string; parts: string; in_default: string }>`
      SELECT (SELECT count(*) FROM push_events p
              WHERE p.tableoid::regclass::text
                <> 'push_events_' || to_char(p.created_at AT TIME ZONE 'UTC', 'YYYY_MM'))::text AS misplaced,
        (SELECT count(*) FROM pg_partition_tree('push_events')
         WHERE relid::text ~ '^push_events_[0-9]{4}_[0-9]{2}$')::text AS parts,
        (SELECT count(*) FROM push_events_default)::text AS in_default`.execute(s.db);
    expect(placed.rows[0]).toEqual({
      misplaced: '0',
      parts: expect.any(String),
      in_default: '0',
    });
    expect(Number(placed.rows[0]!.parts)).toBeGreaterThanOrEqual(Number(before.rows[0]!.months));
    // push_keys agrees with push_events: same keys, times and ids.
    const disagree = await sql<{ n: string }>`
      SELECT count(*)::text AS n FROM push_events p
      LEFT JOIN push_keys k ON (k.repository_id, k.digest)
        = (p.repository_id, push_key_digest(p.repository_id, p.ref, p.before, p.head))
      WHERE k.digest IS NULL OR k.created_at <> p.created_at
        OR k.event_id IS DISTINCT FROM p.id`.execute(s.db);
    expect(disagree.rows[0]!.n).toBe('0');
  }, 1_800_000);

  it('holds a push once and one push per id and era, whichever month a copy comes in', async () => {
    const one = await sql<{ repository_id: string; ref: string; before: string; head: string }>`
      SELECT repository_id::text, ref, before, head FROM push_events WHERE push_id = 7`.execute(
      s.db,
    );
    const k = one.rows[0]!;
    // A copy in another month, written by hand: refused as a primary key would (the store
    // never writes one: src/store/pushes.ts asks push_keys first).
    await expect(
      sql`INSERT INTO push_events (actor_id, repository_id, ref, head, before, created_at)
        VALUES (1, ${k.repository_id}, ${k.ref}, ${k.head}, ${k.before}, '2024-03-01')`.execute(
        s.db,
      ),
    ).rejects.toThrow(/stored once/);
    const rows = await sql<{ n: string }>`
      SELECT count(*)::text AS n FROM push_events WHERE (repository_id, ref, before, head)
        = (${k.repository_id}::bigint, ${k.ref}, ${k.before}, ${k.head})`.execute(s.db);
    expect(rows.rows[0]!.n).toBe('1');
    await expect(
      sql`INSERT INTO push_events (id, actor_id, repository_id, ref, head, before, created_at)
        VALUES (1000000001, 1, 1, 'r', 'h', 'b', '2025-06-01')`.execute(s.db),
    ).rejects.toThrow(/push_events_event_id/);
  });
});
