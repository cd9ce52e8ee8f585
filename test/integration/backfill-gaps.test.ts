import { sql } from 'kysely';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { fillGap, fillGaps } from '../../src/backfill/fill.ts';
import type { GitHubClient } from '../../src/budget/client-types.ts';
import { handleBackfill } from '../../src/jobs/handlers.ts';
import { fixedClock } from '../../src/platform/clock.ts';
import type { Gap } from '../../src/platform/db/schema.ts';
import type { Logger } from '../../src/platform/log.ts';
import { pollSource } from '../../src/poll/poll-source.ts';
import { hourOf } from '../../src/store/archive-hours.ts';
import { addSource } from '../../src/store/sources.ts';
import { type ArchiveServer, startArchiveServer } from '../support/archive-server.ts';
import { useTestDatabase } from '../support/db.ts';
import { type FakeGitHub, startFakeGitHub } from '../support/fake-github.ts';
import { clientFactory, memoryLogger, testConfig } from '../support/github-client.ts';
import { type GitHubEvent, otherEvent, pushEvent } from '../support/github-factories.ts';

/**
 * The gap lifecycle against a local GH Archive (test/support/archive-server.ts): a real
 * poll overflows its feed and records a gap; the fill reads the archive's hours around it
 * and stores exactly the pushes the feed dropped. open → filled, open → unavailable, and
 * the retries in between.
 */

const t = useTestDatabase();
const clients = clientFactory(t);
let fake: FakeGitHub;
let archive: ArchiveServer;
let github: GitHubClient;

beforeAll(async () => {
  fake = await startFakeGitHub();
  archive = await startArchiveServer();
});
beforeEach(() => {
  fake.reset();
  github = clients.make({ apiUrl: fake.url });
});
afterEach(async () => {
  await clients.closeAll();
});
afterAll(async () => {
  await fake.close();
  await archive.close();
});

const MIN = 60_000;

function deps(o: { logger?: Logger; clock?: ReturnType<typeof fixedClock> } = {}) {
  return {
    config: testConfig(t, { apiUrl: fake.url, env: { GHARCHIVE_URL: archive.url } }),
    db: t.db,
    pool: t.pool,
    github,
    logger: o.logger ?? memoryLogger('silent').logger,
    workerId: 'test-host:1',
    ...(o.clock ? { clock: o.clock } : {}),
  };
}

let seq = 0;
interface Scenario {
  sourceId: number;
  repo: { id: number; name: string };
  /** The 10 pushes of the first poll, and the 320 that came after (oldest first). */
  first: GitHubEvent[];
  later: GitHubEvent[];
  /** The 20 oldest of `later`: out of the feed's 300-event window before the second poll. */
  dropped: GitHubEvent[];
  gap: Gap;
}

/**
 * A repo source polled once (10 pushes), then 320 more arrive before the next poll: the
 * feed serves only the newest 300, so the run reads three full pages without reaching
 * what the source held, and 20 pushes are gone from the feed.
 */
async function overflowingSource(t0: Date, logger?: Logger): Promise<Scenario> {
  seq++;
  const repo = { id: 6_100_000 + seq, name: `gap-owner-${seq}/gap-repo` };
  const { source } = await addSource(t.db, { kind: 'repo', target: repo.name }, 'live');
  const sourceId = Number(source.id);
  const at = (ms: number) => new Date(t0.getTime() + ms);
  let id = 71_000_000_000 + seq * 10_000;
  const first = Array.from({ length: 10 }, (_, i) =>
    pushEvent({ id: id++, repo, created_at: at(i * MIN) }),
  );
  const later = Array.from({ length: 320 }, (_, i) =>
    pushEvent({ id: id++, repo, created_at: at(20 * MIN + i * 10_000) }),
  );
  const feed = `repo:${repo.name}`;
  // The polls happen soon after the pushes: their times are plausible (ADR 0061) whatever
  // the day this test runs.
  const clock = fixedClock(at(2 * 3_600_000));
  fake.addEvents(feed, first);
  expect(await pollSource(deps({ clock }), sourceId, { force: true })).toMatchObject({
    gap: false,
  });
  fake.addEvents(feed, later);
  const run = await pollSource(deps({ logger, clock }), sourceId, { force: true });
  expect(run).toMatchObject({ outcome: 'completed', gap: true, eventsCreated: 300 });
  const gap = await t.db
    .selectFrom('gaps')
    .selectAll()
    .where('run_id', '=', String(run.runId))
    .executeTakeFirstOrThrow();
  return { sourceId, repo, first, later, dropped: later.slice(0, 20), gap };
}

