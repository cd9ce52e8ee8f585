import { randomBytes } from 'node:crypto';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { archiveHourSource } from '../../src/backfill/archive.ts';
import { fillGap, fillGaps } from '../../src/backfill/fill.ts';
import { importFile } from '../../src/backfill/import.ts';
import { fixedClock } from '../../src/platform/clock.ts';
import type { Logger } from '../../src/platform/log.ts';
import { gapHours, hourOf, parseHour } from '../../src/store/archive-hours.ts';
import { addSource } from '../../src/store/sources.ts';
import { type ArchiveServer, gzipLines, startArchiveServer } from '../support/archive-server.ts';
import { useTestDatabase } from '../support/db.ts';
import { memoryLogger, testConfig } from '../support/github-client.ts';
import { type GitHubEvent, pushEvent } from '../support/github-factories.ts';

/**
 * Gap fills from two mirrors (docs/mirrors.md): two local archives holding
 * different subsets of the same hours. Every push either holds is stored once, an hour one
 * lacks is read from the other, a mirror that fails or stalls does not hold the gap, and
 * what a mirror publishes later is counted on the same gap.
 */

const t = useTestDatabase();
let a: ArchiveServer;
let b: ArchiveServer;

beforeAll(async () => {
  a = await startArchiveServer();
  b = await startArchiveServer();
});
afterAll(async () => {
  await a.close();
  await b.close();
});

const MIN = 60_000;
const HOUR = 60 * MIN;

function deps(o: { logger?: Logger; now: Date; env?: Record<string, string> }) {
  return {
    config: testConfig(t, {
      apiUrl: 'http://127.0.0.1:9',
      env: { GHARCHIVE_URL: `${a.url},${b.url}`, ...o.env },
    }),
    db: t.db,
    pool: t.pool,
    logger: o.logger ?? memoryLogger('silent').logger,
    workerId: 'test-host:1',
    clock: fixedClock(o.now),
  };
}

let seq = 0;
/**
 * A repo source with a recorded gap of 30 minutes some hours ago (the clock of the fill:
 * the real time, so backfill_files' own timestamps and the clock agree), 40 pushes in it.
 */
async function gapWithPushes(n = 40) {
  seq++;
  const repo = { id: 6_300_000 + seq, name: `mirror-owner-${seq}/repo` };
  const { source } = await addSource(t.db, { kind: 'repo', target: repo.name }, 'live');
  const hourStart = hourOf(new Date(Date.now() - (6 + seq * 4) * HOUR)).start.getTime();
  const from = new Date(hourStart + 10 * MIN);
  const to = new Date(hourStart + 40 * MIN);
  const gap = await t.db
    .insertInto('gaps')
    .values({ source_id: source.id, from_at: from, to_at: to, next_attempt_at: from })
    .returningAll()
    .executeTakeFirstOrThrow();
  let id = 73_000_000_000 + seq * 10_000;
  const pushes = Array.from({ length: n }, (_, i) =>
    pushEvent({ id: id++, repo, created_at: new Date(from.getTime() + i * 30_000) }),
  );
  const hours = gapHours(gap).map((h) => h.name);
  return { gap, gapId: Number(gap.id), repo, pushes, hours, pushHour: hourOf(from).name };
}

/** Every hour of the gap on `server`: the given pushes in their hour, the others empty. */
function publish(server: ArchiveServer, hours: string[], pushHour: string, pushes: GitHubEvent[]) {
  for (const h of hours) server.setHour(h, h === pushHour ? pushes : []);
}

async function storedIds(repoId: number): Promise<string[]> {
  const r = await sql<{ id: string; n: string }>`
    SELECT id::text AS id FROM push_events WHERE repository_id = ${repoId} ORDER BY id`.execute(
    t.db,
  );
  return r.rows.map((x) => x.id);
}

const idsOf = (evs: GitHubEvent[]) => evs.map((e) => String(e.id)).sort();

async function gapRow(id: number) {
  return t.db.selectFrom('gaps').selectAll().where('id', '=', String(id)).executeTakeFirstOrThrow();
}

