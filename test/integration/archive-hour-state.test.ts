import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { pathToFileURL } from 'node:url';
import { gunzipSync } from 'node:zlib';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WATCHED as FIRST } from '../../db/migrations/2026-12-04T1100_archive_hour_state.ts';
import { WATCHED as LATER } from '../../db/migrations/2026-12-05T0330_archive_watches_names_and_commit_people.ts';
import { WATCHED as LISTS } from '../../db/migrations/2026-12-05T1110_inline_commit_lists.ts';
import { archiveHourSource } from '../../src/backfill/archive.ts';
import { importFile } from '../../src/backfill/import.ts';
import { HOUR_ROWS } from '../../src/export/hour-query.ts';
import { COMMIT_ROWS } from '../../src/export/parquet-rows.ts';
import { inHourSnapshot, writeHour } from '../../src/export/write.ts';
import { type ArchiveHour, hourOf } from '../../src/store/archive-hours.ts';
import { gzipLines } from '../support/archive-server.ts';
import { useTestDatabase } from '../support/db.ts';
import { buildExportWorld, type ExportWorld } from '../support/export-world.ts';
import { memoryLogger } from '../support/github-client.ts';
import { pushEvent, sha } from '../support/github-factories.ts';
import { startTestWeb, type TestWeb } from '../support/web.ts';

/**
 * /archive knows an hour's state without reading its rows (ADR 0185): triggers
 * count the writes that change an hour, and a request compares that count with the one its
 * file was built at. So the count must move with every write that changes what a line says
 * — however the write is made (a fill adding a push to an old hour, commits fetched, a
 * commit's text rewritten, a repository made private, an account renamed) — and with no
 * other: an unrelated write leaves the file as it is, with no rebuild. After each change
 * the bytes served are the bytes bin/export writes.
 */

/**
 * What the triggers watch now: the first migration's lists, two of them lengthened since,
 * push_events' again when a push's commit list moved into its row.
 */
const WATCHED = { ...FIRST, ...LATER, ...LISTS };

const t = useTestDatabase();
let w: ExportWorld;
let web: TestWeb;
let dataDir: string;

beforeAll(async () => {
  w = await buildExportWorld(t);
  dataDir = mkdtempSync(path.join(tmpdir(), 'gpi-archive-state-'));
  web = await startTestWeb(t, { env: { DATA_DIR: dataDir } });
});
afterAll(async () => {
  await web?.close();
  rmSync(dataDir, { recursive: true, force: true });
});

async function exportBytes(hour: ArchiveHour): Promise<Buffer> {
  const chunks: Buffer[] = [];
  const sink = new Writable({
    write(c: Buffer, _e, cb) {
      chunks.push(c);
      cb();
    },
  });
  await inHourSnapshot(t.db, (run) => writeHour(run, hour, sink));
  return Buffer.concat(chunks);
}

const builds = () =>
  web.logs
    .map((l) => JSON.parse(l))
    .filter((l) => l.event === 'export.hour_written' && l.hour === w.pushHour.name).length;

async function served(): Promise<{ etag: string; body: Buffer; text: string }> {
  const res = await fetch(`${web.url}/archive/${w.pushHour.name}.json.gz`);
  expect(res.status).toBe(200);
  const body = Buffer.from(await res.arrayBuffer());
  return { etag: res.headers.get('etag')!, body, text: gunzipSync(body).toString('utf8') };
}

/** The hour after `change`: a new file (one build), the bytes bin/export writes now. */
async function changedBy(before: string, change: () => Promise<unknown>) {
  const n = builds();
  await change();
  const after = await served();
  expect(after.etag).not.toBe(before);
  expect(after.body.equals(await exportBytes(w.pushHour))).toBe(true);
  expect(builds()).toBe(n + 1);
  return after;
}

describe("what a line is read from, and what the hour's triggers watch", () => {
  it('watches every column of every table the export reads', () => {
    // The JSON lines and the pushes table read HOUR_ROWS; the push_commits table COMMIT_ROWS.
    const used = (alias: string) =>
      [
        ...`${HOUR_ROWS}\n${COMMIT_ROWS}`.matchAll(
          new RegExp(`\\b${alias}\\."?([a-z_]+)\\b"?(?!\\s*->)`, 'g'),
        ),
      ].map((m) => m[1]!);
    const unwatched = (cols: string[], watched: readonly string[]) =>
      [...new Set(cols)].filter((c) => !watched.includes(c));
    expect(unwatched(used('p'), WATCHED.push_events)).toEqual([]);
    expect(unwatched(used('a'), WATCHED.actors)).toEqual([]);
    expect(unwatched(used('c'), WATCHED.commits)).toEqual([]);
    expect(unwatched(used('pc'), WATCHED.push_commits)).toEqual([]);
    // x is push_commits read through a subquery; n is its row_number.
    expect(unwatched(used('x'), [...WATCHED.push_commits, 'n'])).toEqual([]);
    expect(unwatched(used('r'), WATCHED.repositories)).toEqual([]);
    // The repository's profile is watched through the very paths a line reads.
    const paths = [...HOUR_ROWS.matchAll(/\br\.(profile(?:->>?'[a-z_]+')+)/g)].map((m) => m[1]!);
    expect(paths.length).toBeGreaterThan(3);
    expect(unwatched(paths, WATCHED.repositories)).toEqual([]);
  });
});

