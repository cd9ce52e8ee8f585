import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrateToLatest } from '../../src/platform/db/migrate.ts';
import type { Db } from '../../src/platform/db/pool.ts';
import { type PushKey, storeCommits } from '../../src/store/commits.ts';
import { downToJustBefore } from '../support/migration-steps.ts';
import { createScratchDatabase, type ScratchDatabase } from '../support/scratch-db.ts';

// A push's commit list held in its own row (ADR 0200): the migration over rows the
// push_commits table held, exact round trips of odd shas, the view's rows and writes, a
// fetched answer replacing a list, and `distinct` derived when the source did not say.
const MIGRATION = '2026-12-05T1110_inline_commit_lists';
let s: ScratchDatabase;

beforeAll(async () => {
  s = await createScratchDatabase();
});
afterAll(async () => {
  await s?.drop();
});

interface Entry {
  repository_id: string;
  ref: string;
  before: string;
  head: string;
  position: number;
  sha: string;
  distinct: boolean | null;
}

const rows = async (db: Db) =>
  (
    await sql<Entry>`
      SELECT repository_id::text AS repository_id, ref, before, head, position, sha, "distinct"
      FROM push_commits ORDER BY repository_id, ref, before, head, position`.execute(db)
  ).rows;

const hex = (n: number, width = 40) => n.toString(16).padStart(width, '0');

describe(`migration ${MIGRATION}`, () => {
  it("moves every push's rows into its row, more than a batch, odd shas and holes exactly", async () => {
    await downToJustBefore(s.db, MIGRATION);
    await sql`TRUNCATE push_events, push_commits, commits CASCADE`.execute(s.db);
    await sql`INSERT INTO actors (id, login) VALUES (1, 'a') ON CONFLICT DO NOTHING`.execute(s.db);
    // Repository ids of different lengths (9 < 10 as numbers, not as text), 12,000 pushes
    // of 2 commits: more rows than one batch of the migration's walk.
    await sql`
      INSERT INTO push_events (actor_id, repository_id, ref, before, head, created_at, payload,
        commits_state, commit_count)
      SELECT 1, r, 'refs/heads/main', 'b' || g, 'h' || g, now(), '{}', 'complete', 2
      FROM generate_series(1, 6000) g, (VALUES (9), (10)) v (r)`.execute(s.db);
    await sql`
      INSERT INTO push_commits
      SELECT p.repository_id, p.ref, p.before, p.head, i, md5(p.head || p.repository_id || i)
        || substr(md5('x' || i), 1, 8), CASE i WHEN 0 THEN true WHEN 1 THEN false END
      FROM push_events p, generate_series(0, 1) i`.execute(s.db);
    await sql`
      INSERT INTO push_events (actor_id, repository_id, ref, before, head, created_at, payload)
      VALUES (1, 11, 'refs/heads/odd', 'b', 'h', now(), '{}'),
             (1, 11, 'refs/heads/late', 'b', 'h', now(), '{}'),
             (1, 11, 'refs/heads/sha256', 'b', 'h', now(), '{}')`.execute(s.db);
    await sql`
      INSERT INTO push_commits VALUES
        (11, 'refs/heads/odd', 'b', 'h', 0, 'ABCDEF0123456789abcdef0123456789abcdef01', true),
        (11, 'refs/heads/odd', 'b', 'h', 1, 'c1', NULL),
        (11, 'refs/heads/odd', 'b', 'h', 2, ${'a'.repeat(64)}, false),
        (11, 'refs/heads/late', 'b', 'h', 230, ${hex(1)}, NULL),
        (11, 'refs/heads/late', 'b', 'h', 233, ${hex(2)}, true),
        (11, 'refs/heads/sha256', 'b', 'h', 0, ${hex(3, 64)}, true)`.execute(s.db);
    const before = await rows(s.db);
    expect(before).toHaveLength(24_006);

    expect(await migrateToLatest(s.db)).toContain(MIGRATION);
    expect(await rows(s.db)).toEqual(before);
    const held = await sql<{
      ref: string;
      flags: string;
      first: number | null;
      bytes: number | null;
      texts: string[] | null;
    }>`
      SELECT ref, commit_flags AS flags, commit_first_position AS first,
        octet_length(commit_shas) AS bytes, commit_sha_texts AS texts
      FROM push_events WHERE repository_id = 11 ORDER BY ref`.execute(s.db);
    expect(held.rows).toEqual([
      { ref: 'refs/heads/late', flags: '?--t', first: 230, bytes: 80, texts: null },
      {
        ref: 'refs/heads/odd',
        flags: 't?f',
        first: null,
        bytes: null,
        texts: ['ABCDEF0123456789abcdef0123456789abcdef01', 'c1', 'a'.repeat(64)],
      },
      { ref: 'refs/heads/sha256', flags: 't', first: null, bytes: 32, texts: null },
    ]);
    // Two 20-byte shas and two flags a push of the main batch.
    const sizes = await sql<{ n: number }>`
      SELECT count(*)::int AS n FROM push_events
      WHERE ref = 'refs/heads/main' AND octet_length(commit_shas) = 40 AND commit_flags = 'tf'`.execute(
      s.db,
    );
    expect(sizes.rows[0]!.n).toBe(12_000);
  });

  it('takes writes through the view with the old rules, and goes down and up again', async () => {
    const key = `(11, 'refs/heads/late', 'b', 'h')`;
    await sql`INSERT INTO push_commits VALUES (11, 'refs/heads/late', 'b', 'h', 231, ${hex(4)}, false)`.execute(
      s.db,
    );
    await expect(
      sql`INSERT INTO push_commits VALUES (11, 'refs/heads/late', 'b', 'h', 233, ${hex(5)}, true)`.execute(
        s.db,
      ),
    ).rejects.toThrow(/push_commits_pkey/);
    await expect(
      sql`INSERT INTO push_commits VALUES (11, 'refs/heads/late', 'b', 'h', -1, ${hex(5)}, true)`.execute(
        s.db,
      ),
    ).rejects.toThrow(/push_commits_position_check/);
    await expect(
      sql`INSERT INTO push_commits VALUES (11, 'refs/heads/none', 'b', 'h', 0, ${hex(5)}, true)`.execute(
        s.db,
      ),
    ).rejects.toThrow(/no stored push/);
    await sql`DELETE FROM push_commits WHERE position = 230 AND (repository_id, ref, before, head) = ${sql.raw(key)}`.execute(
      s.db,
    );
    await sql`UPDATE push_commits SET "distinct" = NULL WHERE position = 233 AND ref = 'refs/heads/late'`.execute(
      s.db,
    );
    const late = await sql<{ flags: string; first: number }>`
      SELECT commit_flags AS flags, commit_first_position AS first FROM push_events
      WHERE ref = 'refs/heads/late'`.execute(s.db);
    expect(late.rows).toEqual([{ flags: 'f-?', first: 231 }]);
    const now = await rows(s.db);
    await downToJustBefore(s.db, MIGRATION);
    expect(await rows(s.db)).toEqual(now);
    await migrateToLatest(s.db);
    expect(await rows(s.db)).toEqual(now);
  });
});

