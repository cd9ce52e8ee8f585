import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { gunzipSync } from 'node:zlib';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { localFileSource } from '../../src/backfill/archive.ts';
import { importFile } from '../../src/backfill/import.ts';
import type { ImportTarget } from '../../src/backfill/import-types.ts';
import { inHourSnapshot, writeHour } from '../../src/export/write.ts';
import { type ArchiveHour, parseHour } from '../../src/store/archive-hours.ts';
import { addSource } from '../../src/store/sources.ts';
import { hasDueCommits } from '../../src/work/commits-due.ts';
import { ndjson } from '../support/archive-server.ts';
import { useTestDatabase } from '../support/db.ts';
import { memoryLogger } from '../support/github-client.ts';
import { pushEvent } from '../support/github-factories.ts';

/**
 * GH Archive's 2011–2014 "timeline" lines through the archive import and back out through
 * the export (ADR 0194), on real lines of 2013 and 2014 hours
 * (test/fixtures/gharchive-timeline/README.md): pushes and their commits stored once under
 * their natural key, never due for commit fetching even when a source covers them, and
 * written in the modern shape with what is not known as null.
 */

const t = useTestDatabase();
let dir: string;
const FIXTURE = new URL('../fixtures/gharchive-timeline/timeline-lines.ndjson', import.meta.url);
const ALL: ImportTarget = { scope: 'all', sourceId: null, gapId: null };

beforeAll(async () => {
  dir = mkdtempSync(path.join(tmpdir(), 'gpi-timeline-'));
  // A public source with commits on: every public push is covered, so a modern push
  // without commits would be due; a timeline push never is.
  await addSource(t.db, { kind: 'public' }, 'live');
});
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

function deps() {
  return { pool: t.pool, db: t.db, logger: memoryLogger('silent').logger, workerId: 'test:1' };
}

// biome-ignore lint/suspicious/noExplicitAny: a line as JSON.parse gives it back
type Line = Record<string, any>;

async function exported(hour: ArchiveHour): Promise<Line[]> {
  const chunks: Buffer[] = [];
  const sink = new Writable({
    write(c: Buffer, _e, cb) {
      chunks.push(c);
      cb();
    },
  });
  await inHourSnapshot(t.db, (run) => writeHour(run, hour, sink));
  const text = gunzipSync(Buffer.concat(chunks)).toString('utf8').split('\n');
  expect(text.pop()).toBe('');
  return text.map((l) => JSON.parse(l) as Line);
}

async function stored() {
  const r = await sql<{
    repository_id: string;
    ref: string;
    before: string;
    head: string;
    actor_id: string | null;
    actor_login: string | null;
    repo_name: string | null;
    org_id: string | null;
    org_login: string | null;
    id: string | null;
    push_id: string | null;
    created_at: Date;
    commits_state: string;
    commit_count: number | null;
    due: boolean;
    commits: number;
  }>`
    SELECT p.repository_id::text, p.ref, p.before, p.head, p.actor_id::text, p.actor_login,
      p.repo_name, p.org_id::text, p.org_login, p.id::text, p.push_id::text, p.created_at,
      p.commits_state, p.commit_count, p.commits_next_attempt_at IS NOT NULL AS due,
      (SELECT count(*)::int FROM push_commits pc
        WHERE (pc.repository_id, pc.ref, pc.before, pc.head) = (p.repository_id, p.ref, p.before, p.head)) AS commits
    FROM push_events p ORDER BY p.created_at`.execute(t.db);
  return r.rows;
}

