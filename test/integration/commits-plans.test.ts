import { createHash } from 'node:crypto';
import { sql } from 'kysely';
import { beforeAll, describe, expect, it } from 'vitest';
import { awaitingPickStatement, countAwaitingStatement } from '../../src/commits/awaiting.ts';
import { claimStatement } from '../../src/commits/claim.ts';
import { defaultTipAtPush, defaultTipStatement } from '../../src/commits/default-tip.ts';
import { commitsDueStatement } from '../../src/work/commits-due.ts';
import { useTestDatabase } from '../support/db.ts';
import { explain, indexReads, type Plan, seqScans } from '../support/plans.ts';

/**
 * The fetcher's two per-request questions stay index scans on a big push_events: the
 * claim (a skip scan over the repositories with pending pushes, then each one's oldest
 * due push) and "anything due?" (one probe of the partial index). Plans, no timings.
 */

const t = useTestDatabase();
const md5 = (s: string) => createHash('md5').update(s).digest('hex');

const sorts = (p: Plan) => p.nodes.filter((n) => /Sort$/.test(n['Node Type']));

beforeAll(async () => {
  // 200,000 pushes long settled, and 20,000 pending: 10,000 in one repository, the rest
  // spread over 100 others.
  await sql`
    INSERT INTO push_events (actor_id, repository_id, ref, before, head, created_at, payload,
      commits_state, commit_count)
    SELECT 1, g % 5000, 'refs/heads/main', md5(g::text), md5((g + 1)::text), now(), '{}',
      'complete', 1
    FROM generate_series(1, 200000) g`.execute(t.db);
  await sql`
    INSERT INTO push_events (actor_id, repository_id, ref, before, head, created_at, payload,
      commits_state, commits_next_attempt_at)
    SELECT 1, CASE WHEN g <= 10000 THEN 999999 ELSE 900000 + g % 100 END, 'refs/heads/p' || g,
      md5(g::text), md5((g + 7)::text), now(), '{}', 'pending', now() - g * interval '1 second'
    FROM generate_series(1, 20000) g`.execute(t.db);
  // A busy default branch: 100,000 pushes to one repository's main over 100,000 minutes,
  // and a new branch pushed in the middle of that history.
  await sql`
    INSERT INTO push_events (actor_id, repository_id, ref, before, head, created_at, payload,
      commits_state, commit_count)
    SELECT 1, 777777, 'refs/heads/main', md5('m' || g), md5('m' || (g + 1)),
      now() - g * interval '1 minute', '{}', 'complete', 1
    FROM generate_series(1, 100000) g`.execute(t.db);
  await sql`
    INSERT INTO push_events (actor_id, repository_id, ref, before, head, created_at, payload,
      commits_state)
    VALUES (1, 777777, 'refs/heads/topic', repeat('0', 40), md5('topic'),
      now() - interval '50000 minutes 30 seconds', '{}', 'none')`.execute(t.db);
  // A few hundred pushes waiting for a credential (skipped, with a next attempt).
  await sql`
    INSERT INTO push_events (actor_id, repository_id, ref, before, head, created_at, payload,
      commits_state, commits_next_attempt_at)
    SELECT 1, 600000 + g, 'refs/heads/main', md5('w' || g), md5('w' || (g + 1)),
      now() - g * interval '1 minute', '{}', 'skipped', now()
    FROM generate_series(1, 300) g`.execute(t.db);
  await sql`VACUUM (ANALYZE) push_events`.execute(t.db);
});

