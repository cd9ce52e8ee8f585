import { createHash } from 'node:crypto';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMigrator, migrateToLatest } from '../../src/platform/db/migrate.ts';
import { downToJustBefore } from '../support/migration-steps.ts';
import { createScratchDatabase, type ScratchDatabase } from '../support/scratch-db.ts';

// The migrations of 2026-12-04T1050 (ADR 0184) over a database of the old shape, as a
// deployment upgrading meets them:
// - commit_sources_and_unverified: commits.source, the 'unverified' state, and the fetcher's
//   two partial indexes over both states — built CONCURRENTLY by migrateToLatest under a
//   second name and renamed, or in the migration's transaction by Kysely's migrator alone;
// - email_policy_everywhere: what was stored before, rewritten under the database's
//   recorded COMMIT_EMAILS, batch by batch (more rows than a batch here), every number of a
//   payload exactly as it was; nothing at all under `keep` or with nothing recorded.
const SCHEMA = '2026-12-04T1050_commit_sources_and_unverified';
const REWRITE = '2026-12-04T1050_email_policy_everywhere';
let s: ScratchDatabase;

const hashOf = (a: string) =>
  `sha256:${createHash('sha256').update(a.trim().toLowerCase()).digest('hex')}`;
const PUSHES = 4_500;

beforeAll(async () => {
  s = await createScratchDatabase();
});
afterAll(async () => {
  await s?.drop();
});

/** Takes both migrations down and fills the old shape: addresses in clear everywhere. */
async function oldStore(recorded: 'hash' | 'drop' | 'keep' | null) {
  const { taken } = await downToJustBefore(s.db, SCHEMA);
  expect(taken.slice(-2)).toEqual([REWRITE, SCHEMA]);
  await sql`TRUNCATE push_events, push_commits, commits, rejected_events, webhook_deliveries,
    stored_settings`.execute(s.db);
  if (recorded) {
    await sql`INSERT INTO stored_settings (name, value, recorded_by)
      VALUES ('COMMIT_EMAILS', ${recorded}, 'test')`.execute(s.db);
  }
  // Every third push carries a commit with an address; the first has an id beyond 2^53.
  await sql`
    INSERT INTO push_events (actor_id, repository_id, ref, head, before, created_at, payload)
    SELECT 1, 10 + g % 7, 'refs/heads/b' || g, 'h' || g, 'b' || g, now(),
      CASE WHEN g % 3 = 0 THEN jsonb_build_object('size', 1, 'commits', jsonb_build_array(
        jsonb_build_object('sha', 'c' || g, 'message', 'Signed-off-by: Dev <Dev' || g || '@Example.com>',
          'author', jsonb_build_object('email', 'Dev' || g || '@Example.com', 'name', 'Dev')))) 
      ELSE '{"size": 0, "ref": "refs/heads/x"}'::jsonb END
    FROM generate_series(1, ${PUSHES}) g`.execute(s.db);
  await sql`
    UPDATE push_events SET payload = payload || '{"push_id": 12345678901234567890, "f": 1.50}'::jsonb
    WHERE head = 'h3'`.execute(s.db);
  await sql`
    INSERT INTO commits (repository_id, sha, author_email, committer_email, author_name, message)
    VALUES (1, 'c1', 'Clear@Example.com', ${hashOf('kept@example.com')}, 'who@example.com',
      'fix\n\nCo-authored-by: X <x@example.org>'),
      (1, 'c2', NULL, NULL, 'Plain Name', 'no address here')`.execute(s.db);
  await sql`
    INSERT INTO rejected_events (event_key, reason, message, raw, raw_exact)
    VALUES ('k1', 'malformed', 'line 3: not a JSON object: {"email":"bad@example.com"',
      '{"payload": {"commits": [{"author": {"email": "bad@example.com"}}]}}', true),
      ('k2', 'malformed', 'nothing to see', '{"id": 1}', true)`.execute(s.db);
  await sql`
    INSERT INTO webhook_deliveries (delivery_id, event, routing, detail, payload_sha256, received_at)
    VALUES ('d1', 'push', 'rejected:bad_id', 'repository.id must be a numeric id (got "r@example.com")', 'x', now())`.execute(
    s.db,
  );
}

async function rows() {
  const pushes = await sql<{ head: string; payload: string }>`
    SELECT head, payload::text AS payload FROM push_events ORDER BY head`.execute(s.db);
  const commits = await sql<Record<string, string | null>>`
    SELECT sha, author_email, committer_email, author_name, message,
      to_jsonb(c) ->> 'source' AS source
    FROM commits c ORDER BY sha`.execute(s.db);
  const rejected = await sql<Record<string, unknown>>`
    SELECT event_key, message, raw, raw_exact FROM rejected_events ORDER BY event_key`.execute(
    s.db,
  );
  const deliveries = await sql<{ detail: string }>`SELECT detail FROM webhook_deliveries`.execute(
    s.db,
  );
  return {
    pushes: pushes.rows,
    commits: commits.rows,
    rejected: rejected.rows,
    details: deliveries.rows.map((r) => r.detail),
  };
}

