import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMigrator, migrateToLatest } from '../../src/platform/db/migrate.ts';
import { downToJustBefore } from '../support/migration-steps.ts';
import { createScratchDatabase, type ScratchDatabase } from '../support/scratch-db.ts';

// The migration of 2026-12-05T1400 (commits held as bytes behind the view `commits`) over a
// million commits (COMMITS_MIGRATION_ROWS for another size; a million pushes of the real
// 2015 hour hold 1.63 million): every row reads back through the view exactly as the table
// held it — shas of every form, addresses of every form, every source — with the time the
// migration took and the disk it needed printed; the view takes writes as the table did;
// a probe by sha is a probe of the key; down and up again change nothing.
const MIGRATION = '2026-12-05T1400_commits_by_bytes';
const ROWS = Number(process.env.COMMITS_MIGRATION_ROWS ?? 1_000_000);
let s: ScratchDatabase;

beforeAll(async () => {
  s = await createScratchDatabase();
  await downToJustBefore(s.db, MIGRATION);
}, 600_000);
afterAll(async () => {
  await s?.drop();
});

/** Every row of `commits` as its text, in key order, hashed; and the count. */
async function fingerprint(): Promise<{ n: string; md5: string }> {
  const r = await sql<{ n: string; md5: string }>`
    SELECT count(*)::text AS n, md5(string_agg(c::text, E'\n' ORDER BY repository_id, sha)) AS md5
    FROM commits c`.execute(s.db);
  return r.rows[0]!;
}

const databaseBytes = async () =>
  Number(
    (await sql<{ b: string }>`SELECT pg_database_size(current_database())::text AS b`.execute(s.db))
      .rows[0]!.b,
  );

/** The odd rows a store may hold, each next to the form the writers store. */
const ODD = sql`
  INSERT INTO commits (repository_id, sha, author_name, author_email, committer_email, message,
    source, parents)
  VALUES
    (1, 'c1', 'not a sha', 'a@b.example', NULL, 'short sha', 'mirror', NULL),
    (1, repeat('A', 40), 'upper-case hex', '', 'ümlaut@exämple.org', NULL, NULL, NULL),
    (1, repeat('z', 20), 'twenty characters', repeat('a', 40) || '@', repeat('f', 40) || '@x@y',
      'an address of GH Archive form with an empty domain, and one with two @', 'webhook', NULL),
    (1, repeat('é', 16), 'thirty-two bytes', 'sha256:' || repeat('0', 63),
      'sha256:' || repeat('F', 64), 'hash-like, not a hash', 'github', '{p1,p2}'),
    (1, '', 'empty sha', NULL, NULL, '', 'archive', '{}')`;