describe('a gap filled from two mirrors', () => {
  it('stores the union of what both hold, each push once, and records what each added', async () => {
    const s = await gapWithPushes(40);
    // A holds the first 30, B the last 25: 15 in common, 40 in all.
    publish(a, s.hours, s.pushHour, s.pushes.slice(0, 30));
    publish(b, s.hours, s.pushHour, s.pushes.slice(15));
    const r = await fillGap(deps({ now: new Date() }), s.gapId);
    expect(r.outcome).toBe('filled');
    expect(await storedIds(s.repo.id)).toEqual(idsOf(s.pushes));
    expect(r.eventsRecovered).toBe(40);
    expect((await gapRow(s.gapId)).events_recovered).toBe(40);
    // Per mirror and hour: every hour imported from both; A added 30, B the 10 A lacked.
    const added = (m: string) =>
      r.mirrors.filter((x) => x.mirror === m).reduce((n, x) => n + x.pushesAdded, 0);
    expect(r.mirrors).toHaveLength(s.hours.length * 2);
    expect(r.mirrors.every((x) => x.state === 'imported')).toBe(true);
    expect(added(a.url)).toBe(30);
    expect(added(b.url)).toBe(10);
    // A second pass reads nothing again: every (hour, mirror) checkpoint is complete.
    const before = a.requests.length + b.requests.length;
    expect(await fillGap(deps({ now: new Date() }), s.gapId)).toMatchObject({
      outcome: 'not_open',
    });
    expect(a.requests.length + b.requests.length).toBe(before);
  });

  it('takes an hour one mirror lacks from the other, then counts what the first adds later', async () => {
    const { logger, lines } = memoryLogger('info');
    const s = await gapWithPushes(20);
    // A lacks the pushes' hour (404) but has the others; B has every hour, 12 of the pushes.
    publish(
      a,
      s.hours.filter((h) => h !== s.pushHour),
      s.pushHour,
      [],
    );
    a.removeHour(s.pushHour);
    publish(b, s.hours, s.pushHour, s.pushes.slice(0, 12));
    const now = new Date();
    const r = await fillGap(deps({ now, logger }), s.gapId);
    expect(r.outcome).toBe('filled');
    expect(await storedIds(s.repo.id)).toEqual(idsOf(s.pushes.slice(0, 12)));
    expect(r.mirrors.find((m) => m.mirror === a.url && m.hour === s.pushHour)).toMatchObject({
      state: 'missing',
      pushesAdded: 0,
    });

    // Before its backoff is over, the mirror is not asked again.
    const asked = () => a.requests.filter((q) => q.path === `/${s.pushHour}.json.gz`).length;
    const first = asked();
    await fillGaps(deps({ now, logger }));
    expect(asked()).toBe(first);

    // A publishes the hour late, with all 20: the 8 B lacked are stored, counted on the gap.
    a.setHour(s.pushHour, s.pushes);
    const late = await fillGaps(deps({ now: new Date(Date.now() + 2 * MIN), logger }));
    const mine = late.find((x) => x.gapId === s.gapId);
    expect(mine).toMatchObject({ outcome: 'mirror_retried', eventsRecovered: 20 });
    expect(await storedIds(s.repo.id)).toEqual(idsOf(s.pushes));
    expect(await gapRow(s.gapId)).toMatchObject({ state: 'filled', events_recovered: 20 });
    expect(mine!.mirrors.find((m) => m.mirror === a.url && m.hour === s.pushHour)).toMatchObject({
      state: 'imported',
      pushesAdded: 8,
    });
    const added = lines.map((l) => JSON.parse(l)).find((l) => l.event === 'gap.mirror_added');
    expect(added).toMatchObject({ gap_id: s.gapId, mirror: a.url, pushes_added: 8 });

    // Past the retry window (48 h after the hour) nobody asks again.
    const count = asked();
    await fillGaps(deps({ now: new Date(Date.now() + 50 * HOUR) }));
    expect(asked()).toBe(count);
  });

  it('fills the gap from the other mirror while one answers 5xx, and retries that one later', async () => {
    const s = await gapWithPushes(10);
    publish(a, s.hours, s.pushHour, s.pushes);
    publish(b, s.hours, s.pushHour, s.pushes);
    a.fail(s.pushHour, { status: 503, times: 1 });
    const r = await fillGap(deps({ now: new Date() }), s.gapId);
    expect(r.outcome).toBe('filled');
    expect(await storedIds(s.repo.id)).toEqual(idsOf(s.pushes));
    expect(r.mirrors.find((m) => m.mirror === a.url && m.hour === s.pushHour)).toMatchObject({
      state: 'failed',
    });
    // Later, A answers: nothing new (B had it all), the record says imported.
    const late = await fillGaps(deps({ now: new Date(Date.now() + 2 * MIN) }));
    expect(late.find((x) => x.gapId === s.gapId)).toMatchObject({
      outcome: 'mirror_retried',
      eventsRecovered: 10,
    });
    expect(await storedIds(s.repo.id)).toEqual(idsOf(s.pushes));
  });

  it('keeps the gap open while no mirror has an hour', async () => {
    const s = await gapWithPushes(5);
    publish(a, s.hours, s.pushHour, s.pushes);
    publish(b, s.hours, s.pushHour, s.pushes);
    a.removeHour(s.pushHour);
    b.removeHour(s.pushHour);
    const r = await fillGap(deps({ now: new Date() }), s.gapId);
    expect(r.outcome).toBe('retry');
    expect(r.error).toMatch(/ARCHIVE_HOUR_MISSING|is not on the archive/);
    expect(await gapRow(s.gapId)).toMatchObject({ state: 'open' });
  });
});

