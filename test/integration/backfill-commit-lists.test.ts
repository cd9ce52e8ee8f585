import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { localFileSource } from '../../src/backfill/archive.ts';
import { importFile } from '../../src/backfill/import.ts';
import type { ImportTarget } from '../../src/backfill/import-types.ts';
import { gzipLines } from '../support/archive-server.ts';
import { useTestDatabase } from '../support/db.ts';
import { memoryLogger } from '../support/github-client.ts';
import { type GitHubEvent, pushEvent, sha } from '../support/github-factories.ts';

/**
 * A new archive push is inserted with its list (insertedList), so the chunk stores only its
 * commits' rows (storeCommits `listsWritten`). The pushes that path must not take: one a
 * file gives twice (the merge keeps one row, the other's commits are merged into its list),
 * and one whose commits do not say `distinct` (decided against what is held). Each ends
 * with the list the full merge gives it.
 */

const t = useTestDatabase();
let dir: string;
beforeAll(() => {
  dir = mkdtempSync(path.join(tmpdir(), 'gpi-lists-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const ALL: ImportTarget = { scope: 'all', sourceId: null, gapId: null };
const AT = new Date('2024-05-01T10:00:00Z');

function commit(s: string, distinct: boolean | undefined) {
  return {
    sha: s,
    author: { email: 'dev@example.com', name: 'Dev' },
    message: `change ${s.slice(0, 7)}`,
    ...(distinct === undefined ? {} : { distinct }),
    url: `https://api.github.com/repos/o/r/commits/${s}`,
  };
}

/** A pre-2025-10 push line of `repo` with `shas` inline (the last is its head). */
function push(
  repo: number,
  second: number,
  shas: string[],
  distinct: (boolean | undefined)[],
  key: { before: string } = { before: sha() },
): GitHubEvent {
  return pushEvent({
    created_at: new Date(AT.getTime() + second * 1000),
    repo: { id: repo, name: `o/r${repo}`, url: `https://api.github.com/repos/o/r${repo}` },
    payload: {
      ref: 'refs/heads/main',
      before: key.before,
      head: shas.at(-1)!,
      size: shas.length,
      distinct_size: distinct.filter((d) => d !== false).length,
      commits: shas.map((s, i) => commit(s, distinct[i])),
    },
  });
}

async function listOf(repo: number): Promise<string[]> {
  const r = await sql<{ e: string }>`
    SELECT position || ':' || sha || ':' || coalesce("distinct"::text, '?') AS e
    FROM push_commits WHERE repository_id = ${repo} ORDER BY position`.execute(t.db);
  return r.rows.map((x) => x.e);
}

describe('an archive chunk stores its new pushes lists once', () => {
  it('gives every push the list the full merge gives it', async () => {
    const [a1, a2, b1, b2, c1, c2, d1, d2] = Array.from({ length: 8 }, (_, i) => sha(`l${i}`));
    const before = { b: { before: sha('bb') }, c: { before: sha('cb') } };
    const evs = [
      // A: new, its commits say distinct: the fast path.
      push(7_001, 1, [a1!, a2!], [true, false]),
      // B twice: first with distinct, then the same push without it.
      push(7_002, 2, [b1!, b2!], [true, true], before.b),
      push(7_002, 3, [b1!, b2!], [undefined, undefined], before.b),
      // C twice, the other way round.
      push(7_003, 4, [c1!, c2!], [undefined, undefined], before.c),
      push(7_003, 5, [c1!, c2!], [true, false], before.c),
      // D: alone, distinct not said: decided (new commits, first told: distinct).
      push(7_004, 6, [d1!, d2!], [undefined, undefined]),
    ];
    const file = path.join(dir, '2024-05-01-10.json.gz');
    writeFileSync(file, gzipLines(evs.map((e) => JSON.stringify(e))));
    const { logger } = memoryLogger('warn');
    const result = await importFile(
      { pool: t.pool, db: t.db, logger, workerId: 'test-host:1' },
      localFileSource(file),
      ALL,
    );
    expect(result.outcome).toBe('completed');
    expect(result.counts.created).toBe(4);

    expect(await listOf(7_001)).toEqual([`0:${a1}:true`, `1:${a2}:false`]);
    // The first copy given decides a position's distinct (the file's order).
    expect(await listOf(7_002)).toEqual([`0:${b1}:true`, `1:${b2}:true`]);
    expect(await listOf(7_003)).toEqual([`0:${c1}:true`, `1:${c2}:true`]);
    expect(await listOf(7_004)).toEqual([`0:${d1}:true`, `1:${d2}:true`]);
    const stored = await sql<{ n: number }>`
      SELECT count(*)::int AS n FROM stored_commits
      WHERE repository_id IN (7001, 7002, 7003, 7004)`.execute(t.db);
    expect(stored.rows[0]!.n).toBe(8);
  });
});