describe('migration 2026-12-04T1050_email_policy_everywhere', () => {
  it('under hash: every address stored before is hashed, in every column, numbers exact', async () => {
    await oldStore('hash');
    const applied = await migrateToLatest(s.db);
    expect(applied).toEqual(expect.arrayContaining([SCHEMA, REWRITE]));
    const r = await rows();
    const all = JSON.stringify(r);
    expect(all).not.toMatch(/@example\.(com|org)/i);
    const third = r.pushes.find((p) => p.head === 'h3')!;
    expect(JSON.parse(third.payload).commits[0]).toEqual({
      sha: 'c3',
      message: `Signed-off-by: Dev <${hashOf('dev3@example.com')}>`,
      author: { email: hashOf('Dev3@Example.com'), name: 'Dev' },
    });
    // Digit for digit, as jsonb held it.
    expect(third.payload).toContain('"push_id": 12345678901234567890');
    expect(third.payload).toContain('"f": 1.50');
    // Every batch was reached: the last push with an address too.
    const last = r.pushes.find((p) => p.head === `h${PUSHES}`)!;
    expect(JSON.parse(last.payload).commits[0].author.email).toBe(
      hashOf(`dev${PUSHES}@example.com`),
    );
    expect(r.pushes.filter((p) => p.payload.includes('sha256:'))).toHaveLength(PUSHES / 3);
    expect(r.commits).toEqual([
      {
        sha: 'c1',
        author_email: hashOf('clear@example.com'),
        committer_email: hashOf('kept@example.com'),
        author_name: hashOf('who@example.com'),
        message: `fix\n\nCo-authored-by: X <${hashOf('x@example.org')}>`,
        source: null,
      },
      {
        sha: 'c2',
        author_email: null,
        committer_email: null,
        author_name: 'Plain Name',
        message: 'no address here',
        source: null,
      },
    ]);
    expect(r.rejected).toEqual([
      {
        event_key: 'k1',
        message: `line 3: not a JSON object: {"email":"${hashOf('bad@example.com')}"`,
        raw: { payload: { commits: [{ author: { email: hashOf('bad@example.com') } }] } },
        raw_exact: false,
      },
      { event_key: 'k2', message: 'nothing to see', raw: { id: 1 }, raw_exact: true },
    ]);
    expect(r.details).toEqual([
      `repository.id must be a numeric id (got "${hashOf('r@example.com')}")`,
    ]);
  });

  it('under drop: addresses gone, the text around them kept', async () => {
    await oldStore('drop');
    expect((await createMigrator(s.db).migrateToLatest()).error).toBeUndefined();
    const r = await rows();
    expect(JSON.stringify(r)).not.toMatch(/@example\.(com|org)/i);
    const third = JSON.parse(r.pushes.find((p) => p.head === 'h3')!.payload);
    expect(third.commits[0]).toMatchObject({
      message: 'Signed-off-by: Dev <>',
      author: { email: null },
    });
    expect(r.commits[0]).toMatchObject({ author_email: null, committer_email: null });
  });

  it.each([
    ['keep', 'keep'],
    ['nothing recorded', null],
  ] as const)('under %s: nothing is rewritten', async (_, recorded) => {
    await oldStore(recorded);
    const before = await rows();
    expect((await createMigrator(s.db).migrateToLatest()).error).toBeUndefined();
    const after = await rows();
    expect(after).toEqual(before);
  });
});

describe('migration 2026-12-04T1050_commit_sources_and_unverified', () => {
  async function fetcherIndexes() {
    const r = await sql<{ name: string; def: string; valid: boolean }>`
      SELECT c.relname AS name, pg_get_indexdef(i.indexrelid) AS def, i.indisvalid AS valid
      FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
      WHERE c.relname LIKE 'push_events_commits_%'
        AND c.relname NOT IN ('push_events_commits_state', 'push_events_commits_awaiting')
      ORDER BY 1`.execute(s.db);
    return r.rows;
  }
  const over = (states: string) =>
    expect.stringMatching(new RegExp(`WHERE \\(commits_state ${states}\\)$`));

  it('builds the fetcher’s indexes over both states (CONCURRENTLY, then renamed), and down takes them back', async () => {
    await oldStore(null);
    expect(await fetcherIndexes()).toEqual([
      { name: 'push_events_commits_due', def: over("= 'pending'::text"), valid: true },
      { name: 'push_events_commits_pending_repo', def: over("= 'pending'::text"), valid: true },
    ]);
    await migrateToLatest(s.db);
    const both = "= ANY \\(ARRAY\\['pending'::text, 'unverified'::text\\]\\)";
    expect(await fetcherIndexes()).toEqual([
      { name: 'push_events_commits_due', def: over(both), valid: true },
      { name: 'push_events_commits_pending_repo', def: over(both), valid: true },
    ]);
    // The state and the source are accepted now, and nothing else.
    await sql`UPDATE push_events SET commits_state = 'unverified' WHERE head = 'h1'`.execute(s.db);
    await sql`UPDATE push_events SET commits_state = 'unverified', commits_next_attempt_at = now()
      WHERE head = 'h2'`.execute(s.db);
    await sql`UPDATE commits SET source = 'mirror' WHERE sha = 'c1'`.execute(s.db);
    await expect(sql`UPDATE commits SET source = 'peer'`.execute(s.db)).rejects.toThrow(
      /commits_source_check/,
    );
    // Down: an unverified push becomes what the old states say (due: pending; else partial).
    await downToJustBefore(s.db, SCHEMA);
    const states = await sql<{ head: string; commits_state: string }>`
      SELECT head, commits_state FROM push_events WHERE head IN ('h1', 'h2') ORDER BY head`.execute(
      s.db,
    );
    expect(states.rows).toEqual([
      { head: 'h1', commits_state: 'partial' },
      { head: 'h2', commits_state: 'pending' },
    ]);
    expect(await fetcherIndexes()).toEqual([
      { name: 'push_events_commits_due', def: over("= 'pending'::text"), valid: true },
      { name: 'push_events_commits_pending_repo', def: over("= 'pending'::text"), valid: true },
    ]);
    expect((await createMigrator(s.db).migrateToLatest()).error).toBeUndefined();
  });
});
