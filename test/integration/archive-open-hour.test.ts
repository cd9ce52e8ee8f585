import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fillGap } from '../../src/backfill/fill.ts';
import type { Db } from '../../src/platform/db/pool.ts';
import { type ArchiveHour, hourEnd, hourOf } from '../../src/store/archive-hours.ts';
import { addSource } from '../../src/store/sources.ts';
import { type Child, killAll, spawnBin } from '../recovery/world.ts';
import {
  type ArchiveServer,
  gzipLines,
  hourOfEvents,
  startArchiveServer,
} from '../support/archive-server.ts';
import { type TestDatabase, useTestDatabase } from '../support/db.ts';
import { memoryLogger, testConfig } from '../support/github-client.ts';
import { createScratchDatabase, type ScratchDatabase } from '../support/scratch-db.ts';
import { waitFor } from '../support/wait.ts';
import { startTestWeb, type TestWeb } from '../support/web.ts';

/**
 * An hour is final only when it is (ADR 0185). Instance A imports a 20,000-push
 * hour with the real bin/backfill from a local GH Archive that holds the download part-way
 * (its first chunks committed) for as long as the test needs; instance B (a second database)
 * reads A's /archive as its mirror, with the real bin/backfill and with a gap fill:
 *
 * - while A's import runs, A answers the hour 503 with Retry-After, and B stores nothing
 *   and leaves its checkpoint `open`, not `completed`;
 * - after A's import is killed part-way, A serves what it holds marked `incomplete`, and B
 *   stores it but again does not take it as final;
 * - once A has the whole hour, B's next read completes it, and B holds every push.
 */

const a = useTestDatabase();
let b: ScratchDatabase;
let gh: ArchiveServer;
let web: TestWeb;
let dataDir: string;
const children: Child[] = [];

const PUSHES = 20_000;
/** Hours well past their settling time, one per scenario. */
const base = hourOf(new Date(Date.now() - 10 * 3_600_000)).start.getTime();
const hourAt = (k: number): ArchiveHour => hourOf(new Date(base + k * 3_600_000));

beforeAll(async () => {
  dataDir = mkdtempSync(path.join(tmpdir(), 'gpi-open-hour-'));
  gh = await startArchiveServer();
  web = await startTestWeb(a, { env: { DATA_DIR: dataDir } });
  b = await createScratchDatabase();
});
afterAll(async () => {
  await killAll(children);
  await web?.close();
  await gh?.close();
  await b?.drop();
  rmSync(dataDir, { recursive: true, force: true });
});

/** The hour's file on the stand-in GH Archive, held after ~40% of its bytes until `resume`. */
function publishHeld(hour: ArchiveHour, firstId: number): { resume: () => void } {
  const events = hourOfEvents(hour.start, PUSHES, { pushes: 'all', firstId });
  const body = gzipLines(events);
  gh.setFile(hour.name, body);
  let resume!: () => void;
  const resumed = new Promise<void>((r) => {
    resume = r;
  });
  gh.fail(hour.name, { pauseAfterBytes: Math.floor(body.length * 0.4), resumeWhen: () => resumed });
  return { resume };
}

function backfill(db: { url: string }, args: string[], mirror: string): Child {
  const child = spawnBin(
    'backfill',
    {
      DATABASE_URL: db.url,
      GHARCHIVE_URL: mirror,
      // The held download must not be abandoned as a stalling mirror meanwhile.
      ARCHIVE_MIN_RATE: '1',
      ARCHIVE_RATE_WINDOW: '1h',
      LOG_FORMAT: 'json',
    },
    args,
  );
  children.push(child);
  return child;
}

async function run(db: { url: string }, args: string[], mirror: string) {
  const child = backfill(db, args, mirror);
  const { code } = await child.exited;
  return { code, out: child.stdout.join(''), err: child.stderr.join('') };
}

async function checkpoint(db: Db, hour: ArchiveHour) {
  const r = await sql<{ state: string; pushes_created: string; error: string | null }>`
    SELECT state, pushes_created, error FROM backfill_files WHERE file = ${hour.name}`.execute(db);
  return r.rows[0] ?? null;
}

async function pushesIn(db: Db, hour: ArchiveHour): Promise<number> {
  const r = await sql<{ n: number }>`
    SELECT count(*)::int AS n FROM push_events
    WHERE created_at >= ${hour.start} AND created_at < ${hourEnd(hour)}`.execute(db);
  return r.rows[0]!.n;
}

async function get(hour: ArchiveHour, method = 'GET') {
  const res = await fetch(`${web.url}/archive/${hour.name}.json.gz`, { method });
  const body = Buffer.from(await res.arrayBuffer());
  return { status: res.status, headers: res.headers, body };
}

async function indexEntry(hour: ArchiveHour) {
  const res = await fetch(`${web.url}/archive/?hours=24`);
  const index = (await res.json()) as { hours: { hour: string; open_reasons: string[] }[] };
  return index.hours.find((h) => h.hour === hour.name);
}

/** A's import of `hour` running, its first chunks committed, the rest held back. */
async function importHeld(hour: ArchiveHour, firstId: number) {
  const held = publishHeld(hour, firstId);
  const child = backfill(a, [hour.name], gh.url);
  await waitFor(
    async () => {
      const c = await checkpoint(a.db, hour);
      return c?.state === 'running' && Number(c.pushes_created) >= 5_000;
    },
    { what: `A's import of ${hour.name} past its first chunk`, timeoutMs: 120_000 },
  );
  return { child, resume: held.resume };
}

