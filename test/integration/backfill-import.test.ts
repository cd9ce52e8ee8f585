import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { archiveHourSource, localFileSource } from '../../src/backfill/archive.ts';
import { scopeOf } from '../../src/backfill/events.ts';
import { importFile } from '../../src/backfill/import.ts';
import type { ImportTarget } from '../../src/backfill/import-types.ts';
import { parseHour } from '../../src/store/archive-hours.ts';
import { mapPushEvent } from '../../src/store/mapping.ts';
import { storePushes } from '../../src/store/pushes.ts';
import {
  type ArchiveServer,
  gzipLines,
  hourOfEvents,
  ndjson,
  startArchiveServer,
  truncatedGzip,
} from '../support/archive-server.ts';
import { useTestDatabase } from '../support/db.ts';
import { memoryLogger } from '../support/github-client.ts';
import { type GitHubEvent, otherEvent, pushEvent } from '../support/github-factories.ts';
import { waitFor } from '../support/wait.ts';

const t = useTestDatabase();
let archive: ArchiveServer;
let dir: string;

beforeAll(async () => {
  archive = await startArchiveServer();
  dir = mkdtempSync(path.join(tmpdir(), 'gpi-backfill-'));
});
afterAll(async () => {
  await archive.close();
  rmSync(dir, { recursive: true, force: true });
});

const ALL: ImportTarget = { scope: 'all', sourceId: null, gapId: null };

function deps(logger = memoryLogger('silent').logger) {
  return { pool: t.pool, logger, workerId: 'test-host:1' };
}

let fileSeq = 0;
function writeFile(content: string | Buffer, ext = '.json.gz'): string {
  const file = path.join(dir, `file-${++fileSeq}${ext}`);
  writeFileSync(file, content);
  return file;
}

let idSeq = 95_000_000_000;
/** `n` events, half pushes, each with its own id range. */
function events(n: number, at = new Date('2026-11-20T10:00:00Z')): GitHubEvent[] {
  const evs = hourOfEvents(at, n, { firstId: idSeq });
  idSeq += n;
  return evs;
}
const pushesOf = (evs: GitHubEvent[]) => evs.filter((e) => e.type === 'PushEvent');

async function held(ids: string[]): Promise<{ id: string; origin: string }[]> {
  const r = await sql<{ id: string; origin: string }>`
    SELECT id::text AS id, origin FROM push_events WHERE id = ANY(${ids}::bigint[]) ORDER BY id`.execute(
    t.db,
  );
  return r.rows;
}

async function checkpoint(file: string, scope = 'all') {
  return t.db
    .selectFrom('backfill_files')
    .selectAll()
    .where('file', '=', file)
    .where('scope', '=', scope)
    .executeTakeFirst();
}