describe(`migrating ${ROWS.toLocaleString('en-US')} commits to bytes`, () => {
  it('reads back every row through the view as the table held it, and prints time and disk', async () => {
    // GH Archive's addresses (gharchive), hashed ones (hash), clear ones (keep), none; every
    // source and none; one sha in a thousand of SHA-256's 64 digits.
    await sql`
      INSERT INTO commits (repository_id, sha, author_name, author_email, author_id, author_login,
        committer_name, committer_email, committer_id, committed_at, message, authored_at, parents,
        first_seen_at, source)
      SELECT g % 90000, CASE WHEN g % 1000 = 0 THEN encode(sha256(int8send(g)), 'hex')
          ELSE encode(substr(sha256(int8send(g)), 1, 20), 'hex') END,
        'Dev ' || (g % 977),
        CASE g % 4 WHEN 0 THEN encode(substr(sha256(int4send(g % 977)), 1, 20), 'hex') || '@example.com'
          WHEN 1 THEN 'sha256:' || encode(sha256(int4send(g % 977)), 'hex')
          WHEN 2 THEN 'dev' || (g % 977) || '@example.org' END,
        CASE WHEN g % 7 = 0 THEN g % 977 END, CASE WHEN g % 7 = 0 THEN 'dev' || (g % 977) END,
        CASE WHEN g % 7 = 0 THEN 'Committer' END,
        CASE WHEN g % 7 = 0 THEN 'sha256:' || encode(sha256(int4send(g % 31)), 'hex') END,
        CASE WHEN g % 7 = 0 THEN g % 31 END,
        CASE WHEN g % 7 = 0 THEN timestamptz '2015-01-01' + g * interval '1 second' END,
        'Change ' || g || ': tidy the module',
        CASE WHEN g % 7 = 0 THEN timestamptz '2015-01-01' + g * interval '1 second' END,
        CASE WHEN g % 7 = 0 THEN ARRAY[encode(substr(sha256(int8send(-g)), 1, 20), 'hex')] END,
        timestamptz '2015-01-01' + g * interval '1 second',
        (ARRAY['github', 'webhook', 'archive', 'mirror', NULL])[1 + g % 5]
      FROM generate_series(1, ${ROWS}) g`.execute(s.db);
    await ODD.execute(s.db);
    await sql`VACUUM ANALYZE commits`.execute(s.db);
    const before = await fingerprint();
    const tableBefore = Number(
      (await sql<{ b: string }>`SELECT pg_total_relation_size('commits')::text AS b`.execute(s.db))
        .rows[0]!.b,
    );
    const diskBefore = await databaseBytes();

    const started = performance.now();
    expect(await migrateToLatest(s.db)).toContain(MIGRATION);
    const seconds = (performance.now() - started) / 1000;
    const diskAfter = await databaseBytes();
    await sql`VACUUM ANALYZE stored_commits`.execute(s.db);
    const tableAfter = Number(
      (
        await sql<{
          b: string;
        }>`SELECT pg_total_relation_size('stored_commits')::text AS b`.execute(s.db)
      ).rows[0]!.b,
    );
    console.log(
      `migration ${MIGRATION} of ${before.n} commits: ${seconds.toFixed(1)} s; commits ` +
        `${(tableBefore / 1e6).toFixed(1)} MB before, stored_commits ${(tableAfter / 1e6).toFixed(1)} MB ` +
        `after (${((tableAfter / tableBefore) * 100).toFixed(0)}%); the disk it needs at its peak: ` +
        `about old + new = ${((tableBefore + tableAfter) / 1e6).toFixed(1)} MB; database ` +
        `${(diskBefore / 1e6).toFixed(1)} → ${(diskAfter / 1e6).toFixed(1)} MB`,
    );

    expect(await fingerprint()).toEqual(before);
    expect(tableAfter).toBeLessThan(tableBefore);
    // The forms the writers store are held as bytes: every full hex sha as 20 or 32 bytes,
    // every address of GH Archive's form and every hash as its marker and bytes.
    const forms = await sql<{ hex: string; gharchive: string; hashed: string; n: string }>`
      SELECT count(*) FILTER (WHERE octet_length(sha) IN (20, 32))::text AS hex,
        count(*) FILTER (WHERE get_byte(author_email, 0) = 1)::text AS gharchive,
        count(*) FILTER (WHERE get_byte(author_email, 0) = 2)::text AS hashed,
        count(*)::text AS n
      FROM stored_commits`.execute(s.db);
    expect(forms.rows[0]).toEqual({
      hex: String(ROWS),
      // g % 4 = 0, and the odd row whose address is 40 hex digits and an empty domain.
      gharchive: String(Math.floor(ROWS / 4) + 1),
      hashed: String(Math.floor((ROWS + 3) / 4)),
      n: String(ROWS + 5),
    });
  }, 1_800_000);

  it('takes writes through the view as the table did', async () => {
    const sha = 'ab'.repeat(20);
    await sql`INSERT INTO commits (repository_id, sha, author_email, source)
      VALUES (900000, ${sha}, ${`${'cd'.repeat(20)}@example.net`}, 'archive')`.execute(s.db);
    await expect(
      sql`INSERT INTO commits (repository_id, sha) VALUES (900000, ${sha})`.execute(s.db),
    ).rejects.toThrow(/commits_pkey/);
    await expect(
      sql`INSERT INTO commits (repository_id, sha, source) VALUES (900000, 'x', 'peer')`.execute(
        s.db,
      ),
    ).rejects.toThrow(/commits_source_check/);
    await sql`UPDATE commits SET source = 'github', author_email = 'sha256:' || repeat('1', 64)
      WHERE repository_id = 900000 AND sha = ${sha}`.execute(s.db);
    const row = await sql<{ source: string; author_email: string; first_seen_at: Date }>`
      SELECT source, author_email, first_seen_at FROM commits
      WHERE repository_id = 900000 AND sha = ${sha}`.execute(s.db);
    expect(row.rows).toEqual([
      {
        source: 'github',
        author_email: `sha256:${'1'.repeat(64)}`,
        first_seen_at: expect.any(Date),
      },
    ]);
    const stored = await sql<{ source: number; bytes: number }>`
      SELECT source, octet_length(author_email) AS bytes FROM stored_commits
      WHERE repository_id = 900000 AND sha = commit_sha_bytes(${sha})`.execute(s.db);
    expect(stored.rows).toEqual([{ source: 3, bytes: 33 }]);
    await sql`DELETE FROM commits WHERE repository_id = 900000 AND sha = ${sha}`.execute(s.db);
    const left = await sql<{ n: number }>`
      SELECT count(*)::int AS n FROM stored_commits WHERE repository_id = 900000`.execute(s.db);
    expect(left.rows[0]!.n).toBe(0);
  });

  it('finds a commit by its sha through the key', async () => {
    const plan = await sql<{ 'QUERY PLAN': string }>`
      EXPLAIN SELECT author_name FROM stored_commits
      WHERE repository_id = 7 AND sha = commit_sha_bytes(${'12'.repeat(20)})`.execute(s.db);
    expect(plan.rows.map((r) => r['QUERY PLAN']).join('\n')).toMatch(
      /Index Scan using commits_pkey/,
    );
  });

  it('goes down and up again without changing a row', async () => {
    const before = await fingerprint();
    const names = (await createMigrator(s.db).getMigrations()).map((m) => m.name).sort();
    await downToJustBefore(s.db, MIGRATION);
    expect(await fingerprint()).toEqual(before);
    expect(await migrateToLatest(s.db)).toContain(MIGRATION);
    expect(names).toContain(MIGRATION);
    expect(await fingerprint()).toEqual(before);
  }, 600_000);
});
