import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { CompiledQuery, sql } from 'kysely';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { archiveHourSource, inlineSourceOf, localFileSource } from '../../src/backfill/archive.ts';
import { importFile } from '../../src/backfill/import.ts';
import { fetchCycle } from '../../src/commits/cycle.ts';
import { HOUR_ROWS, type HourRow, toExportRow } from '../../src/export/hour-query.ts';
import { exportLine } from '../../src/export/line.ts';
import { hourOf } from '../../src/store/archive-hours.ts';
import { forgetCommitsTargets } from '../../src/store/commits-targets.ts';
import { addSource } from '../../src/store/sources.ts';
import { type ArchiveServer, gzipLines, startArchiveServer } from '../support/archive-server.ts';
import {
  chain,
  commitFetchers,
  freshCommitWorld,
  insertPushes,
  insertRepository,
  newSha,
  pushShas,
  pushState,
} from '../support/commit-world.ts';
import { useTestDatabase } from '../support/db.ts';
import { memoryLogger } from '../support/github-client.ts';
import { type GitHubEvent, pushEvent } from '../support/github-factories.ts';
import { useFakeGitHub } from '../support/use-fake-github.ts';

/**
 * Mirror commits are evidence, not truth (ADR 0184). A hostile peer serves an hour of
 * forged lines — each with a `size` equal to the commits it gives — for a repository a
 * source covers. Read through the backfill (importFile from the mirror over HTTP), none is
 * stored `complete` and none costs a request: a list that breaks the rules a compare answer
 * is held to is refused (its push pending, its size not believed), a list that keeps them
 * is kept `unverified`. Then the fetcher asks GitHub (GraphQL against the fake), whose
 * answer replaces every forged list and rewrites every row a mirror wrote; a distinct_size
 * the mirror made up is never stored or exported beside the proven count.
 */

const t = useTestDatabase();
const fake = useFakeGitHub();
const commitDeps = commitFetchers(t, fake, { responseTimeoutMs: 5_000, workerId: 'forgeries' });
let mirror: ArchiveServer;
let dir: string;

beforeAll(async () => {
  mirror = await startArchiveServer();
  dir = mkdtempSync(path.join(tmpdir(), 'gpi-forgeries-'));
});
afterAll(async () => {
  await mirror?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});
beforeEach(async () => {
  await freshCommitWorld(t.db, fake, ['backfill_files', 'rejected_events']);
  await sql`TRUNCATE event_sources CASCADE`.execute(t.db);
  forgetCommitsTargets(t.db);
});
afterEach(commitDeps.close);

const VICTIM = { id: 9_001, name: 'victim/repo' };
const OTHER = { id: 9_002, name: 'other/repo' };
const QUIET = { id: 9_003, name: 'quiet/repo' };
/** An hour when GitHub's events still carried commits: only the mirror is in question. */
const HOUR = hourOf(new Date('2015-06-01T12:00:00Z'));
const at = (minute: number) => new Date(HOUR.start.getTime() + minute * 60_000);

interface Listed {
  sha: string;
  name?: string;
  message?: string;
}

/** A forged line: a push of `repo` from `before` to `head`, with `size` and the commits given. */
function line(
  repo: { id: number; name: string },
  minute: number,
  o: { before: string; head: string; size: number; distinct?: number; commits: Listed[] },
): GitHubEvent {
  return pushEvent({
    repo,
    created_at: at(minute),
    payload: {
      ref: 'refs/heads/main',
      before: o.before,
      head: o.head,
      size: o.size,
      distinct_size: o.distinct ?? o.size,
      commits: o.commits.map((c) => ({
        sha: c.sha,
        author: { email: 'mallory@evil.example', name: c.name ?? 'Mallory' },
        message: c.message ?? 'PWNED by the mirror',
        distinct: true,
        url: `https://api.github.com/repos/${repo.name}/commits/${c.sha}`,
      })),
    },
  });
}

const random = () => newSha().replace(/^0+/, (z) => 'f'.repeat(z.length));

async function importFromMirror(lines: GitHubEvent[]) {
  mirror.setFile(HOUR.name, gzipLines(lines));
  const r = await importFile(
    { pool: t.pool, db: t.db, logger: memoryLogger('silent').logger, workerId: 'mirror-reader' },
    archiveHourSource(mirror.url, HOUR),
    { scope: 'all', sourceId: null, gapId: null },
  );
  expect(r.outcome, r.error?.message).toBe('completed');
  return r;
}