describe('bin/backfill HOUR from several mirrors: a checkpoint per mirror', () => {
  const ALL = { scope: 'all', sourceId: null, gapId: null };
  const importDeps = () => ({
    pool: t.pool,
    logger: memoryLogger('silent').logger,
    workerId: 'test-host:1',
  });
  async function checkpointOf(mirror: string, hour: string) {
    return t.db
      .selectFrom('backfill_files')
      .selectAll()
      .where('file', '=', hour)
      .where('scope', '=', 'all')
      .where('mirror', '=', mirror)
      .executeTakeFirst();
  }

  it('resumes an abandoned download on its own mirror, and the union is stored once', async () => {
    const hour = parseHour('2026-10-20-13')!;
    let id = 76_000_000_000;
    const evs = Array.from({ length: 3000 }, (_, i) =>
      pushEvent({ id: id++, created_at: new Date(hour.start.getTime() + i * 1000) }),
    );
    // A holds the first 2,000, B the last 2,000: 1,000 in common, 3,000 in all.
    a.setHour(hour.name, evs.slice(0, 2000));
    b.setHour(hour.name, evs.slice(1000));
    const first = await importFile(importDeps(), archiveHourSource(a.url, hour), ALL);
    expect(first).toMatchObject({ outcome: 'completed', counts: { created: 2000 } });
    // B sends half its file, then nothing: the rate check abandons it once the importer has
    // taken in what came (never while the importer holds the stream back), so its
    // checkpoint keeps those lines; A's is untouched.
    const body = gzipLines(evs.slice(1000));
    b.fail(hour.name, { trickle: { head: Math.floor(body.length / 2), bytes: 0, everyMs: 50 } });
    const stalling = { minBytesPerSecond: 1024, rateWindowMs: 400 };
    const cut = await importFile(importDeps(), archiveHourSource(b.url, hour, stalling), ALL, {
      chunkRows: 100,
    });
    expect(cut).toMatchObject({ outcome: 'failed', error: { code: 'ARCHIVE_UNAVAILABLE' } });
    const done = Number((await checkpointOf(b.url, hour.name))!.lines_done);
    expect(done).toBeGreaterThan(0);
    expect(await checkpointOf(a.url, hour.name)).toMatchObject({ state: 'completed' });
    const resumed = await importFile(importDeps(), archiveHourSource(b.url, hour), ALL, {
      chunkRows: 100,
    });
    expect(resumed).toMatchObject({ outcome: 'completed', resumedAt: done });
    expect(cut.counts.created + resumed.counts.created).toBe(1000);
    const n = await sql<{ n: string }>`
      SELECT count(*) AS n FROM push_events WHERE id BETWEEN ${evs[0]!.id} AND ${evs.at(-1)!.id}`.execute(
      t.db,
    );
    expect(Number(n.rows[0]!.n)).toBe(3000);
    // A second import from either mirror adds nothing and reads nothing.
    for (const m of [a, b]) {
      const again = await importFile(importDeps(), archiveHourSource(m.url, hour), ALL);
      expect(again).toMatchObject({ outcome: 'already_imported' });
    }
  });
});