describe('importing an archive file', () => {
  it('stores every PushEvent once, as origin archive, with pending actors and repositories', async () => {
    const evs = events(40);
    const file = writeFile(gzipLines(evs));
    const r = await importFile(deps(), localFileSource(file), ALL, { chunkRows: 7 });
    expect(r).toMatchObject({
      outcome: 'completed',
      resumedAt: 0,
      lines: 40,
      counts: { events: 40, pushes: 20, kept: 20, created: 20, malformed: 0 },
      newActors: 20,
      newRepositories: 20,
      error: null,
    });
    const pushes = pushesOf(evs);
    expect(await held(pushes.map((e) => e.id))).toEqual(
      pushes.map((e) => ({ id: e.id, origin: 'archive' })),
    );
    const actor = await t.db
      .selectFrom('actors')
      .selectAll()
      .where('id', '=', String(pushes[0]!.actor.id))
      .executeTakeFirstOrThrow();
    expect(actor).toMatchObject({ login: pushes[0]!.actor.login, enrichment_state: 'pending' });
    // Stored exactly as the poll path maps it.
    const row = await t.db
      .selectFrom('push_events')
      .selectAll()
      .where('id', '=', pushes[3]!.id)
      .executeTakeFirstOrThrow();
    const mapped = mapPushEvent(
      pushes[3] as unknown as Record<string, unknown>,
      pushes[3]!.id,
    ).push;
    expect(row).toMatchObject({
      actor_id: String(mapped.actor.id),
      repository_id: String(mapped.repository.id),
      push_id: String(mapped.pushId),
      ref: mapped.ref,
      head: mapped.head,
      before: mapped.before,
      created_at: mapped.createdAt,
      // Every key of this payload is a column's (ADR 0199): nothing is kept twice.
      payload: null,
      source_id: null,
      run_id: null,
    });
    expect(await checkpoint(file)).toMatchObject({
      state: 'completed',
      lines_done: '40',
      events_seen: '40',
      pushes_seen: '20',
      pushes_kept: '20',
      pushes_created: '20',
      malformed: '0',
    });
  });

  it('is idempotent: a second import adds nothing; --force reads it again and still adds nothing', async () => {
    const evs = events(30);
    const file = writeFile(gzipLines(evs));
    await importFile(deps(), localFileSource(file), ALL);
    const count = async () =>
      Number(
        (await sql<{ n: string }>`SELECT count(*) AS n FROM push_events`.execute(t.db)).rows[0]!.n,
      );
    const before = await count();
    const again = await importFile(deps(), localFileSource(file), ALL);
    expect(again).toMatchObject({ outcome: 'already_imported', lines: 0 });
    expect(again.totals.created).toBe(15);
    const forced = await importFile(deps(), localFileSource(file), ALL, { force: true });
    expect(forced).toMatchObject({
      outcome: 'completed',
      counts: { pushes: 15, kept: 15, created: 0 },
      newActors: 0,
    });
    expect(await count()).toBe(before);
    // The same lines in another file (e.g. a re-published hour): nothing new either.
    const copy = await importFile(deps(), localFileSource(writeFile(ndjson(evs), '.json')), ALL);
    expect(copy).toMatchObject({ outcome: 'completed', counts: { kept: 15, created: 0 } });
    expect(await count()).toBe(before);
  });

  it('counts malformed lines, sets them aside and stores every good event around them', async () => {
    const good = events(10);
    const noActor = pushEvent({ id: idSeq++ }) as Partial<GitHubEvent>;
    delete noActor.actor;
    const nul = pushEvent({ id: idSeq++, payload: { ref: 'refs/heads/a\u0000b' } });
    const badTime = pushEvent({ id: idSeq++, created_at: 'yesterday' });
    const lines: (GitHubEvent | string)[] = [
      good[0]!,
      'this is not json',
      good[1]!,
      '{"id":"1","type":"PushEvent","actor":', // a truncated push
      JSON.stringify(noActor),
      good[2]!,
      JSON.stringify(nul),
      JSON.stringify(badTime),
      '',
      '[1,2,3]',
      ...good.slice(3),
    ];
    const { logger, lines: logged } = memoryLogger('warn');
    const file = writeFile(gzipLines(lines));
    const r = await importFile(deps(logger), localFileSource(file), ALL);
    expect(r).toMatchObject({
      outcome: 'completed',
      counts: { events: 10, pushes: 5, kept: 5, created: 5, malformed: 6 },
    });
    expect((await held(pushesOf(good).map((e) => e.id))).length).toBe(5);
    expect(await held([String(noActor.id), nul.id, badTime.id])).toEqual([]);
    // Rejected (rejected_events), once each, in the chunk's transaction (ADR 0020).
    const aside = await t.db
      .selectFrom('rejected_events')
      .select(['event_id', 'event_type', 'reason', 'message', 'source_id', 'run_id', 'seen_count'])
      .where('message', 'like', `${file}%`)
      .orderBy('id')
      .execute();
    expect(aside.map((a) => a.reason).sort()).toEqual(
      [
        'malformed', // not JSON
        'malformed', // a truncated push
        'malformed', // no actor
        'invalid_text', // NUL in the ref (a key: refused, never altered)
        'bad_timestamp',
        'malformed', // an array, not an event
      ].sort(),
    );
    expect(aside.find((a) => a.event_id === String(noActor.id))).toMatchObject({
      event_type: 'PushEvent',
      reason: 'malformed',
      source_id: null,
      run_id: null,
      seen_count: 1,
    });
    expect(aside.find((a) => a.event_id === nul.id)).toMatchObject({ reason: 'invalid_text' });
    expect(aside.some((a) => / line 2: not a JSON object: this is not json$/.test(a.message))).toBe(
      true,
    );
    // The first five are logged one by one (event.rejected); the rest only counted.
    const logged5 = logged.map((l) => JSON.parse(l)).filter((l) => l.event === 'event.rejected');
    expect(logged5).toHaveLength(5);
    // Imported again (--force): the same lines are the same events, seen once more.
    await importFile(deps(), localFileSource(file), ALL, { force: true });
    const again = await t.db
      .selectFrom('rejected_events')
      .select(['seen_count'])
      .where('message', 'like', `${file}%`)
      .execute();
    expect(again.map((a) => a.seen_count)).toEqual([2, 2, 2, 2, 2, 2]);
  });

  it('isolates a push the database refuses (one bad value never costs its chunk)', async () => {
    const evs = pushesOf(events(12));
    // Something the rules did not foresee, stood in for by a constraint of this test's
    // database: the chunk is halved until the refused push is found.
    const poison = pushEvent({ id: idSeq++, payload: { ref: 'refs/heads/refused-by-db' } });
    await sql`ALTER TABLE push_events ADD CONSTRAINT test_refuse CHECK (ref <> 'refs/heads/refused-by-db')`.execute(
      t.db,
    );
    try {
      const file = writeFile(gzipLines([...evs.slice(0, 3), poison, ...evs.slice(3)]));
      const r = await importFile(deps(), localFileSource(file), ALL, { chunkRows: 4 });
      expect(r).toMatchObject({
        outcome: 'completed',
        counts: { pushes: 7, kept: 6, created: 6, malformed: 1 },
      });
      expect(await held([poison.id])).toEqual([]);
      expect((await held(evs.map((e) => e.id))).length).toBe(6);
      const aside = await t.db
        .selectFrom('rejected_events')
        .select(['event_id', 'reason', 'message'])
        .where('event_id', '=', poison.id)
        .executeTakeFirstOrThrow();
      expect(aside).toMatchObject({ reason: 'store_failed' });
      expect(aside.message).toMatch(/the database refused it: .*test_refuse/);
    } finally {
      await sql`ALTER TABLE push_events DROP CONSTRAINT test_refuse`.execute(t.db);
    }
  });

  it('merges with pushes already held: a webhook copy gets its event id, a polled one is left alone', async () => {
    const [a, b, c] = pushesOf(events(6)) as [GitHubEvent, GitHubEvent, GitHubEvent];
    const mapped = (e: GitHubEvent) =>
      mapPushEvent(e as unknown as Record<string, unknown>, e.id).push;
    const asWebhook = { ...mapped(a), id: null };
    await t.db.transaction().execute(async (trx) => {
      await storePushes(trx, [asWebhook], { origin: 'webhook' });
      await storePushes(trx, [mapped(b)], { origin: 'poll' });
    });
    const r = await importFile(deps(), localFileSource(writeFile(gzipLines([a, b, c]))), ALL);
    expect(r.counts).toMatchObject({ kept: 3, created: 1 });
    expect(await held([a.id, b.id, c.id])).toEqual([
      { id: a.id, origin: 'webhook' },
      { id: b.id, origin: 'poll' },
      { id: c.id, origin: 'archive' },
    ]);
  });

  it('never renames an actor or repository we hold (the archive is history), but adds missing ones', async () => {
    const [now] = pushesOf(events(2)) as [GitHubEvent];
    await t.db.transaction().execute((trx) =>
      storePushes(trx, [mapPushEvent(now as unknown as Record<string, unknown>, now.id).push], {
        origin: 'poll',
      }),
    );
    const old = pushEvent({
      id: idSeq++,
      actor: { id: now.actor.id, login: 'old-login' },
      repo: { id: now.repo.id, name: 'old-owner/old-name' },
      created_at: '2026-11-01T00:00:00Z',
    });
    const fresh = pushEvent({ id: idSeq++ });
    const r = await importFile(deps(), localFileSource(writeFile(gzipLines([old, fresh]))), ALL);
    expect(r).toMatchObject({ counts: { created: 2 }, newActors: 1, newRepositories: 1 });
    const actor = await t.db
      .selectFrom('actors')
      .select('login')
      .where('id', '=', String(now.actor.id))
      .executeTakeFirstOrThrow();
    expect(actor.login).toBe(now.actor.login);
  });

  it('keeps only the events of a source scope and of a window', async () => {
    const repo = { id: 4_242_001, name: 'Scope-Org/Scoped' };
    const mine = [
      pushEvent({ id: idSeq++, repo, created_at: '2026-11-20T10:10:00Z' }),
      pushEvent({ id: idSeq++, repo, created_at: '2026-11-20T10:20:00Z' }),
      pushEvent({ id: idSeq++, repo, created_at: '2026-11-20T11:30:00Z' }), // outside the window
    ];
    const theirs = pushesOf(events(8));
    const file = writeFile(gzipLines([...theirs.slice(0, 2), ...mine, ...theirs.slice(2)]));
    const r = await importFile(
      deps(),
      localFileSource(file),
      {
        scope: 'source:1',
        sourceId: null,
        gapId: null,
        inScope: scopeOf({ kind: 'repo', target: 'scope-org/scoped' }),
        window: { from: new Date('2026-11-20T10:00:00Z'), to: new Date('2026-11-20T11:00:00Z') },
      },
      {},
    );
    expect(r.counts).toMatchObject({ pushes: 7, kept: 2, created: 2 });
    expect((await held(mine.map((e) => e.id))).map((h) => h.id)).toEqual([
      mine[0]!.id,
      mine[1]!.id,
    ]);
    expect(await held(theirs.map((e) => e.id))).toEqual([]);
  });

  it('reads hours from the archive over HTTP and never spends GitHub budget', async () => {
    const hour = parseHour('2026-11-20-10')!;
    const evs = events(20, hour.start);
    archive.setHour(hour.name, evs);
    const r = await importFile(deps(), archiveHourSource(archive.url, hour), ALL);
    expect(r).toMatchObject({ outcome: 'completed', file: hour.name, counts: { created: 10 } });
    expect(archive.requests.at(-1)).toMatchObject({ path: '/2026-11-20-10.json.gz', status: 200 });
    const ledger = await sql<{ n: string }>`SELECT count(*) AS n FROM github_requests`.execute(
      t.db,
    );
    expect(Number(ledger.rows[0]!.n)).toBe(0);
  });

  it('reports a missing hour (404) and an unavailable archive (503) without storing anything', async () => {
    const missing = await importFile(
      deps(),
      archiveHourSource(archive.url, parseHour('2020-01-01-0')!),
      ALL,
    );
    expect(missing).toMatchObject({
      outcome: 'failed',
      error: { code: 'ARCHIVE_HOUR_MISSING' },
    });
    expect(await checkpoint('2020-01-01-0')).toMatchObject({ state: 'missing', lines_done: '0' });

    const hour = parseHour('2026-11-20-11')!;
    archive.setHour(hour.name, events(4, hour.start));
    archive.fail(hour.name, { status: 503 });
    const down = await importFile(deps(), archiveHourSource(archive.url, hour), ALL);
    expect(down).toMatchObject({ outcome: 'failed', error: { code: 'ARCHIVE_UNAVAILABLE' } });
    expect(down.error?.message).toMatch(/503/);
    const up = await importFile(deps(), archiveHourSource(archive.url, hour), ALL);
    expect(up).toMatchObject({ outcome: 'completed', counts: { created: 2 } });
  });

  it('keeps what a truncated gzip held, and resumes after it when the whole file appears', async () => {
    const hour = parseHour('2026-11-20-12')!;
    const evs = events(3000, hour.start);
    archive.setFile(hour.name, truncatedGzip(evs, 0.5));
    const cut = await importFile(deps(), archiveHourSource(archive.url, hour), ALL, {
      chunkRows: 100,
    });
    expect(cut).toMatchObject({ outcome: 'failed', error: { code: 'ARCHIVE_TRUNCATED' } });
    expect(cut.counts.created).toBeGreaterThan(100);
    expect(cut.counts.created).toBeLessThan(1500);
    const cp = await checkpoint(hour.name);
    expect(cp).toMatchObject({ state: 'failed', pushes_created: String(cut.counts.created) });
    expect(Number(cp!.lines_done)).toBeGreaterThan(0);

    // The archive serves the whole file now (its size changed, so it is read from the start).
    archive.setHour(hour.name, evs);
    const whole = await importFile(deps(), archiveHourSource(archive.url, hour), ALL, {
      chunkRows: 100,
    });
    expect(whole).toMatchObject({ outcome: 'completed' });
    expect(cut.counts.created + whole.counts.created).toBe(1500);
    expect((await held(pushesOf(evs).map((e) => e.id))).length).toBe(1500);
    expect(await checkpoint(hour.name)).toMatchObject({
      state: 'completed',
      pushes_created: '1500',
    });
  });

  it('treats a download cut mid-body as truncated and resumes from its checkpoint', async () => {
    const hour = parseHour('2026-11-20-13')!;
    const evs = events(4000, hour.start);
    archive.setHour(hour.name, evs);
    const body = gzipLines(evs);
    archive.fail(hour.name, {
      cutAfterBytes: Math.floor(body.length / 2),
      // Cut once a chunk of the first half is committed: on a loaded machine the whole first
      // half can arrive before the first commit, and the failure would then leave nothing
      // to resume from (what this test is about).
      cutWhen: () =>
        waitFor(async () => Number((await checkpoint(hour.name))?.lines_done ?? 0) > 0, {
          timeoutMs: 60_000,
          what: 'a chunk of the first half committed',
        }),
    });
    const cut = await importFile(deps(), archiveHourSource(archive.url, hour), ALL, {
      chunkRows: 100,
    });
    expect(cut).toMatchObject({ outcome: 'failed', error: { code: 'ARCHIVE_TRUNCATED' } });
    const done = Number((await checkpoint(hour.name))!.lines_done);
    expect(done).toBeGreaterThan(0);
    const resumed = await importFile(deps(), archiveHourSource(archive.url, hour), ALL, {
      chunkRows: 100,
    });
    expect(resumed).toMatchObject({ outcome: 'completed', resumedAt: done });
    expect(cut.counts.created + resumed.counts.created).toBe(2000);
    expect((await held(pushesOf(evs).map((e) => e.id))).length).toBe(2000);
  });

  it('hands no session back to the pool with a statement still running when a chunk fails', async () => {
    // Chunk 1's merge fails (not for a row's content: the import stops) while chunk 2's
    // actors and repositories are being inserted on the second session, made slow here.
    const busyAtRelease: number[] = [];
    const pool = {
      connect: async () => {
        const client = await t.pool.connect();
        const query = client.query.bind(client) as (...a: unknown[]) => unknown;
        const release = client.release.bind(client);
        let running = 0;
        Object.assign(client, {
          query: (...args: unknown[]) => {
            const r = query(...args);
            if (r instanceof Promise) {
              running++;
              r.then(
                () => running--,
                () => running--,
              );
            }
            return r;
          },
          release: (err?: Error | boolean) => {
            busyAtRelease.push(running);
            release(err);
          },
        });
        return client;
      },
    } as unknown as pg.Pool;
    await sql`
      CREATE FUNCTION test_slow() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN PERFORM pg_sleep(0.3); RETURN NULL; END $$;
      CREATE FUNCTION test_fail() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN RAISE EXCEPTION 'test: merge fails'; END $$;
      CREATE TRIGGER test_slow AFTER INSERT ON actors EXECUTE FUNCTION test_slow();
      CREATE TRIGGER test_fail BEFORE INSERT ON push_events EXECUTE FUNCTION test_fail();
    `.execute(t.db);
    try {
      const file = writeFile(gzipLines(pushesOf(events(16))));
      await expect(
        importFile({ ...deps(), pool }, localFileSource(file), ALL, { chunkRows: 4 }),
      ).rejects.toThrow('test: merge fails');
      expect(busyAtRelease).toEqual([0, 0]);
    } finally {
      await sql`
        DROP TRIGGER test_slow ON actors;
        DROP TRIGGER test_fail ON push_events;
        DROP FUNCTION test_slow();
        DROP FUNCTION test_fail();
      `.execute(t.db);
    }
  });

  it('lets one process import a file at a time: the other reports busy or waits', async () => {
    const file = writeFile(gzipLines(events(3000)));
    const [a, b] = await Promise.all([
      importFile(deps(), localFileSource(file), ALL, { chunkRows: 50 }),
      importFile(deps(), localFileSource(file), ALL, { chunkRows: 50 }),
    ]);
    expect([a.outcome, b.outcome].sort()).toEqual(['busy', 'completed']);
    const waited = await Promise.all([
      importFile(deps(), localFileSource(file), ALL, { force: true, wait: true, chunkRows: 50 }),
      importFile(deps(), localFileSource(file), ALL, { wait: true }),
    ]);
    expect(waited.map((w) => w.outcome).sort()).toEqual(['already_imported', 'completed']);
  });

  it('reads plain NDJSON as well as gzip, whatever the file is called', async () => {
    const evs = [otherEvent('WatchEvent', { id: idSeq++ }), pushEvent({ id: idSeq++ })];
    const r = await importFile(deps(), localFileSource(writeFile(ndjson(evs), '.gz')), ALL);
    expect(r).toMatchObject({ outcome: 'completed', counts: { events: 2, created: 1 } });
  });
});