/** Files every event in the hour of its created_at, plus whatever else is given per hour. */
function publish(events: GitHubEvent[], extra: Record<string, GitHubEvent[]> = {}) {
  const hours = new Map<string, GitHubEvent[]>();
  for (const e of events) {
    const h = hourOf(new Date(e.created_at)).name;
    hours.set(h, [...(hours.get(h) ?? []), e]);
  }
  for (const [h, evs] of Object.entries(extra)) hours.set(h, [...(hours.get(h) ?? []), ...evs]);
  for (const [h, evs] of hours) archive.setHour(h, evs);
  return [...hours.keys()];
}

async function storedIds(repoId: number): Promise<string[]> {
  const r = await sql<{ id: string }>`
    SELECT id::text AS id FROM push_events WHERE repository_id = ${repoId} ORDER BY id`.execute(
    t.db,
  );
  return r.rows.map((x) => x.id);
}

async function gapRow(id: string | number) {
  return t.db.selectFrom('gaps').selectAll().where('id', '=', String(id)).executeTakeFirstOrThrow();
}

async function ledgerRows(): Promise<number> {
  const r = await sql<{ n: string }>`SELECT count(*) AS n FROM github_requests`.execute(t.db);
  return Number(r.rows[0]!.n);
}

const ids = (evs: GitHubEvent[]) => evs.map((e) => e.id).sort();

describe('a run that overflows its feed', () => {
  it('records its gap: from the newest push held before to the oldest the run read', async () => {
    const { logger, lines } = memoryLogger('info');
    const s = await overflowingSource(new Date('2026-11-20T10:00:00Z'), logger);
    expect(s.gap).toMatchObject({
      source_id: String(s.sourceId),
      state: 'open',
      events_recovered: 0,
      attempts: 0,
      last_error: null,
    });
    expect(s.gap.from_at).toEqual(new Date(s.first.at(-1)!.created_at));
    expect(s.gap.to_at).toEqual(new Date(s.later[20]!.created_at));
    // The fill waits until the last hour it reads (to_at + 2 h) is published (+15 min).
    expect(s.gap.next_attempt_at).toEqual(new Date('2026-11-20T13:15:00Z'));
    const recorded = lines.map((l) => JSON.parse(l)).filter((l) => l.event === 'gap.recorded');
    expect(recorded).toEqual([
      expect.objectContaining({
        level: 'warn',
        gap_id: Number(s.gap.id),
        source_id: s.sourceId,
        from_at: s.gap.from_at.toISOString(),
        to_at: s.gap.to_at.toISOString(),
      }),
    ]);
  });
});

describe('a source that held no push before its gap', () => {
  it('starts the window at its last poll − 6 h (the feed’s documented latency)', async () => {
    const repo = { id: 6_199_001, name: 'quiet-owner/quiet' };
    const { source } = await addSource(t.db, { kind: 'repo', target: repo.name }, 'live');
    const feed = `repo:${repo.name}`;
    fake.addEvents(
      feed,
      Array.from({ length: 5 }, () => otherEvent('WatchEvent', { repo })),
    );
    // The polls happen the day of the pushes (plausible times whatever the day this test runs).
    const clock = fixedClock('2026-11-20T20:00:00Z');
    await pollSource(deps({ clock }), Number(source.id), { force: true });
    const polled = (
      await t.db
        .selectFrom('event_sources')
        .select('last_polled_at')
        .where('id', '=', source.id)
        .executeTakeFirstOrThrow()
    ).last_polled_at!;
    fake.addEvents(
      feed,
      Array.from({ length: 320 }, (_, i) =>
        pushEvent({ repo, created_at: new Date(Date.parse('2026-11-20T18:00:00Z') + i * 1000) }),
      ),
    );
    clock.advance(60_000);
    const run = await pollSource(deps({ clock }), Number(source.id), { force: true });
    expect(run.gap).toBe(true);
    const gaps = await t.db
      .selectFrom('gaps')
      .selectAll()
      .where('run_id', '=', String(run.runId))
      .orderBy('from_at')
      .execute();
    // The poll happened "now" and the pushes are older: the window spans both, whichever way
    // round — cut into gaps of at most 2 days that follow one another (ADR 0061).
    const sixHoursBefore = new Date(polled.getTime() - 6 * 3_600_000);
    const oldestRead = new Date('2026-11-20T18:00:20Z');
    expect([gaps[0]!.from_at, gaps.at(-1)!.to_at]).toEqual(
      sixHoursBefore < oldestRead ? [sixHoursBefore, oldestRead] : [oldestRead, sixHoursBefore],
    );
    for (const [i, g] of gaps.entries()) {
      expect(g.state).toBe('open');
      expect(g.to_at.getTime() - g.from_at.getTime()).toBeLessThanOrEqual(2 * 86_400_000);
      if (i > 0) expect(g.from_at).toEqual(gaps[i - 1]!.to_at);
    }
  });
});

