import { sql } from 'kysely';
import type { Db } from '../../src/platform/db/pool.ts';

/**
 * A deployment with some history, for the status page, /status, /metrics and the views:
 * three sources (one failing), runs over the last hours (one with a gap), pushes ingested
 * minute by minute, gaps in every state and 20 pushes recovered from the archive, a request ledger with 200/304/403 answers, a rate-limit observation,
 * entities in every enrichment state, and finished pg-boss jobs. Everything relative to
 * `now`, so charts have something to draw. The ledger is `credential`'s: the test web's
 * client runs in fixture mode, whose credential is 'fixture'.
 */
export async function seedActivity(
  db: Db,
  { now = new Date(), credential = 'fixture' }: { now?: Date; credential?: string } = {},
): Promise<{ sourceIds: number[] }> {
  const ago = (minutes: number) => new Date(now.getTime() - minutes * 60_000);
  const sources = await db
    .insertInto('event_sources')
    .values([
      {
        kind: 'public',
        target: null,
        mode: 'live',
        commits_enabled: false,
        next_poll_at: new Date(now.getTime() + 45_000),
      },
      {
        kind: 'repo',
        target: 'octocat/Hello-World',
        mode: 'live',
        commits_enabled: true,
        poll_interval_seconds: 300,
      },
      {
        kind: 'org',
        target: 'github',
        mode: 'live',
        commits_enabled: true,
        consecutive_failures: 2,
        last_error: 'GitHub answered 502 on /orgs/github/events',
      },
    ])
    .returning('id')
    .execute();
  const [pub, repo, org] = sources.map((s) => Number(s.id));

  const runs = [];
  for (let m = 170; m >= 5; m -= 15) {
    runs.push({
      source_id: pub!,
      status: 'completed' as const,
      started_at: ago(m),
      finished_at: ago(m - 0.2),
      pages_fetched: 1,
      events_seen: 100,
      events_created: 20 + (m % 7),
      gap_detected: m === 110,
    });
  }
  runs.push(
    {
      source_id: repo!,
      status: 'not_modified' as const,
      started_at: ago(3),
      finished_at: ago(3),
      pages_fetched: 1,
      events_seen: 0,
      events_created: 0,
      gap_detected: false,
    },
    {
      source_id: org!,
      status: 'failed' as const,
      started_at: ago(2),
      finished_at: ago(2),
      pages_fetched: 0,
      events_seen: 0,
      events_created: 0,
      gap_detected: false,
    },
  );
  await db.insertInto('ingestion_runs').values(runs).execute();

  // Pushes: a few per minute over the last three hours, more in bursts.
  await sql`
    INSERT INTO actors (id, login, enrichment_state, enriched_at)
    SELECT g, 'user' || g,
           (ARRAY['pending','enriched','enriched','failed','gone'])[1 + g % 5], now()
    FROM generate_series(1, 40) g`.execute(db);
  await sql`
    INSERT INTO repositories (id, full_name, enrichment_state)
    SELECT g, 'owner' || g || '/repo', (ARRAY['pending','pending','enriched'])[1 + g % 3]
    FROM generate_series(1, 30) g`.execute(db);
  await sql`
    INSERT INTO push_events (id, actor_id, repository_id, push_id, ref, head, before, created_at,
                             payload, origin, ingested_at)
    SELECT 50000000000 + g, 1 + g % 40, 1 + g % 30, g, 'refs/heads/main', md5(g::text) || 'aaaaaaaa',
           md5((g + 1)::text) || 'bbbbbbbb', ${now}::timestamptz - make_interval(mins => g / 3),
           '{}'::jsonb, CASE WHEN g % 10 = 0 THEN 'webhook' ELSE 'poll' END,
           ${now}::timestamptz - make_interval(mins => (g / 3 + (g % 4) * 0)) - make_interval(secs => g % 50)
    FROM generate_series(1, 520) g`.execute(db);

  await sql`
    INSERT INTO github_requests (credential, purpose, path, outcome, status, counted, reserved_at, finished_at)
    SELECT ${credential}, CASE WHEN g % 3 = 0 THEN 'enrich' ELSE 'poll' END, '/events',
           'completed', CASE WHEN g % 5 = 0 THEN 304 WHEN g = 7 THEN 403 ELSE 200 END,
           g % 5 <> 0, ${now}::timestamptz - make_interval(mins => g * 2),
           ${now}::timestamptz - make_interval(mins => g * 2)
    FROM generate_series(1, 80) g`.execute(db);
  await db
    .insertInto('github_requests')
    .values({ credential, purpose: 'poll', path: '/events', outcome: 'error', reserved_at: ago(1) })
    .execute();
  await db
    .insertInto('github_rate_limits')
    .values({ credential, quota: 60, remaining: 37, reset_at: new Date(now.getTime() + 1_800_000) })
    .execute();
  await db
    .insertInto('enrichment_attempts')
    .values([
      {
        class: 'actor',
        entity_id: 2,
        attempt: 1,
        outcome: 'enriched',
        http_status: 200,
        finished_at: ago(4),
      },
      {
        class: 'actor',
        entity_id: 4,
        attempt: 1,
        outcome: 'gone',
        http_status: 404,
        finished_at: ago(3),
      },
    ])
    .execute();

  // Gaps of the public source: one filled from the archive (20 pushes, its hour file
  // checkpointed), one open waiting for its hours, one whose hour never appeared.
  const gaps = await db
    .insertInto('gaps')
    .values([
      {
        source_id: pub!,
        from_at: ago(300),
        to_at: ago(290),
        state: 'filled',
        events_recovered: 20,
        filled_at: ago(60),
        attempts: 1,
        next_attempt_at: ago(60),
      },
      {
        source_id: pub!,
        from_at: ago(110),
        to_at: ago(100),
        next_attempt_at: new Date(now.getTime() + 40 * 60_000),
      },
      {
        source_id: pub!,
        from_at: ago(4000),
        to_at: ago(3990),
        state: 'unavailable',
        events_recovered: 0,
        attempts: 7,
        last_error: 'archive hours unavailable 48 h after they ended: 2026-01-01-3: missing (404)',
      },
    ])
    .returning('id')
    .execute();
  await db
    .insertInto('backfill_files')
    .values({
      file: '2026-11-29-3',
      scope: `gap:${gaps[0]!.id}`,
      source_id: pub!,
      gap_id: gaps[0]!.id,
      state: 'completed',
      lines_done: 180_000,
      events_seen: 180_000,
      pushes_seen: 90_000,
      pushes_kept: 25,
      pushes_created: 20,
      updated_at: ago(60),
      finished_at: ago(60),
    })
    .execute();
  await sql`
    INSERT INTO push_events (id, actor_id, repository_id, push_id, ref, head, before, created_at,
                             payload, origin, source_id, ingested_at)
    SELECT 51000000000 + g, 1 + g % 40, 1 + g % 30, 1000 + g, 'refs/heads/main', md5(g::text) || 'cccccccc',
           md5((g + 1)::text) || 'dddddddd', ${ago(295)}::timestamptz, '{}'::jsonb, 'archive', ${pub!},
           ${ago(60)}::timestamptz
    FROM generate_series(1, 20) g`.execute(db);

  await sql`
    INSERT INTO pgboss.job (name, state, created_on, start_after, started_on, completed_on, output)
    VALUES ('reconcile', 'completed', ${ago(3)}, ${ago(3)}, ${ago(3)}, ${new Date(now.getTime() - 179_700)}, '{"classes": []}'),
           ('poll-sources', 'completed', ${ago(2)}, ${ago(2)}, ${ago(2)}, ${new Date(now.getTime() - 112_000)}, null),
           ('enrich-actor', 'created', ${ago(1)}, ${ago(1)}, null, null, null)`.execute(db);
  return { sourceIds: [pub!, repo!, org!] };
}