describe("a peer reading an hour while this instance's bin/backfill imports it", () => {
  it('is answered 503 with Retry-After, and the peer keeps no copy as final', async () => {
    const hour = hourAt(0);
    const { child, resume } = await importHeld(hour, 91_000_000_000);
    const mirror = `${web.url}/archive`;

    const during = await get(hour);
    expect(during.status).toBe(503);
    expect(during.headers.get('retry-after')).toBe('60');
    expect(during.headers.get('archive-hour-open')).toBe('importing');
    expect((await get(hour, 'HEAD')).status).toBe(503);
    expect((await indexEntry(hour))?.open_reasons).toEqual(['importing']);

    const peer = await run(b, [hour.name, '--mirror', mirror], mirror);
    expect(peer.code, peer.err).toBe(1);
    expect(peer.out).toContain('still importing this hour');
    expect(await checkpoint(b.db, hour)).toMatchObject({ state: 'open', pushes_created: '0' });

    resume();
    expect((await child.exited).code).toBe(0);
    const after = await get(hour);
    expect(after.status).toBe(200);
    expect(after.headers.get('archive-hour-open')).toBeNull();
    expect((await indexEntry(hour))?.open_reasons).toEqual([]);

    const again = await run(b, [hour.name, '--mirror', mirror], mirror);
    expect(again.code, again.err).toBe(0);
    expect(await checkpoint(b.db, hour)).toMatchObject({ state: 'completed' });
    expect(await pushesIn(b.db, hour)).toBe(PUSHES);
    expect(await pushesIn(a.db, hour)).toBe(PUSHES);
  });

  it('serves an import killed part-way as incomplete; the peer stores it, re-reads it, and completes once it is whole', async () => {
    const hour = hourAt(1);
    const { child, resume } = await importHeld(hour, 92_000_000_000);
    child.process.kill('SIGKILL');
    await child.exited;
    resume();
    const held = await pushesIn(a.db, hour);
    expect(held).toBeGreaterThanOrEqual(5_000);
    expect(held).toBeLessThan(PUSHES);

    const mirror = `${web.url}/archive`;
    const partial = await get(hour);
    expect(partial.status).toBe(200);
    expect(partial.headers.get('archive-hour-open')).toBe('incomplete');
    const peer = await run(b, [hour.name, '--mirror', mirror], mirror);
    expect(peer.code, peer.err).toBe(1);
    expect(peer.out).toContain('still open');
    const kept = await checkpoint(b.db, hour);
    expect(kept?.state).toBe('open');
    expect(Number(kept?.pushes_created)).toBe(held);
    expect(await pushesIn(b.db, hour)).toBe(held);

    // A runs its import again: it resumes and completes the hour.
    const resumed = await run(a, [hour.name], gh.url);
    expect(resumed.code, resumed.err).toBe(0);
    expect(await pushesIn(a.db, hour)).toBe(PUSHES);
    expect((await get(hour)).headers.get('archive-hour-open')).toBeNull();

    const again = await run(b, [hour.name, '--mirror', mirror], mirror);
    expect(again.code, again.err).toBe(0);
    expect(await checkpoint(b.db, hour)).toMatchObject({
      state: 'completed',
      pushes_created: String(PUSHES),
    });
    expect(await pushesIn(b.db, hour)).toBe(PUSHES);
  });

  it("keeps the peer's gap open while the hour is being imported, and fills it once it is final", async () => {
    // The gap's hours are the one before its window to two after it: A holds those (empty)
    // completely, and imports the window's hour.
    const hour = hourAt(4);
    for (const k of [3, 5, 6]) gh.setHour(hourAt(k).name, []);
    const around = await run(
      a,
      [3, 5, 6].map((k) => hourAt(k).name),
      gh.url,
    );
    expect(around.code, around.err).toBe(0);
    const { child, resume } = await importHeld(hour, 93_000_000_000);
    const mirror = `${web.url}/archive`;
    const { source } = await addSource(b.db, { kind: 'public' }, 'live');
    const gap = await b.db
      .insertInto('gaps')
      .values({
        source_id: source.id,
        from_at: new Date(hour.start.getTime() + 60_000),
        to_at: new Date(hour.start.getTime() + 59 * 60_000),
        next_attempt_at: new Date(),
      })
      .returningAll()
      .executeTakeFirstOrThrow();
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
    const during = await fillGap(deps, Number(gap.id));
    expect(during.outcome).toBe('retry');
    expect(during.mirrors.find((m) => m.hour === hour.name)?.state).toBe('open');

    resume();
    expect((await child.exited).code).toBe(0);
    const after = await fillGap(deps, Number(gap.id));
    expect(after.outcome, after.error ?? '').toBe('filled');
    expect(after.mirrors.find((m) => m.hour === hour.name)?.state).toBe('imported');
    // The gap's window: every push but those of its first and last minute.
    const inWindow = await sql<{ n: number }>`
      SELECT count(*)::int AS n FROM push_events
      WHERE created_at >= ${gap.from_at} AND created_at <= ${gap.to_at}`.execute(a.db);
    const here = await sql<{ n: number }>`
      SELECT count(*)::int AS n FROM push_events
      WHERE created_at >= ${gap.from_at} AND created_at <= ${gap.to_at}`.execute(b.db);
    expect(here.rows[0]!.n).toBe(inWindow.rows[0]!.n);
    expect(here.rows[0]!.n).toBeGreaterThan(PUSHES * 0.9);
  });
});