describe('filling a gap from the archive', () => {
  it('stores every push the feed dropped exactly once (open → filled), and nothing else', async () => {
    const t0 = new Date('2026-11-21T10:00:00Z');
    const s = await overflowingSource(t0);
    const before = new Date(t0.getTime() - 30 * MIN); // in the window's margin, before from_at
    const tooEarly = pushEvent({ id: 72_000_000_001, repo: s.repo, created_at: before });
    const otherRepo = Array.from({ length: 30 }, (_, i) =>
      pushEvent({ id: 72_000_000_100 + i, created_at: new Date(t0.getTime() + (25 + i) * MIN) }),
    );
    const noise = [otherEvent('WatchEvent', { repo: s.repo, created_at: t0 })];
    // GH Archive files by crawl time: one dropped push sits in the NEXT hour's file.
    const late = s.dropped[7]!;
    publish([...s.first, ...s.later.filter((e) => e !== late), tooEarly, ...otherRepo, ...noise], {
      '2026-11-21-11': [late],
      '2026-11-21-12': [],
      '2026-11-21-9': [],
    });
    const requestsBefore = await ledgerRows();
    const { logger, lines } = memoryLogger('info');

    const r = await fillGap(deps({ logger }), Number(s.gap.id));
    expect(r).toMatchObject({
      outcome: 'filled',
      eventsRecovered: 20,
      hours: [
        { hour: '2026-11-21-9', outcome: 'completed', created: 0 },
        { hour: '2026-11-21-10', outcome: 'completed', created: 19 },
        { hour: '2026-11-21-11', outcome: 'completed', created: 1 },
        { hour: '2026-11-21-12', outcome: 'completed', created: 0 },
      ],
    });
    expect(await storedIds(s.repo.id)).toEqual(ids([...s.first, ...s.later]));
    const row = await gapRow(s.gap.id);
    expect(row).toMatchObject({ state: 'filled', events_recovered: 20, attempts: 1 });
    expect(row.filled_at).not.toBeNull();
    // Recovered rows are the archive's, attributed to the source; the others untouched.
    const origins = await sql<{ origin: string; n: string }>`
      SELECT origin, count(*) AS n FROM push_events WHERE repository_id = ${s.repo.id}
      GROUP BY origin ORDER BY origin`.execute(t.db);
    expect(origins.rows).toEqual([
      { origin: 'archive', n: '20' },
      { origin: 'poll', n: '310' },
    ]);
    expect(await ledgerRows()).toBe(requestsBefore); // the archive is not GitHub's API
    expect(lines.map((l) => JSON.parse(l)).find((l) => l.event === 'gap.filled')).toMatchObject({
      gap_id: Number(s.gap.id),
      events_recovered: 20,
    });

    // Filled is final: a second pass reads nothing and stores nothing.
    const served = archive.requests.length;
    expect(await fillGap(deps(), Number(s.gap.id))).toMatchObject({ outcome: 'not_open' });
    expect(archive.requests.length).toBe(served);
    expect(await storedIds(s.repo.id)).toHaveLength(330);
  });

  it('waits until the last hour it needs is published, without asking the archive', async () => {
    const t0 = new Date('2026-11-22T10:00:00Z');
    const s = await overflowingSource(t0);
    const clock = fixedClock('2026-11-22T13:10:00Z'); // 12:00–13:00 is published at 13:15
    const served = archive.requests.length;
    const r = await fillGap(deps({ clock }), Number(s.gap.id));
    expect(r).toMatchObject({
      outcome: 'waiting',
      nextAttemptAt: new Date('2026-11-22T13:15:00Z'),
    });
    expect(archive.requests.length).toBe(served);
    expect(await gapRow(s.gap.id)).toMatchObject({ state: 'open', attempts: 0 });
  });

  it('retries a 5xx with backoff, re-reading only the hours it could not read', async () => {
    const t0 = new Date('2026-11-23T10:00:00Z');
    const s = await overflowingSource(t0);
    publish([...s.first, ...s.later], { '2026-11-23-9': [], '2026-11-23-12': [] });
    archive.fail('2026-11-23-11', { status: 503 });
    const clock = fixedClock('2026-11-23T14:00:00Z');
    const first = await fillGap(deps({ clock }), Number(s.gap.id));
    expect(first).toMatchObject({ outcome: 'retry', eventsRecovered: 20 });
    expect(first.error).toMatch(/2026-11-23-11: .*answered 503/);
    expect(first.nextAttemptAt).toEqual(new Date(clock.now().getTime() + MIN));
    expect(await gapRow(s.gap.id)).toMatchObject({
      state: 'open',
      attempts: 1,
      events_recovered: 20,
      next_attempt_at: first.nextAttemptAt,
    });
    // Not due during the backoff: the worker's pass leaves it alone.
    expect((await fillGaps(deps({ clock }))).map((r) => r.gapId)).not.toContain(Number(s.gap.id));

    clock.advance(2 * MIN);
    const requested = archive.requests.length;
    const second = await fillGap(deps({ clock }), Number(s.gap.id));
    expect(second).toMatchObject({ outcome: 'filled', eventsRecovered: 20 });
    // Only the hour that failed was downloaded again; the others were checkpointed.
    expect(archive.requests.slice(requested).map((r) => r.path)).toEqual([
      '/2026-11-23-11.json.gz',
    ]);
    expect(await storedIds(s.repo.id)).toEqual(ids([...s.first, ...s.later]));
    expect(await gapRow(s.gap.id)).toMatchObject({ state: 'filled', attempts: 2 });
  });

  it('keeps a missing hour open for 48 hours, then marks the gap unavailable with the reason', async () => {
    const t0 = new Date('2026-11-24T10:00:00Z');
    const s = await overflowingSource(t0);
    // Hour 10 never appears on the archive (GH Archive has such hours); the rest does.
    publish(
      [...s.first, ...s.later].filter(
        (e) => hourOf(new Date(e.created_at)).name !== '2026-11-24-10',
      ),
      { '2026-11-24-9': [], '2026-11-24-12': [] },
    );
    archive.removeHour('2026-11-24-10');
    const clock = fixedClock('2026-11-26T10:00:00Z'); // 47 h after hour 10 ended
    const retry = await fillGap(deps({ clock }), Number(s.gap.id));
    expect(retry).toMatchObject({ outcome: 'retry' });
    expect(retry.error).toMatch(/2026-11-24-10: .*not on the archive \(404\)/);
    const recoveredSoFar = retry.eventsRecovered; // what hour 11 held
    expect(await gapRow(s.gap.id)).toMatchObject({ state: 'open', attempts: 1 });

    clock.set('2026-11-26T11:01:00Z'); // 48 h and a minute after it ended
    const { logger, lines } = memoryLogger('warn');
    const gone = await fillGap(deps({ clock, logger }), Number(s.gap.id));
    expect(gone).toMatchObject({ outcome: 'unavailable', eventsRecovered: recoveredSoFar });
    const row = await gapRow(s.gap.id);
    expect(row).toMatchObject({ state: 'unavailable', attempts: 2, filled_at: null });
    expect(row.last_error).toMatch(
      /^archive hours unavailable 48 h after they ended: 2026-11-24-10: .*\(404\)/,
    );
    expect(
      lines.map((l) => JSON.parse(l)).find((l) => l.event === 'gap.unavailable'),
    ).toMatchObject({
      gap_id: Number(s.gap.id),
    });
    // Unavailable is final: the worker never tries it again.
    clock.advance(24 * 3_600_000);
    expect((await fillGaps(deps({ clock }))).map((r) => r.gapId)).not.toContain(Number(s.gap.id));
  });

  it('is filled by the worker’s backfill job, one gap after the other', async () => {
    await sql`DELETE FROM gaps WHERE state = 'open'`.execute(t.db); // earlier tests' leftovers
    const s1 = await overflowingSource(new Date('2026-11-25T10:00:00Z'));
    const s2 = await overflowingSource(new Date('2026-11-25T16:00:00Z'));
    publish([...s1.first, ...s1.later, ...s2.first, ...s2.later], {
      '2026-11-25-9': [],
      '2026-11-25-12': [],
      '2026-11-25-15': [],
      '2026-11-25-18': [],
    });
    const { logger, lines } = memoryLogger('info');
    const result = await handleBackfill(
      { deps: deps({ logger }), boss: undefined as never },
      { id: 'job-1' },
    );
    expect(result).toMatchObject({ outcome: 'filled', gaps: 2, filled: 2, events_recovered: 40 });
    expect(await storedIds(s1.repo.id)).toHaveLength(330);
    expect(await storedIds(s2.repo.id)).toHaveLength(330);
    const done = lines.map((l) => JSON.parse(l)).find((l) => l.event === 'job.completed');
    expect(done).toMatchObject({ queue: 'backfill', job_id: 'job-1', outcome: 'filled' });
    const filled = lines.map((l) => JSON.parse(l)).filter((l) => l.event === 'gap.filled');
    expect(filled.map((l) => l.job_id)).toEqual(['job-1', 'job-1']);
    // Nothing left: the next job finds nothing due.
    const again = await handleBackfill({ deps: deps(), boss: undefined as never }, { id: 'job-2' });
    expect(again).toMatchObject({ outcome: 'nothing_due', gaps: 0 });
  });
});
