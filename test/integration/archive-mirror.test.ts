import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fillGap } from '../../src/backfill/fill.ts';
import type { Db } from '../../src/platform/db/pool.ts';
import { gapHours } from '../../src/store/archive-hours.ts';
import { addSource } from '../../src/store/sources.ts';
import type { TestDatabase } from '../support/db.ts';
import { useTestDatabase } from '../support/db.ts';
import { buildExportWorld, type ExportWorld } from '../support/export-world.ts';
import { memoryLogger, testConfig } from '../support/github-client.ts';
import { createScratchDatabase, type ScratchDatabase } from '../support/scratch-db.ts';
import { startTestWeb, type TestWeb } from '../support/web.ts';

/**
 * Instances as mirrors: instance A (this file's database) serves its store at
 * /archive; instance B (a second database) names A's /archive in GHARCHIVE_URL and fills a
 * gap of a source whose pushes get their commits. Every push comes with all its commits
 * inline. A is not GH Archive, so what it says of commits is evidence, not truth (ADR
 * 0184): B keeps every commit as A gave it, each push `unverified` and due for B's fetcher
 * (GitHub's answer will prove or replace them), without a request while reading: its ledger
 * (github_requests) stays empty, and its coverage says the hour came from the archive, read
 * from A.
 */

const a = useTestDatabase();
let b: ScratchDatabase;
let w: ExportWorld;
let web: TestWeb;
let dataDir: string;

beforeAll(async () => {
  w = await buildExportWorld(a);
  dataDir = mkdtempSync(path.join(tmpdir(), 'gpi-archive-mirror-'));
  web = await startTestWeb(a, { env: { DATA_DIR: dataDir } });
  b = await createScratchDatabase();
});
afterAll(async () => {
  await web?.close();
  await b?.drop();
  rmSync(dataDir, { recursive: true, force: true });
});

interface Held {
  id: string | null;
  head: string;
  commits_state: string;
  commit_count: number | null;
  distinct_size: number | null;
  commits: {
    position: number;
    sha: string;
    distinct: boolean | null;
    author_name: string | null;
    author_email: string | null;
    message: string | null;
  }[];
}

/** The pushes of a repository with their commits, as a store holds them. */
async function held(db: Db, repositoryId: number): Promise<Held[]> {
  const r = await sql<Held>`
    SELECT p.id::text AS id, p.head, p.commits_state, p.commit_count,
      -- The distinct_size a line of the push says: the source's, else counted from its
      -- commits when each says whether it is distinct (src/export/hour-query.ts).
      coalesce(p.distinct_size, (
        SELECT CASE WHEN count(*) = p.commit_count AND count(pc."distinct") = count(*)
          THEN (count(*) FILTER (WHERE pc."distinct"))::int END
        FROM push_commits pc
        WHERE (pc.repository_id, pc.ref, pc.before, pc.head) = (p.repository_id, p.ref, p.before, p.head)
      )) AS distinct_size,
      coalesce((
        SELECT json_agg(json_build_object('position', pc.position, 'sha', pc.sha,
          'distinct', pc."distinct", 'author_name', c.author_name,
          'author_email', c.author_email, 'message', c.message) ORDER BY pc.position)
        FROM push_commits pc JOIN commits c USING (repository_id, sha)
        WHERE (pc.repository_id, pc.ref, pc.before, pc.head) = (p.repository_id, p.ref, p.before, p.head)
      ), '[]') AS commits
    FROM push_events p WHERE p.repository_id = ${repositoryId}
    ORDER BY p.head`.execute(db);
  return r.rows;
}