async function held(head: string) {
  const state = await pushState(t.db, head);
  const r = await sql<{ distinct_size: number | null; due: boolean }>`
    SELECT distinct_size, commits_next_attempt_at IS NOT NULL AS due FROM push_events
    WHERE head = ${head}`.execute(t.db);
  return { ...state, ...r.rows[0]!, shas: (await pushShas(t.db, head)).map((x) => x.sha) };
}

/** Runs the fetcher until nothing is due. */
async function fetchAll() {
  const deps = commitDeps.fetcher();
  let outcomes: Record<string, number> = {};
  for (let i = 0; i < 5; i++) {
    const s = await fetchCycle(deps);
    outcomes = { ...outcomes, ...s.outcomes };
    const due = await sql<{ n: number }>`
      SELECT count(*)::int AS n FROM push_events
      WHERE commits_state IN ('pending', 'unverified') AND commits_next_attempt_at IS NOT NULL`.execute(
      t.db,
    );
    if (due.rows[0]!.n === 0) return;
  }
  throw new Error('pushes still due after 5 cycles');
}

describe('forged lines from a peer mirror', () => {
  it('no forgery is stored complete; GitHub’s answer replaces each one, and no made-up distinct_size survives', async () => {
    await insertRepository(t.db, VICTIM.id, VICTIM.name);
    await insertRepository(t.db, OTHER.id, OTHER.name);
    const c = chain(fake, VICTIM.name, 17, null, { branch: 'main' });
    const foreign = chain(fake, OTHER.name, 2, null, { branch: 'main' });
    const { source } = await addSource(t.db, { kind: 'repo', target: VICTIM.name }, 'live');
    expect(source.commits_enabled).toBe(true);
    const sha256 = 'a'.repeat(64);
    const forged = [
      // Random shas (the last is not the head).
      line(VICTIM, 1, {
        before: c[0]!,
        head: c[2]!,
        size: 2,
        commits: [{ sha: random() }, { sha: random() }],
      }),
      // Real shas, but the last one is not the head.
      line(VICTIM, 2, {
        before: c[2]!,
        head: c[4]!,
        size: 2,
        commits: [{ sha: c[4]! }, { sha: c[3]! }],
      }),
      // [head, head].
      line(VICTIM, 3, {
        before: c[4]!,
        head: c[6]!,
        size: 2,
        commits: [{ sha: c[6]! }, { sha: c[6]! }],
      }),
      // A 64-hex sha in a SHA-1 repository.
      line(VICTIM, 4, { before: c[6]!, head: c[7]!, size: 1, commits: [{ sha: sha256 }] }),
      // Another repository's commit before the real head: nothing here can tell.
      line(VICTIM, 5, {
        before: c[7]!,
        head: c[9]!,
        size: 2,
        commits: [{ sha: foreign[1]! }, { sha: c[9]! }],
      }),
      // `size: 0` on a branch push that had 2.
      line(VICTIM, 6, { before: c[9]!, head: c[11]!, size: 0, commits: [] }),
      // Random shas ending with the real head.
      line(VICTIM, 7, {
        before: c[11]!,
        head: c[13]!,
        size: 2,
        commits: [{ sha: random() }, { sha: c[13]! }],
      }),
      // One commit, distinct_size 1e9.
      line(VICTIM, 8, {
        before: c[13]!,
        head: c[14]!,
        size: 1,
        distinct: 1e9,
        commits: [{ sha: c[14]! }],
      }),
      // A push of 2 said to hold 100 (99 distinct), the oldest 20 "listed".
      line(VICTIM, 9, {
        before: c[14]!,
        head: c[16]!,
        size: 100,
        distinct: 99,
        commits: [
          { sha: c[15]! },
          { sha: c[16]! },
          ...Array.from({ length: 18 }, random).map((sha) => ({ sha })),
        ],
      }),
    ];
    const heads = forged.map((e) => (e.payload as { head: string }).head);
    const r = await importFromMirror(forged);
    expect(r.counts).toMatchObject({ kept: 9, created: 9 });
    expect(inlineSourceOf(mirror.url)).toBe('mirror');

    // Read: not one push complete, not one request; refused lists store nothing and say why.
    const states = await sql<{ commits_state: string; n: number }>`
      SELECT commits_state, count(*)::int AS n FROM push_events GROUP BY 1 ORDER BY 1`.execute(
      t.db,
    );
    expect(states.rows).toEqual([
      { commits_state: 'pending', n: 4 },
      { commits_state: 'unverified', n: 5 },
    ]);
    const requests = await sql<{
      n: number;
    }>`SELECT count(*)::int AS n FROM github_requests`.execute(t.db);
    expect(requests.rows[0]!.n).toBe(0);
    const refusals = [
      /inline commits refused: the last commit is \w+, not the head/,
      /inline commits refused: the last commit is \w+, not the head/,
      /inline commits refused: \w+ is listed twice/,
      /inline commits refused: a{64} is 64 characters where the head \w+ is 40/,
    ];
    for (const [i, why] of refusals.entries()) {
      const h = await held(heads[i]!);
      expect(h).toMatchObject({ commits_state: 'pending', commit_count: null, due: true });
      expect(h.commits_error).toMatch(why);
      expect(h.shas).toEqual([]);
    }
    // Kept as evidence, unverified, due: the mirror's lists as given.
    expect(await held(heads[4]!)).toMatchObject({
      commits_state: 'unverified',
      commit_count: 2,
      due: true,
      shas: [foreign[1], c[9]],
    });
    expect(await held(heads[5]!)).toMatchObject({ commits_state: 'unverified', commit_count: 0 });
    expect(await held(heads[6]!)).toMatchObject({ commits_state: 'unverified', commit_count: 2 });
    // 1e9 distinct of 1: not stored.
    expect(await held(heads[7]!)).toMatchObject({ commit_count: 1, distinct_size: null });
    expect(await held(heads[8]!)).toMatchObject({ commit_count: 100, distinct_size: 99 });
    const sources = await sql<{ source: string; n: number }>`
      SELECT source, count(*)::int AS n FROM commits GROUP BY 1`.execute(t.db);
    // The lists kept (of 2, 2, 1 and 20 commits; the size-0 one holds none).
    expect(sources.rows).toEqual([{ source: 'mirror', n: 2 + 2 + 1 + 20 }]);
    // What this store exports of them meanwhile: nothing of the mirror's commits or counts.
    for (const row of await hourRows()) {
      expect(row.size, row.head).toBeNull();
      expect(row.commits, row.head).toBeNull();
      expect(row.distinctSize, row.head).toBeNull();
    }

    // GitHub's answer, by GraphQL: each push exactly its range, the forged rows gone.
    await fetchAll();
    const truth: [number, string[]][] = [
      [0, c.slice(1, 3)],
      [1, c.slice(3, 5)],
      [2, c.slice(5, 7)],
      [3, c.slice(7, 8)],
      [4, c.slice(8, 10)],
      [5, c.slice(10, 12)],
      [6, c.slice(12, 14)],
      [7, c.slice(14, 15)],
      [8, c.slice(15, 17)],
    ];
    for (const [i, shas] of truth) {
      const h = await held(heads[i]!);
      expect(h, `push ${i}`).toMatchObject({
        commits_state: 'complete',
        commit_count: shas.length,
        commits_error: null,
        shas,
      });
    }
    expect((await held(heads[7]!)).distinct_size).toBeNull();
    // 99 distinct of a proven 2: no longer stored.
    expect((await held(heads[8]!)).distinct_size).toBeNull();
    // Every listed commit is GitHub's, with GitHub's text; the mirror's rows are listed nowhere.
    const listed = await sql<{ source: string; author_name: string; message: string }>`
      SELECT DISTINCT c.source, c.author_name, c.message FROM push_commits pc
      JOIN commits c USING (repository_id, sha) WHERE c.author_name = 'Mallory' OR c.source <> 'github'`.execute(
      t.db,
    );
    expect(listed.rows).toEqual([]);
    for (const row of await hourRows()) {
      expect(row.size).not.toBeNull();
      expect(row.commits!.every((x) => x.authorName !== 'Mallory')).toBe(true);
      if (row.distinctSize !== null) expect(row.distinctSize).toBeLessThanOrEqual(row.size!);
      expect(exportLine(row)).not.toContain('PWNED');
    }
  }, 120_000);

  it('a mirror’s text on real commits is rewritten when a later push holding them is proven', async () => {
    await insertRepository(t.db, QUIET.id, QUIET.name);
    const q = chain(fake, QUIET.name, 3, null, { branch: 'main' });
    // Nobody covers quiet/repo: the mirror's push stays unverified, never fetched.
    await importFromMirror([
      line(QUIET, 1, {
        before: q[0]!,
        head: q[2]!,
        size: 2,
        commits: [{ sha: q[1]! }, { sha: q[2]!, message: 'PWNED: the real head, my words' }],
      }),
    ]);
    expect(await held(q[2]!)).toMatchObject({ commits_state: 'unverified', due: false });
    const before = await sql<{ author_name: string; source: string }>`
      SELECT author_name, source FROM commits ORDER BY sha`.execute(t.db);
    expect(before.rows).toEqual([
      { author_name: 'Mallory', source: 'mirror' },
      { author_name: 'Mallory', source: 'mirror' },
    ]);

    // Later, a push of the same commits to another branch arrives pending (a covered poll).
    await insertPushes(t.db, [
      { repositoryId: QUIET.id, ref: 'refs/heads/copy', before: q[0]!, head: q[2]! },
    ]);
    await fetchAll();
    expect(await pushState(t.db, q[2]!, 'refs/heads/copy')).toMatchObject({
      commits_state: 'complete',
      commit_count: 2,
    });
    const after = await sql<{ sha: string; author_name: string; message: string; source: string }>`
      SELECT sha, author_name, message, source, author_email FROM commits ORDER BY sha`.execute(
      t.db,
    );
    const fromGitHub = fake.commitGraph(QUIET.name)!;
    for (const row of after.rows) {
      expect(row.source).toBe('github');
      expect(row.author_name).not.toBe('Mallory');
      expect(row.message).toBe(fromGitHub.commits.get(row.sha)!.message);
    }
    // The mirror's push keeps its state (nobody proved it), but its commits now say what
    // GitHub says.
    expect(await held(q[2]!)).toMatchObject({ commits_state: 'unverified', shas: q.slice(1) });
  }, 60_000);
});