describe("an hour's file follows every write that changes it, and no other", () => {
  it('keeps the file (same ETag, no rebuild) through writes that change no line', async () => {
    const first = await served();
    const n = builds();
    const other = hourOf(new Date(w.pushHour.start.getTime() - 5 * 3_600_000));
    await sql`UPDATE push_events SET commits_attempts = commits_attempts + 1
      WHERE created_at >= ${w.pushHour.start}`.execute(t.db);
    await sql`UPDATE repositories SET profile = coalesce(profile, '{}') || '{"followers": 7}'
      WHERE id = ${w.repo.id}`.execute(t.db);
    // The committer is in no format (committed_at is: the push_commits table has it).
    await sql`UPDATE commits SET committer_name = 'someone else'`.execute(t.db);
    await sql`INSERT INTO push_events (actor_id, repository_id, ref, before, head, created_at, payload)
      SELECT actor_id, repository_id, ref, 'elsewhere-before', 'elsewhere-head', ${other.start}, '{}'
      FROM push_events LIMIT 1`.execute(t.db);
    // An account renamed that pushed nothing in the hour.
    await sql`INSERT INTO actors (id, login) VALUES (990001, 'somebody')`.execute(t.db);
    await sql`UPDATE actors SET login = 'somebody-else' WHERE id = 990001`.execute(t.db);
    const again = await served();
    expect(again.etag).toBe(first.etag);
    expect(again.body.equals(first.body)).toBe(true);
    expect(builds()).toBe(n);
  });

  it('follows a push a fill adds to the old hour', async () => {
    const before = await served();
    const dir = mkdtempSync(path.join(tmpdir(), 'gpi-archive-state-fill-'));
    try {
      const head = sha('late-push');
      const late = pushEvent({
        id: 77_000_000_001,
        created_at: new Date(w.pushHour.start.getTime() + 30 * 60_000),
        repo: { id: w.repo.id, name: w.repo.name },
        payload: { head },
      });
      writeFileSync(path.join(dir, `${w.pushHour.name}.json.gz`), gzipLines([late]));
      const after = await changedBy(before.etag, async () => {
        const r = await importFile(
          { pool: t.pool, db: t.db, logger: memoryLogger('silent').logger, workerId: 'fill:1' },
          archiveHourSource(pathToFileURL(dir).href, w.pushHour),
          { scope: 'gap:late', sourceId: null, gapId: null },
        );
        expect(r.outcome).toBe('completed');
        expect(r.counts.created).toBe(1);
      });
      expect(after.text).toContain(head);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("follows commits fetched for a pending push, and a commit's text rewritten", async () => {
    const before = await served();
    const fetched = await changedBy(before.etag, () =>
      sql`UPDATE push_events SET commits_state = 'none', commit_count = 0
        WHERE head = ${w.heads.pending}`.execute(t.db),
    );
    const listed = await sql<{ repository_id: string; sha: string }>`
      SELECT pc.repository_id, pc.sha FROM push_commits pc
      WHERE pc.head = ${w.heads.three} ORDER BY position LIMIT 1`.execute(t.db);
    const c = listed.rows[0]!;
    const rewritten = await changedBy(fetched.etag, () =>
      sql`UPDATE commits SET message = 'rewritten by a later answer'
        WHERE repository_id = ${c.repository_id} AND sha = ${c.sha}`.execute(t.db),
    );
    expect(rewritten.text).toContain('rewritten by a later answer');
  });

  it('follows a repository made private, and an account renamed', async () => {
    const before = await served();
    const privateNow = await changedBy(before.etag, () =>
      sql`UPDATE repositories SET profile = jsonb_set(coalesce(profile, '{}'), '{private}', 'true')
        WHERE id = ${w.repo.id}`.execute(t.db),
    );
    expect(privateNow.text).not.toContain(w.heads.three);
    const publicAgain = await changedBy(privateNow.etag, () =>
      sql`UPDATE repositories SET profile = jsonb_set(profile, '{private}', 'false')
        WHERE id = ${w.repo.id}`.execute(t.db),
    );
    expect(publicAgain.text).toContain(w.heads.three);
    // An account renamed changes the line of a push stored before the store kept the login
    // its event carried (the line then writes the login the store knows).
    const renamed = await changedBy(publicAgain.etag, async () => {
      await sql`UPDATE push_events SET actor_login = NULL WHERE head = ${w.heads.three}`.execute(
        t.db,
      );
      await sql`UPDATE actors SET login = 'renamed-account' WHERE id = (
        SELECT actor_id FROM push_events WHERE head = ${w.heads.three})`.execute(t.db);
    });
    expect(renamed.text).toContain('"login":"renamed-account"');
    // Checked once: the next request is a hit.
    const n = builds();
    expect((await served()).etag).toBe(renamed.etag);
    expect(builds()).toBe(n);
  });
});