describe('commits fetch plans', () => {
  it("a new branch's default tip at push time: three index probes, not the branch's history", async () => {
    const p = await explain(
      t.db,
      defaultTipStatement(
        {
          repositoryId: '777777',
          ref: 'refs/heads/topic',
          before: '0'.repeat(40),
          head: md5('topic'),
        },
        'main',
      ),
    );
    expect(seqScans(p, 'push_events'), p.shown).toEqual([]);
    expect(sorts(p), p.shown).toEqual([]);
    // prev_head, next_before and ties each probe (repository_id, hashtext(ref), created_at)
    const probes = indexReads(p, 'push_events_ref_created_at');
    expect(probes, p.shown).toHaveLength(3);
    // ... each bounded by the push's time in the index condition, not filtered after it (the
    // bound's right side is `$1` up to Postgres 16, `(InitPlan 2).col1` from 17: not read)
    for (const probe of probes) {
      expect(probe['Relation Name'], p.shown).toBe('push_events');
      // The ref by its hash in the index (migration 2026-12-05T1410), by its text after.
      expect(probe['Index Cond'], p.shown).toMatch(/\(hashtext\(ref\) = '-?\d+'::integer\)/);
      expect(probe.Filter, p.shown).toContain("(ref = 'refs/heads/main'::text)");
      expect(probe['Index Cond'], p.shown).toMatch(/\(created_at [<>=] /);
    }
    expect(probes.map((n) => /created_at ([<>=])/.exec(n['Index Cond']!)![1]).sort()).toEqual([
      '<',
      '=',
      '>',
    ]);
  });

  it("a ref whose hash is the default branch's is read past, never taken for it", async () => {
    // refs/heads/b46163 and refs/heads/b155105 share a hashtext (811131738): the index finds
    // both, the filter keeps the default branch's. The other ref's pushes are the nearest to
    // the new branch's push on both sides.
    const hashes = await sql<{ a: number; b: number }>`
      SELECT hashtext('refs/heads/b46163') AS a, hashtext('refs/heads/b155105') AS b`.execute(t.db);
    expect(hashes.rows[0]!.a).toBe(hashes.rows[0]!.b);
    await sql`
      INSERT INTO push_events (actor_id, repository_id, ref, before, head, created_at, payload,
        commits_state)
      VALUES
        (1, 888888, 'refs/heads/b46163', ${md5('d0')}, ${md5('d1')}, now() - interval '3 hours', '{}', 'none'),
        (1, 888888, 'refs/heads/b155105', ${md5('x0')}, ${md5('x1')}, now() - interval '2 hours', '{}', 'none'),
        (1, 888888, 'refs/heads/new', ${'0'.repeat(40)}, ${md5('n1')}, now() - interval '90 minutes', '{}', 'none'),
        (1, 888888, 'refs/heads/b155105', ${md5('x1')}, ${md5('x2')}, now() - interval '1 hour', '{}', 'none'),
        (1, 888888, 'refs/heads/b46163', ${md5('d1')}, ${md5('d2')}, now() - interval '30 minutes', '{}', 'none')`.execute(
      t.db,
    );
    const tip = await defaultTipAtPush(
      t.db,
      { repositoryId: '888888', ref: 'refs/heads/new', before: '0'.repeat(40), head: md5('n1') },
      'b46163',
    );
    expect(tip).toEqual({ proven: md5('d1'), candidate: null, around: [md5('d1')] });
  });

  it('the claim never scans push_events whole', async () => {
    const p = await explain(t.db, claimStatement({ now: new Date(), leaseSeconds: 60 }));
    expect(seqScans(p, 'push_events'), p.shown).toEqual([]);
    expect(indexReads(p, 'push_events_commits_pending_repo'), p.shown).not.toEqual([]);
  });

  it('the pushes waiting for a credential: picked newest first and counted from their own index', async () => {
    const pick = await explain(t.db, awaitingPickStatement(500));
    expect(seqScans(pick, 'push_events'), pick.shown).toEqual([]);
    expect(sorts(pick), pick.shown).toEqual([]);
    const probe = indexReads(pick, 'push_events_commits_awaiting');
    expect(probe, pick.shown).toHaveLength(1);
    expect(probe[0]!['Scan Direction'], pick.shown).toBe('Backward');
    const count = await explain(t.db, countAwaitingStatement());
    expect(seqScans(count, 'push_events'), count.shown).toEqual([]);
    expect(indexReads(count, 'push_events_commits_awaiting'), count.shown).not.toEqual([]);
  });

  it('"anything due?" is one probe of the partial index', async () => {
    const p = await explain(t.db, commitsDueStatement(new Date()));
    expect(seqScans(p, 'push_events'), p.shown).toEqual([]);
    expect(
      [
        ...indexReads(p, 'push_events_commits_due'),
        ...indexReads(p, 'push_events_commits_pending_repo'),
      ],
      p.shown,
    ).not.toEqual([]);
  });
});