describe('who vouches for inline commits', () => {
  it('GH Archive’s own (HTTPS) and a file named on the command line; any other mirror is a mirror', () => {
    expect(inlineSourceOf('https://data.gharchive.org')).toBe('archive');
    expect(inlineSourceOf('')).toBe('archive');
    expect(inlineSourceOf('http://data.gharchive.org')).toBe('mirror');
    expect(inlineSourceOf('https://peer.example/archive')).toBe('mirror');
    expect(inlineSourceOf('file:///srv/gharchive')).toBe('mirror');
  });

  it('a line with commits from an hour after 2025-10 is unverified even from a named file', async () => {
    await insertRepository(t.db, VICTIM.id, VICTIM.name);
    const c = chain(fake, VICTIM.name, 2, null, { branch: 'main' });
    const good = (createdAt: string, head: string, before: string) =>
      pushEvent({
        repo: VICTIM,
        created_at: createdAt,
        payload: {
          ref: 'refs/heads/main',
          before,
          head,
          size: 1,
          distinct_size: 1,
          commits: [
            {
              sha: head,
              author: { email: 'a@b.example', name: 'A' },
              message: 'm',
              distinct: true,
            },
          ],
        },
      });
    const file = path.join(dir, 'named.json');
    writeFileSync(
      file,
      `${JSON.stringify(good('2015-06-01T12:00:00Z', c[0]!, '0'.repeat(40)))}\n${JSON.stringify(good('2026-06-01T15:00:00Z', c[1]!, c[0]!))}\n`,
    );
    const r = await importFile(
      { pool: t.pool, db: t.db, logger: memoryLogger('silent').logger, workerId: 'named-file' },
      localFileSource(file),
      { scope: 'all', sourceId: null, gapId: null },
    );
    expect(r.outcome).toBe('completed');
    expect(await held(c[0]!)).toMatchObject({ commits_state: 'complete', shas: [c[0]] });
    expect(await held(c[1]!)).toMatchObject({ commits_state: 'unverified', shas: [c[1]] });
    const sources = await sql<{ sha: string; source: string }>`
      SELECT sha, source FROM commits ORDER BY source`.execute(t.db);
    expect(sources.rows).toEqual([
      { sha: c[0], source: 'archive' },
      { sha: c[1], source: 'mirror' },
    ]);
  });
});

/** The forged hour's lines as this store would export them. */
async function hourRows() {
  const end = new Date(HOUR.start.getTime() + 3_600_000);
  const r = await t.db.executeQuery<HourRow>(CompiledQuery.raw(HOUR_ROWS, [HOUR.start, end]));
  expect(r.rows.length).toBeGreaterThan(0);
  return r.rows.map(toExportRow);
}