describe('a second instance filling a gap from the first one’s /archive', () => {
  it('keeps every push with its inline commits, unverified and due for the fetcher, with zero requests to GitHub', async () => {
    const mirror = `${web.url}/archive`;
    const { source } = await addSource(b.db, { kind: 'repo', target: w.repo.name }, 'live');
    await b.db
      .updateTable('event_sources')
      .set({ commits_enabled: true })
      .where('id', '=', source.id)
      .execute();
    const gap = await b.db
      .insertInto('gaps')
      .values({
        source_id: source.id,
        from_at: new Date(w.pushHour.start.getTime() + 60_000),
        to_at: new Date(w.pushHour.start.getTime() + 50 * 60_000),
        next_attempt_at: new Date(),
      })
      .returningAll()
      .executeTakeFirstOrThrow();
    // The gap's hours are the world's four: every one of them is served by A.
    expect(gapHours(gap).map((h) => h.name)).toEqual(w.hours.map((h) => h.name));

    const deps = {
      config: testConfig({ url: b.url } as TestDatabase, {
        apiUrl: 'http://127.0.0.1:9',
        env: { GHARCHIVE_URL: mirror },
      }),
      db: b.db,
      pool: b.pool,
      logger: memoryLogger('silent').logger,
      workerId: 'instance-b:1',
    };
    const r = await fillGap(deps, Number(gap.id));
    expect(r.outcome, r.error ?? '').toBe('filled');
    expect(r.mirrors.every((m) => m.mirror === mirror && m.state === 'imported')).toBe(true);

    const there = await held(a.db, w.repo.id);
    const here = await held(b.db, w.repo.id);
    expect(there.map((p) => p.head).sort()).toEqual([...w.repoHeads].sort());
    // Same pushes, same ids (null for the webhook-only one), same commits, same addresses —
    // held as A's claim: unverified, where A holds them proven.
    const claim = (ps: Held[]) => ps.map((p) => ({ ...p, commits_state: 'as claimed' }));
    expect(claim(here)).toEqual(claim(there));
    expect(there.every((p) => p.commits_state === 'complete')).toBe(true);
    expect(here.every((p) => p.commits_state === 'unverified')).toBe(true);
    expect(here.find((p) => p.head === w.heads.webhook)!.id).toBeNull();
    expect(here.reduce((n, p) => n + p.commits.length, 0)).toBeGreaterThanOrEqual(10);

    // Not a request while reading: the ledger is empty. Every push waits for the fetcher
    // (its source covers it), and every commit row says a mirror wrote it.
    const ledger = await sql<{ n: string; compare: string }>`
      SELECT count(*) AS n, count(*) FILTER (WHERE path LIKE '%/compare/%') AS compare
      FROM github_requests`.execute(b.db);
    expect(ledger.rows[0]).toEqual({ n: '0', compare: '0' });
    const due = await sql<{ state: string; due: string }>`
      SELECT commits_state AS state, count(*) FILTER (WHERE commits_next_attempt_at IS NOT NULL) AS due
      FROM push_events GROUP BY 1`.execute(b.db);
    expect(due.rows).toEqual([{ state: 'unverified', due: String(w.repoHeads.length) }]);
    const sources = await sql<{ source: string | null }>`
      SELECT DISTINCT source FROM commits`.execute(b.db);
    expect(sources.rows).toEqual([{ source: 'mirror' }]);

    // Coverage: the hour's pushes came from the archive, and A is the mirror read.
    const cov = await sql<{ pushes: string; archive: string; mirrors_read: string }>`
      SELECT pushes, archive, mirrors_read FROM hourly_coverage_between(${w.pushHour.start},
        ${new Date(w.pushHour.start.getTime() + 3_600_000)})`.execute(b.db);
    expect(cov.rows).toEqual([
      {
        pushes: String(w.repoHeads.length),
        archive: String(w.repoHeads.length),
        mirrors_read: '1',
      },
    ]);
    const files = await sql<{ file: string; mirror: string; state: string }>`
      SELECT file, mirror, state FROM backfill_files ORDER BY hour`.execute(b.db);
    expect(files.rows).toEqual(w.hours.map((h) => ({ file: h.name, mirror, state: 'completed' })));
  });
});