describe('storeCommits on the row-held list', () => {
  const push = (head: string, ref = 'refs/heads/main'): PushKey => ({
    repositoryId: '77',
    ref,
    before: hex(0),
    head,
  });
  async function stored(key: PushKey, state = 'complete') {
    await sql`
      INSERT INTO push_events (actor_id, repository_id, ref, before, head, created_at, payload,
        commits_state)
      VALUES (1, ${key.repositoryId}, ${key.ref}, ${key.before}, ${key.head}, now(), '{}',
        ${state})`.execute(s.db);
  }
  const listOf = async (key: PushKey) =>
    (
      await sql<{ position: number; sha: string; distinct: boolean | null }>`
        SELECT position, sha, "distinct" FROM push_commits
        WHERE (repository_id, ref, before, head)
          = (${key.repositoryId}::bigint, ${key.ref}, ${key.before}, ${key.head})
        ORDER BY position`.execute(s.db)
    ).rows;

  beforeAll(async () => {
    await sql`TRUNCATE push_events, stored_commits CASCADE`.execute(s.db);
    await sql`INSERT INTO actors (id, login) VALUES (1, 'a') ON CONFLICT DO NOTHING`.execute(s.db);
    await sql`INSERT INTO repositories (id, full_name) VALUES (77, 'o/r') ON CONFLICT DO NOTHING`.execute(
      s.db,
    );
  });

  it('keeps a list as given, adds only positions an inline list lacks, and a fetched answer replaces it', async () => {
    const a = push(hex(100));
    await stored(a, 'unverified');
    // A mirror's claim: three commits, the middle one odd.
    const first = await storeCommits(
      s.db,
      [
        {
          push: a,
          source: 'mirror',
          commits: [
            { sha: hex(101), distinct: true },
            { sha: 'NOT-A-SHA', distinct: false },
            { sha: hex(102), distinct: true },
          ],
        },
      ],
      { emails: 'hash' },
    );
    expect(first.pushCommits).toBe(3);
    expect(await listOf(a)).toEqual([
      { position: 0, sha: hex(101), distinct: true },
      { position: 1, sha: 'NOT-A-SHA', distinct: false },
      { position: 2, sha: hex(102), distinct: true },
    ]);
    // The same list again adds nothing; a longer inline list adds only its new positions.
    const again = await storeCommits(
      s.db,
      [
        {
          push: a,
          source: 'mirror',
          commits: [
            { sha: hex(999), distinct: false },
            { sha: 'NOT-A-SHA', distinct: false },
            { sha: hex(102), distinct: true },
            { sha: hex(103), distinct: true },
          ],
        },
      ],
      { emails: 'hash' },
    );
    expect(again.pushCommits).toBe(1);
    expect((await listOf(a)).map((r) => r.sha)).toEqual([
      hex(101),
      'NOT-A-SHA',
      hex(102),
      hex(103),
    ]);
    // GitHub's answer: the newest two of 12 (positions 10 and 11), distinct unsaid.
    const fetched = await storeCommits(
      s.db,
      [{ push: a, firstPosition: 10, commits: [{ sha: hex(102) }, { sha: hex(104) }] }],
      { emails: 'hash', replace: true },
    );
    expect(fetched.pushCommits).toBe(2);
    // hex(102) was first seen with this push (its own list): still distinct here; hex(104) new.
    expect(await listOf(a)).toEqual([
      { position: 10, sha: hex(102), distinct: true },
      { position: 11, sha: hex(104), distinct: true },
    ]);
    const row = await sql<{ flags: string; first: number; bytes: number }>`
      SELECT commit_flags AS flags, commit_first_position AS first,
        octet_length(commit_shas) AS bytes FROM push_events WHERE head = ${a.head}`.execute(s.db);
    expect(row.rows).toEqual([{ flags: 'tt', first: 10, bytes: 40 }]);
    // The same answer again writes nothing.
    const same = await storeCommits(
      s.db,
      [{ push: a, firstPosition: 10, commits: [{ sha: hex(102) }, { sha: hex(104) }] }],
      { emails: 'hash', replace: true },
    );
    expect(same.pushCommits).toBe(0);
  });

  it('derives distinct as before: first stored push of the repository that holds the commit', async () => {
    // b holds c1 and c2 (unsaid: derived); then c and d in one statement, both with c2 and
    // c3: c2 is b's, c3 is c's (first in the statement), not d's.
    const b = push(hex(200), 'refs/heads/b');
    const c = push(hex(300), 'refs/heads/c');
    const d = push(hex(400), 'refs/heads/d');
    for (const k of [b, c, d]) await stored(k);
    await storeCommits(s.db, [{ push: b, commits: [{ sha: hex(201) }, { sha: hex(202) }] }], {
      emails: 'hash',
    });
    await storeCommits(
      s.db,
      [
        { push: c, commits: [{ sha: hex(202) }, { sha: hex(203) }] },
        { push: d, commits: [{ sha: hex(203) }, { sha: hex(204), distinct: false }] },
      ],
      { emails: 'hash' },
    );
    expect((await listOf(b)).map((r) => r.distinct)).toEqual([true, true]);
    expect((await listOf(c)).map((r) => r.distinct)).toEqual([false, true]);
    expect((await listOf(d)).map((r) => r.distinct)).toEqual([false, false]);
    // A push not stored gets no list; a push in another state than the plan's neither.
    const gone = push(hex(500), 'refs/heads/gone');
    const r = await storeCommits(s.db, [{ push: gone, commits: [{ sha: hex(501) }] }], {
      emails: 'hash',
    });
    expect(r).toEqual({ commits: 1, pushCommits: 0, newActors: 0 });
    const waiting = push(hex(600), 'refs/heads/waiting');
    await stored(waiting, 'partial');
    await storeCommits(
      s.db,
      [{ push: waiting, ifState: 'complete', commits: [{ sha: hex(601) }] }],
      { emails: 'hash' },
    );
    expect(await listOf(waiting)).toEqual([]);
  });
});