describe('a timeline-format archive file', () => {
  const file = () => {
    const f = path.join(dir, '2014-01-01-1.json');
    writeFileSync(f, readFileSync(FIXTURE));
    return f;
  };

  it('stores its pushes with their actors by login, repositories and commits, times in UTC', async () => {
    const r = await importFile(deps(), localFileSource(file()), ALL);
    expect(r.outcome).toBe('completed');
    // 10 lines: 7 pushes (two of them the same push), 2 other events, 1 push without a repository.
    expect(r.counts).toEqual({ events: 9, pushes: 7, kept: 7, created: 6, malformed: 1 });
    expect(r.newActors).toBe(0);
    expect(r.newRepositories).toBe(6);
    expect(r.commitsPending).toBe(0);

    const rows = await stored();
    expect(rows).toHaveLength(6);
    for (const row of rows) {
      expect(row).toMatchObject({
        id: null,
        push_id: null,
        actor_id: null,
        org_id: null,
        due: false,
      });
      expect(row.actor_login).not.toBeNull();
      expect(['complete', 'partial']).toContain(row.commits_state);
    }
    const kirby = rows[0]!;
    expect(kirby).toMatchObject({
      repository_id: '13459894',
      ref: 'refs/heads/master',
      before: '5a26694ed1',
      head: '24c157619ea7b1bb15ee83a310dd111f8b123676',
      actor_login: 'KirbyAu2',
      repo_name: 'KirbyAu2/MrsPackMan',
      commits_state: 'complete',
      commit_count: 0,
      commits: 0,
    });
    // One of its two lines (2013-10-10T00:23:12-07:00 and 00:40:14-07:00): one push.
    expect(['2013-10-10T07:23:12.000Z', '2013-10-10T07:40:14.000Z']).toContain(
      kirby.created_at.toISOString(),
    );
    const symfony = rows.find((p) => p.repo_name === 'symfony/HttpKernel')!;
    expect(symfony).toMatchObject({
      before: '9e44e6a6e0',
      actor_login: 'fabpot',
      org_login: 'symfony',
      commits_state: 'complete',
      commit_count: 2,
      commits: 2,
    });
    expect(symfony.created_at.toISOString()).toBe('2014-01-01T09:01:56.000Z');
    const capped = rows.find((p) => p.repo_name === 'xdot/MCServer')!;
    expect(capped).toMatchObject({ commits_state: 'partial', commit_count: 446, commits: 20 });

    const commits = await sql<{ n: number; named: number }>`
      SELECT count(*)::int AS n, count(*) FILTER (WHERE author_name IS NOT NULL)::int AS named
      FROM commits`.execute(t.db);
    // 1 + 2 + 20 + 8 shas, every one with its author's name.
    expect(commits.rows[0]).toEqual({ n: 31, named: 31 });
    const rejected = await sql<{ reason: string; message: string }>`
      SELECT reason, message FROM rejected_events`.execute(t.db);
    expect(rejected.rows).toEqual([
      { reason: 'malformed', message: expect.stringMatching(/line 6: repository is missing$/) },
    ]);
    expect(await hasDueCommits(t.db)).toBe(false);
  });

  it('stores nothing new when read again, with --force, or as another copy of the file', async () => {
    const before = await stored();
    const again = await importFile(deps(), localFileSource(file()), ALL, { force: true });
    expect(again.counts).toMatchObject({ pushes: 7, kept: 7, created: 0 });
    const copy = path.join(dir, 'copy.json.gz');
    writeFileSync(
      copy,
      ndjson(
        readFileSync(FIXTURE, 'utf8')
          .split('\n')
          .filter(Boolean)
          .map((l) => JSON.parse(l)),
      ),
    );
    expect((await importFile(deps(), localFileSource(copy), ALL)).counts.created).toBe(0);
    expect(await stored()).toEqual(before);
  });

  it('exports them in the modern shape: ids unknown are null, before null, commits back', async () => {
    const lines = await exported(parseHour('2014-01-01-9')!);
    expect(lines.map((l) => l.repo.name)).toEqual([
      'symfony/HttpKernel',
      'lastr2d2/scripts-doubanfm',
      'mozilla/rust',
      'xdot/MCServer',
    ]);
    const symfony = lines[0]!;
    expect(Object.keys(symfony)).toEqual([
      'id',
      'type',
      'actor',
      'repo',
      'payload',
      'public',
      'created_at',
    ]);
    expect(symfony).toMatchObject({
      id: null,
      type: 'PushEvent',
      actor: { id: null, login: 'fabpot', display_login: 'fabpot', avatar_url: null },
      repo: {
        id: 1398651,
        name: 'symfony/HttpKernel',
        url: 'https://api.github.com/repos/symfony/HttpKernel',
      },
      public: true,
      created_at: '2014-01-01T09:01:56Z',
    });
    expect(Object.keys(symfony.payload)).toEqual([
      'repository_id',
      'size',
      'distinct_size',
      'ref',
      'head',
      'before',
      'commits',
    ]);
    expect(symfony.payload).toMatchObject({
      repository_id: 1398651,
      size: 2,
      distinct_size: 1,
      ref: 'refs/heads/2.4',
      head: 'a046d757fa9432f6c4f22218939c0ba5ebe6097d',
      before: null,
    });
    expect(
      symfony.payload.commits.map((c: Line) => [c.sha, c.author.name, c.distinct, c.url]),
    ).toEqual([
      [
        'f004cbf250265d4d2c6a0d1e2534ab57fc2e850e',
        'Fabien Potencier',
        false,
        'https://api.github.com/repos/symfony/HttpKernel/commits/f004cbf250265d4d2c6a0d1e2534ab57fc2e850e',
      ],
      [
        'a046d757fa9432f6c4f22218939c0ba5ebe6097d',
        'Fabien Potencier',
        true,
        'https://api.github.com/repos/symfony/HttpKernel/commits/a046d757fa9432f6c4f22218939c0ba5ebe6097d',
      ],
    ]);
    // The address under COMMIT_EMAILS (hash, this import's default), never in clear.
    expect(symfony.payload.commits[0].author.email).toMatch(/^sha256:[0-9a-f]{64}$/);
    // Partial: the 20 it listed, its size, no distinct_size (not every commit is known).
    const capped = lines[3]!;
    expect(capped.payload.size).toBe(446);
    expect(capped.payload.commits).toHaveLength(20);
    expect(capped.payload).not.toHaveProperty('distinct_size');
    expect(lines[2]!.payload).toMatchObject({
      size: 0,
      distinct_size: 0,
      commits: [],
      before: null,
    });
  });

  it('leaves a modern push of the same import pending: the source covers pushes, just not these', async () => {
    const modern = pushEvent({ created_at: '2014-01-01T09:30:00Z' });
    const f = path.join(dir, 'modern.json.gz');
    writeFileSync(f, ndjson([modern]));
    expect((await importFile(deps(), localFileSource(f), ALL)).commitsPending).toBe(1);
    const states = await sql<{ state: string; n: number }>`
      SELECT commits_state AS state, count(*)::int AS n FROM push_events GROUP BY 1 ORDER BY 1`.execute(
      t.db,
    );
    expect(states.rows).toEqual([
      { state: 'complete', n: 5 },
      { state: 'partial', n: 1 },
      { state: 'pending', n: 1 },
    ]);
  });
});
