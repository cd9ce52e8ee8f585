import { sql } from 'kysely';
import type { Db } from '../../src/platform/db/pool.ts';
import type { ArchiveHour } from '../../src/store/archive-hours.ts';

/**
 * One hour of `pushes` stored pushes with their commits (1, 3, 10 or 25 a push: 2.65 on
 * average), seeded with generate_series as bench/export.ts seeds its hour: the size of a
 * busy hour of the public timeline, in seconds instead of an import. Ids start at `offset`
 * so two calls do not collide.
 */
export async function seedLargeHour(
  db: Db,
  hour: ArchiveHour,
  pushes: number,
  offset = 0,
): Promise<void> {
  const actors = Math.max(10, Math.floor(pushes / 4));
  const repos = Math.max(10, Math.floor(pushes / 3));
  await sql`INSERT INTO actors (id, login) SELECT ${offset}::bigint + g, 'load-user-' || g
    FROM generate_series(1, ${actors}::int) g ON CONFLICT DO NOTHING`.execute(db);
  await sql`INSERT INTO repositories (id, full_name, profile, enrichment_state)
    SELECT ${offset}::bigint + g, 'load-owner-' || (g % 5000) || '/repo-' || g,
      '{"private": false, "owner": {"type": "User"}}'::jsonb, 'enriched'
    FROM generate_series(1, ${repos}::int) g ON CONFLICT DO NOTHING`.execute(db);
  await sql`INSERT INTO push_events (id, actor_id, repository_id, push_id, ref, head, before,
      created_at, payload, origin, commit_count, commits_state)
    SELECT 95000000000 + ${offset}::bigint + g, ${offset}::bigint + 1 + (g::bigint * 7919) % ${actors}::int,
      ${offset}::bigint + 1 + (g::bigint * 104729) % ${repos}::int, 35000000000 + ${offset}::bigint + g,
      'refs/heads/main',
      md5('h' || ${offset}::bigint + g) || substr(md5('H' || g), 1, 8), md5('b' || ${offset}::bigint + g) || substr(md5('B' || g), 1, 8),
      ${hour.start}::timestamptz + (floor((g - 1) * 3600.0 / ${pushes}::int) || ' seconds')::interval,
      '{}'::jsonb, 'archive',
      CASE WHEN g % 100 = 0 THEN 25 WHEN g % 10 = 0 THEN 10 WHEN g % 3 = 0 THEN 3 ELSE 1 END,
      'complete'
    FROM generate_series(1, ${pushes}::int) g`.execute(db);
  const inHour = sql`p.created_at >= ${hour.start}::timestamptz
    AND p.created_at < ${hour.start}::timestamptz + interval '1 hour'`;
  await sql`INSERT INTO commits (repository_id, sha, author_name, author_email, message)
    SELECT p.repository_id, md5(p.head || i) || substr(md5(p.head || 'x' || i), 1, 8),
      'Developer ' || (p.actor_id % 97), 'sha256:' || encode(sha256(('dev' || (p.actor_id % 97))::bytea), 'hex'),
      'Change ' || i || ' of ' || p.commit_count || ': tidy up the module and its tests'
    FROM push_events p, generate_series(0, p.commit_count - 1) i
    WHERE ${inHour} ON CONFLICT DO NOTHING`.execute(db);
  await sql`INSERT INTO push_commits (repository_id, ref, before, head, position, sha, "distinct")
    SELECT p.repository_id, p.ref, p.before, p.head, i,
      md5(p.head || i) || substr(md5(p.head || 'x' || i), 1, 8), i % 7 <> 6
    FROM push_events p, generate_series(0, p.commit_count - 1) i
    WHERE ${inHour}`.execute(db);
  await sql`ANALYZE`.execute(db);
}
