import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import type pg from 'pg';
import { localFileSource } from '../../src/backfill/archive.ts';
import { importFile } from '../../src/backfill/import.ts';
import type { Db } from '../../src/platform/db/pool.ts';
import { type ArchiveHour, parseHour } from '../../src/store/archive-hours.ts';
import { gzipLines } from './archive-server.ts';
import { memoryLogger } from './github-client.ts';
import { type GitHubEvent, pushEvent, sha } from './github-factories.ts';

/**
 * Pushes of an old month, with their commits, stored the way GH Archive's own hours are
 * (the archive path, pre-2025 lines with size and commits): two hours of March 2015 with
 * three pushes each, and one push in April 2015 (a month retention must leave alone).
 */

export interface HistoryWorld {
  /** The hours of March 2015 that hold pushes. */
  hours: ArchiveHour[];
  /** The April hour. */
  april: ArchiveHour;
  /** Every stored push's head, March's first. */
  marchHeads: string[];
  aprilHeads: string[];
}

let seq = 0;

function line(hour: ArchiveHour, minute: number, commits: number): GitHubEvent {
  seq++;
  const list = Array.from({ length: commits }, (_, i) => ({
    sha: sha(`history-${seq}-${i}-${Math.random()}`),
    author: { email: `dev${i}@example.com`, name: `Dev ${i}` },
    message: `change ${i} of push ${seq}`,
    distinct: true,
    url: 'https://api.github.com/repos/ignored/ignored/commits/x',
  }));
  const head = list.at(-1)!.sha;
  return pushEvent({
    id: 2_600_000_000 + seq,
    actor: { id: 77_000 + seq, login: `historian-${seq}` },
    repo: { id: 8_800_000 + (seq % 2), name: `history-org/repo-${seq % 2}` },
    created_at: new Date(hour.start.getTime() + minute * 60_000),
    payload: { head, size: commits, distinct_size: commits, commits: list },
  });
}

/**
 * Imports `lines` as the archive hour `hour`, a file named as bin/backfill FILE is: its
 * commits are GH Archive's (complete), not a mirror's claim.
 */
export async function importHourLines(
  store: { db: Db; pool: pg.Pool },
  hour: ArchiveHour,
  lines: GitHubEvent[],
): Promise<void> {
  const dir = mkdtempSync(path.join(tmpdir(), 'gpi-history-world-'));
  try {
    writeFileSync(path.join(dir, `${hour.name}.json.gz`), gzipLines(lines));
    const r = await importFile(
      { pool: store.pool, db: store.db, logger: memoryLogger('silent').logger, workerId: 'hw:1' },
      localFileSource(path.join(dir, `${hour.name}.json.gz`)),
      { scope: 'all', sourceId: null, gapId: null },
    );
    if (r.outcome !== 'completed') throw new Error(`import ${hour.name}: ${r.outcome}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export async function buildHistoryWorld(store: { db: Db; pool: pg.Pool }): Promise<HistoryWorld> {
  const hours = [parseHour('2015-03-02-5')!, parseHour('2015-03-17-20')!];
  const april = parseHour('2015-04-01-0')!;
  const marchHeads: string[] = [];
  for (const hour of hours) {
    const lines = [line(hour, 3, 1), line(hour, 20, 2), line(hour, 41, 3)];
    marchHeads.push(...lines.map((l) => l.payload.head as string));
    await importHourLines(store, hour, lines);
  }
  const aprilLines = [line(april, 10, 2)];
  await importHourLines(store, april, aprilLines);
  return { hours, april, marchHeads, aprilHeads: aprilLines.map((l) => l.payload.head as string) };
}

/** The pushes of the given heads with their commit lists, as the store holds them. */
export async function pushesOf(db: Db, heads: string[]) {
  const r = await sql<{
    head: string;
    id: string | null;
    created_at: Date;
    repository_id: string;
    ref: string;
    before: string;
    commit_count: number | null;
    shas: string[] | null;
    messages: (string | null)[] | null;
  }>`
    SELECT p.head, p.id::text AS id, p.created_at, p.repository_id::text AS repository_id, p.ref,
      p.before, p.commit_count,
      (SELECT array_agg(pc.sha ORDER BY pc.position) FROM push_commits pc
        WHERE (pc.repository_id, pc.ref, pc.before, pc.head) = (p.repository_id, p.ref, p.before, p.head)) AS shas,
      (SELECT array_agg(c.message ORDER BY pc.position) FROM push_commits pc
        LEFT JOIN commits c ON (c.repository_id, c.sha) = (pc.repository_id, pc.sha)
        WHERE (pc.repository_id, pc.ref, pc.before, pc.head) = (p.repository_id, p.ref, p.before, p.head)) AS messages
    FROM push_events p WHERE p.head = ANY(${heads}) ORDER BY p.head`.execute(db);
  return r.rows;
}