describe('downloads with a minimum rate and a deadline', () => {
  it('abandons a mirror that stalls after 64 KB and fills the gap from the other', async () => {
    const s = await gapWithPushes(30);
    // Enough pushes of padding that the hour is well over 64 KB gzipped.
    const padding = Array.from({ length: 3000 }, (_, i) =>
      pushEvent({
        id: 74_000_000_000 + seq * 10_000 + i,
        created_at: new Date(s.gap.from_at.getTime() + 1000),
        payload: { ref: `refs/heads/${Math.random().toString(36).repeat(8)}` },
      }),
    );
    publish(a, s.hours, s.pushHour, [...padding, ...s.pushes]);
    publish(b, s.hours, s.pushHour, s.pushes);
    // 64 KB, then one byte every 50 ms: an idle timeout never fires.
    a.fail(s.pushHour, { trickle: { head: 65_536, bytes: 1, everyMs: 50 } });
    const r = await fillGap(
      deps({
        now: new Date(),
        env: { ARCHIVE_MIN_RATE: '1024', ARCHIVE_RATE_WINDOW: '1s', ARCHIVE_DEADLINE: '1h' },
      }),
      s.gapId,
    );
    expect(r.outcome).toBe('filled');
    const stalled = r.hours.find((h) => h.mirror === a.url && h.hour === s.pushHour)!;
    expect(stalled.outcome).toBe('failed');
    expect(stalled.error).toMatch(/below the minimum of 1024 bytes\/s/);
    expect(await storedIds(s.repo.id)).toEqual(idsOf(s.pushes));
  });

  it('never blames the mirror for time the reader holds the stream back', async () => {
    // A fast mirror and a reader that does not read for a while (the database busy): the
    // rate check sees the stream held back and lets it be; every byte then arrives.
    const hour = parseHour('2026-10-21-5')!;
    const body = randomBytes(4 * 1024 * 1024);
    a.setFile(hour.name, body);
    const opened = await archiveHourSource(a.url, hour, {
      minBytesPerSecond: 10 * 1024 * 1024,
      rateWindowMs: 200,
      deadlineMs: 60_000,
    }).open();
    // Held back for three windows: only what fits in the buffers arrived meanwhile.
    await new Promise((resolve) => setTimeout(resolve, 600));
    let received = 0;
    for await (const chunk of opened.stream) received += (chunk as Buffer).length;
    expect(received).toBe(body.length);
  });

  it('abandons a download past its deadline however steadily it trickles', async () => {
    const s = await gapWithPushes(10);
    const padding = Array.from({ length: 2000 }, (_, i) =>
      pushEvent({
        id: 75_000_000_000 + seq * 10_000 + i,
        created_at: new Date(s.gap.from_at.getTime() + 1000),
        payload: { ref: `refs/heads/${Math.random().toString(36).repeat(8)}` },
      }),
    );
    publish(a, s.hours, s.pushHour, [...padding, ...s.pushes]);
    publish(b, s.hours, s.pushHour, s.pushes);
    // 2 KB every 20 ms (100 KB/s, far above the minimum rate), but the file takes longer
    // than the 1 s deadline.
    a.fail(s.pushHour, { trickle: { head: 1024, bytes: 2048, everyMs: 20 } });
    const r = await fillGap(
      deps({
        now: new Date(),
        env: { ARCHIVE_MIN_RATE: '1', ARCHIVE_RATE_WINDOW: '1s', ARCHIVE_DEADLINE: '1s' },
      }),
      s.gapId,
    );
    expect(r.outcome).toBe('filled');
    const slow = r.hours.find((h) => h.mirror === a.url && h.hour === s.pushHour)!;
    expect(slow.outcome).toBe('failed');
    expect(slow.error).toMatch(/not downloaded within 1000 ms/);
    expect(await storedIds(s.repo.id)).toEqual(idsOf(s.pushes));
  });
});
