import { sql } from 'kysely';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { archiveHourSource } from '../../src/backfill/archive.ts';
import { importFile } from '../../src/backfill/import.ts';
import type { GitHubClient } from '../../src/budget/client-types.ts';
import type { Logger } from '../../src/platform/log.ts';
import { storePage } from '../../src/poll/page-store.ts';
import { pollSource } from '../../src/poll/poll-source.ts';
import { hourOf, parseHour } from '../../src/store/archive-hours.ts';
import { recordGap } from '../../src/store/gaps.ts';
import { mapEventsPage } from '../../src/store/mapping.ts';
import { bulkStorePage } from '../../src/store/pushes.ts';
import { storeRejectedEvents } from '../../src/store/rejected-events.ts';
import { addSource } from '../../src/store/sources.ts';
import { createMetrics } from '../../src/web/metrics.ts';
import { type ArchiveServer, startArchiveServer } from '../support/archive-server.ts';
import { useTestDatabase } from '../support/db.ts';
import { type FakeGitHub, startFakeGitHub } from '../support/fake-github.ts';
import { clientFactory, memoryLogger, testConfig } from '../support/github-client.ts';
import { type GitHubEvent, pushEvent } from '../support/github-factories.ts';

/**
 * Event ids are not keys (ADR 0122). GitHub reset its event id sequence on
 * 2025-10-08 and new ids reuse those of 2016–2020: a backfilled 2019 hour and today's poll
 * hold the same ids for different pushes. The natural key decides what is stored; an id
 * names one push per era; two pushes contending for one id in one era are a dispute,
 * settled by rank (a poll, then GHARCHIVE_URL's order) whatever the order they were read in.
 */

const t = useTestDatabase();
const clients = clientFactory(t);
let fake: FakeGitHub;
let github: GitHubClient;
let first: ArchiveServer;
let second: ArchiveServer;

beforeAll(async () => {
  fake = await startFakeGitHub();
  first = await startArchiveServer();
  second = await startArchiveServer();
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
  await first.close();
  await second.close();
});

const MIN = 60_000;

function deps(logger: Logger = memoryLogger('silent').logger) {
  return {
    config: testConfig(t, {
      apiUrl: fake.url,
      env: { GHARCHIVE_URL: `${first.url},${second.url}` },
    }),
    db: t.db,
    pool: t.pool,
    github,
    logger,
    workerId: 'test-host:1',
  };
}

let seq = 0;
async function newSource() {
  seq++;
  const repo = { id: 8_100_000 + seq, name: `ids-owner-${seq}/repo` };
  const { source } = await addSource(t.db, { kind: 'repo', target: repo.name }, 'live');
  return { id: Number(source.id), feed: `repo:${repo.name}`, repo };
}

/** Imports one hour from one mirror, with this test's GHARCHIVE_URL (again if read before). */
async function importHour(server: ArchiveServer, hour: string, logger?: Logger) {
  const r = await importFile(
    deps(logger),
    archiveHourSource(server.url, parseHour(hour)!),
    { scope: 'all', sourceId: null, gapId: null },
    { force: true },
  );
  expect(r.outcome).toBe('completed');
  return r;
}

interface Row {
  id: string | null;
  ref: string;
  repository_id: string;
  head: string;
  origin: string;
  created_at: Date;
}

/** Every push stored under these heads (the pushes a test made), in head order. */
async function pushesOf(heads: string[]): Promise<Row[]> {
  const r = await sql<Row>`
    SELECT id::text AS id, ref, repository_id::text AS repository_id, head, origin, created_at
    FROM push_events WHERE head = ANY(${heads}) ORDER BY head, ref`.execute(t.db);
  return r.rows;
}

const clashesOf = (eventId: string) =>
  t.db
    .selectFrom('event_id_clashes')
    .selectAll()
    .where('event_id', '=', eventId)
    .orderBy('id')
    .execute();

const headOf = (e: GitHubEvent) => e.payload.head as string;

describe('a 2019 archive hour and a live poll reusing its ids', () => {
  it('stores both whole, each push with its id, and records each reuse', async () => {
    const s = await newSource();
    const now = Date.now();
    const ids = Array.from({ length: 30 }, (_, i) => 9_400_000_000 + seq * 1000 + i);
    // 2019: other repositories, other actors, the same ids.
    const old = ids.map((id, i) =>
      pushEvent({ id, created_at: new Date(Date.UTC(2019, 5, 1, 12, i)) }),
    );
    first.setHour('2019-06-01-12', old);
    const imported = await importHour(first, '2019-06-01-12');
    expect(imported.counts.created).toBe(30);

    const polled = ids.map((id, i) =>
      pushEvent({ id, repo: s.repo, created_at: new Date(now - (40 - i) * MIN) }),
    );
    fake.addEvents(s.feed, polled);
    const { logger, lines } = memoryLogger('info');
    const run = await pollSource({ ...deps(logger) }, s.id, { force: true });
    expect(run.outcome).toBe('completed');
    expect(run.eventsCreated).toBe(30);

    const rows = await pushesOf([...old, ...polled].map(headOf));
    expect(rows).toHaveLength(60);
    // Every push holds its own id: the 2019 one and the one of now.
    for (const [i, id] of ids.entries()) {
      expect(rows.find((r) => r.head === headOf(old[i]!))).toMatchObject({
        id: String(id),
        origin: 'archive',
      });
      expect(rows.find((r) => r.head === headOf(polled[i]!))).toMatchObject({
        id: String(id),
        origin: 'poll',
      });
    }
    const clashes = await sql<{ kind: string; n: string }>`
      SELECT kind, count(*) AS n FROM event_id_clashes
      WHERE event_id = ANY(${ids.map(String)}::bigint[]) GROUP BY kind`.execute(t.db);
    expect(clashes.rows).toEqual([{ kind: 'reused', n: '30' }]);
    // Logged once each, with both sides.
    const logged = lines.map((l) => JSON.parse(l)).filter((l) => l.event === 'event.id_clash');
    expect(logged).toHaveLength(30);
    expect(logged[0]).toMatchObject({
      kind: 'reused',
      kept: { origin: 'archive', createdAt: expect.stringMatching(/^2019-06-01/) },
      other: { origin: 'poll', repositoryId: String(s.repo.id) },
    });

    // The next poll: one new event, the rest overlap this era's ids (the horizon).
    fake.addEvents(s.feed, [pushEvent({ repo: s.repo, created_at: new Date(now - MIN) })]);
    const next = await pollSource(deps(), s.id, { force: true });
    expect(next).toMatchObject({ outcome: 'completed', eventsCreated: 1, gap: false });

    // And the other way round: a poll first, then an archive hour of 2018 reusing its ids.
    const older = ids.map((id, i) =>
      pushEvent({ id, created_at: new Date(Date.UTC(2018, 2, 3, 4, i)) }),
    );
    second.setHour('2018-03-03-4', older);
    expect((await importHour(second, '2018-03-03-4')).counts.created).toBe(30);
    expect(await pushesOf(older.map(headOf))).toHaveLength(30);
    const all = await sql<{ n: string }>`
      SELECT count(*) AS n FROM push_events WHERE id = ANY(${ids.map(String)}::bigint[])`.execute(
      t.db,
    );
    expect(Number(all.rows[0]!.n)).toBe(90);
  });
});

describe('the red team: an archive line with a polled event id and a made-up ref', () => {
  for (const order of ['archive first', 'poll first'] as const) {
    it(`never makes the polled event vanish (${order})`, async () => {
      const s = await newSource();
      const at = new Date(Date.now() - 20 * MIN);
      const id = 777_000 + seq;
      const real = pushEvent({ id, repo: s.repo, created_at: at });
      const madeUp = {
        ...real,
        payload: { ...real.payload, ref: 'refs/heads/made-up' },
      };
      const hour = hourOf(at).name;
      first.setHour(hour, [madeUp]);
      fake.addEvents(s.feed, [real]);
      const { logger, lines } = memoryLogger('info');
      let created: number;
      if (order === 'archive first') {
        await importHour(first, hour, logger);
        created = (await pollSource(deps(logger), s.id, { force: true })).eventsCreated;
      } else {
        created = (await pollSource(deps(logger), s.id, { force: true })).eventsCreated;
        await importHour(first, hour, logger);
      }
      expect(created).toBe(1);
      // Both stored; the id stays with what GitHub answered, the made-up push is without it.
      expect((await pushesOf([headOf(real)])).map((r) => [r.ref, r.origin, r.id])).toEqual([
        ['refs/heads/made-up', 'archive', null],
        ['refs/heads/main', 'poll', String(id)],
      ]);
      const [clash, ...more] = await clashesOf(String(id));
      expect(more).toEqual([]);
      expect(clash).toMatchObject({
        kind: 'disputed',
        kept_ref: 'refs/heads/main',
        kept_origin: 'poll',
        other_ref: 'refs/heads/made-up',
        other_origin: 'archive',
        other_mirror: first.url,
      });
      const warned = lines.map((l) => JSON.parse(l)).filter((l) => l.event === 'event.id_clash');
      expect(warned).toMatchObject([
        {
          level: 'warn',
          kind: 'disputed',
          event_id: String(id),
          kept: { ref: 'refs/heads/main', origin: 'poll' },
          other: { ref: 'refs/heads/made-up', origin: 'archive', mirror: first.url },
        },
      ]);
    });
  }
});

describe('two mirrors that disagree on one id', () => {
  for (const [label, order] of [
    ['the first mirror read first', [() => first, () => second]],
    ['the second mirror read first', [() => second, () => first]],
  ] as const) {
    it(`the earlier mirror in GHARCHIVE_URL keeps it, in either read order (${label})`, async () => {
      seq++;
      const at = new Date(Date.UTC(2026, 10, 20, 10 + (seq % 10), 5));
      const hour = hourOf(at).name;
      const id = 888_000 + seq;
      const shared = pushEvent({ created_at: at });
      const mine = pushEvent({ id, created_at: at, payload: { ref: 'refs/heads/first-says' } });
      const theirs = {
        ...mine,
        payload: { ...mine.payload, ref: 'refs/heads/second-says' },
      };
      first.setHour(hour, [shared, mine]);
      second.setHour(hour, [shared, theirs]);
      const before = await disputedMetric();
      for (const server of order) await importHour(server(), hour);
      expect((await pushesOf([headOf(mine)])).map((r) => [r.ref, r.id])).toEqual([
        ['refs/heads/first-says', String(id)],
        ['refs/heads/second-says', null],
      ]);
      expect(await pushesOf([headOf(shared)])).toHaveLength(1);
      expect(await clashesOf(String(id))).toMatchObject([
        { kind: 'disputed', kept_mirror: first.url, other_mirror: second.url },
      ]);
      // Counted where an operator looks.
      expect(await disputedMetric()).toBe(before + 1);
      // Read again (a --force, a late mirror retry): nothing changes, nothing is counted twice.
      for (const server of order) {
        await importFile(
          deps(),
          archiveHourSource(server().url, parseHour(hour)!),
          {
            scope: 'all',
            sourceId: null,
            gapId: null,
          },
          { force: true },
        );
      }
      expect((await pushesOf([headOf(mine)])).map((r) => [r.ref, r.id])).toEqual([
        ['refs/heads/first-says', String(id)],
        ['refs/heads/second-says', null],
      ]);
      expect(await disputedMetric()).toBe(before + 1);
    });
  }
});

async function disputedMetric(): Promise<number> {
  const text = await createMetrics({ db: t.db, config: deps().config }).scrape();
  const m = /^gpi_event_id_clashes_total\{kind="disputed"\} (\d+)$/m.exec(text);
  expect(m).not.toBeNull();
  return Number(m![1]);
}

describe('contenders settled whatever the order, and when writers race', () => {
  it('gives a webhook copy the id a poll brings, over an archive push holding it in the era', async () => {
    const at = new Date(Date.UTC(2026, 10, 21, 9));
    const id = 991_000 + seq++;
    const polled = mapEventsPage([pushEvent({ id, created_at: at })], 't').pushes[0]!;
    const archived = { ...polled, ref: 'refs/heads/elsewhere' };
    // Stored: the archive's contender; then the webhook's copy of the real push (no id).
    await bulkStorePage(t.db, [archived], { origin: 'archive', contender: { rank: 1 } });
    await bulkStorePage(t.db, [{ ...polled, id: null }], { origin: 'webhook' });
    const stored = await bulkStorePage(t.db, [polled], { origin: 'poll' });
    expect(stored).toMatchObject({ created: 0, idsFilledIn: 0 });
    expect(stored.clashes).toMatchObject([
      // `kept` is the better contender: the poll's (the push itself first came by webhook).
      { kind: 'disputed', kept: { origin: 'poll' }, other: { origin: 'archive' } },
    ]);
    expect((await pushesOf([polled.head])).map((r) => [r.ref, r.origin, r.id])).toEqual([
      ['refs/heads/elsewhere', 'archive', null],
      ['refs/heads/main', 'webhook', String(id)],
    ]);
  });

  it('settles two writers racing on one id as if they had come one after the other', async () => {
    const at = new Date(Date.UTC(2026, 10, 22, 9));
    const id = 992_000 + seq++;
    const early = mapEventsPage([pushEvent({ id, created_at: at })], 't').pushes[0]!;
    const late = { ...early, ref: 'refs/heads/late', createdAt: new Date(at.getTime() + 1000) };
    // The late push is stored in a transaction left open; the early one's page meets it at the
    // index, waits, and when it commits is stored again: the id goes to the earlier push.
    const holder = await t.pool.connect();
    try {
      await holder.query('BEGIN');
      const { runOnClient } = await import('../../src/store/event-ids.ts');
      await runOnClient(holder)(
        `INSERT INTO actors (id, login) VALUES ($1, 'x') ON CONFLICT DO NOTHING`,
        [late.actor.id],
      );
      await runOnClient(holder)(
        `INSERT INTO repositories (id, full_name) VALUES ($1, 'o/r') ON CONFLICT DO NOTHING`,
        [late.repository.id],
      );
      await runOnClient(holder)(
        `INSERT INTO push_events (id, actor_id, repository_id, ref, head, before, created_at, payload, origin)
         VALUES ($1, $2, $3, $4, $5, $6, $7, '{}', 'poll')`,
        [id, late.actor.id, late.repository.id, late.ref, late.head, late.before, late.createdAt],
      );
      const page = { ...mapEventsPage([], 't'), pushes: [early] };
      const storing = storePage(t.db, page, { sourceId: null, runId: null }, async () => null);
      // It waits on the open transaction's index entry (a lock wait, seen in pg_stat_activity).
      for (;;) {
        const w = await sql<{ n: string }>`
          SELECT count(*) AS n FROM pg_stat_activity
          WHERE datname = current_database() AND wait_event_type = 'Lock'`.execute(t.db);
        if (Number(w.rows[0]!.n) > 0) break;
        await new Promise((r) => setTimeout(r, 20));
      }
      await holder.query('COMMIT');
      const { stored } = await storing;
      expect(stored.created).toBe(1);
      expect(stored.clashes).toMatchObject([
        { kind: 'disputed', kept: { ref: 'refs/heads/main' }, other: { ref: 'refs/heads/late' } },
      ]);
    } finally {
      holder.release();
    }
    expect((await pushesOf([early.head])).map((r) => [r.ref, r.id])).toEqual([
      ['refs/heads/late', null],
      ['refs/heads/main', String(id)],
    ]);
  });
});

describe('horizons and records scoped by era', () => {
  it('never takes an id of another era in the ring for the horizon', async () => {
    for (const ringEra of [2019, 2026]) {
      const s = await newSource();
      const now = Date.now();
      const feed = Array.from({ length: 300 }, (_, i) =>
        pushEvent({ repo: s.repo, created_at: new Date(now - (300 - i) * 1000) }),
      );
      fake.addEvents(s.feed, feed);
      // The newest event's id is in the ring: of 2019 (another event), or of its own era.
      const newest = feed[feed.length - 1]!;
      await t.db
        .updateTable('event_sources')
        .set({
          recent_event_ids: [String(newest.id)],
          recent_event_at: [new Date(Date.UTC(ringEra, 5, 1))],
          last_polled_at: new Date(now - 10 * MIN),
        })
        .where('id', '=', String(s.id))
        .execute();
      if (ringEra === 2026) {
        await t.db
          .updateTable('event_sources')
          .set({ recent_event_at: [new Date(newest.created_at)] })
          .where('id', '=', String(s.id))
          .execute();
      }
      const run = await pollSource(deps(), s.id, { force: true });
      if (ringEra === 2019) {
        // Not a horizon: all three pages read, and the window they could not close is a gap.
        expect(run).toMatchObject({ pagesFetched: 3, eventsCreated: 300, gap: true });
      } else {
        expect(run).toMatchObject({ pagesFetched: 1, gap: false });
      }
    }
  });

  it('never takes a push of another era stored by the source for the horizon', async () => {
    const s = await newSource();
    const now = Date.now();
    const feed = Array.from({ length: 300 }, (_, i) =>
      pushEvent({ repo: s.repo, created_at: new Date(now - (300 - i) * 1000) }),
    );
    fake.addEvents(s.feed, feed);
    // A completed run of this source once stored a 2019 push under the newest event's id.
    const run0 = await t.db
      .insertInto('ingestion_runs')
      .values({ source_id: String(s.id), status: 'completed' })
      .returning('id')
      .executeTakeFirstOrThrow();
    const old = mapEventsPage(
      [pushEvent({ id: feed[299]!.id, created_at: new Date(Date.UTC(2019, 1, 1)) })],
      't',
    ).pushes;
    await bulkStorePage(t.db, old, { origin: 'poll', sourceId: s.id, runId: Number(run0.id) });
    await t.db
      .updateTable('event_sources')
      .set({ recent_event_ids: ['1'], last_polled_at: new Date(now - 10 * MIN) })
      .where('id', '=', String(s.id))
      .execute();
    const run = await pollSource(deps(), s.id, { force: true });
    expect(run).toMatchObject({ pagesFetched: 3, eventsCreated: 300, gap: true });
  });

  it("bounds a gap by the ring's pushes of its own era only", async () => {
    const s = await newSource();
    const now = new Date();
    const at = new Date(Math.floor(now.getTime() / 1000) * 1000 - 2 * 3_600_000);
    const id = 993_000 + seq++;
    const mine = mapEventsPage([pushEvent({ id, created_at: at })], 't').pushes;
    const of2019 = mapEventsPage(
      [pushEvent({ id, created_at: new Date(Date.UTC(2019, 1, 1)) })],
      't',
    ).pushes;
    await bulkStorePage(t.db, of2019, { origin: 'archive' });
    await bulkStorePage(t.db, mine, { origin: 'poll' });
    const run = await t.db
      .insertInto('ingestion_runs')
      .values({ source_id: String(s.id), status: 'running' })
      .returning('id')
      .executeTakeFirstOrThrow();
    const recorded = await t.db.transaction().execute((trx) =>
      recordGap(trx, {
        sourceId: s.id,
        runId: Number(run.id),
        held: { ids: [String(id)], at: [at] },
        lastPolledAt: at,
        read: { ids: [], at: [] },
        runStartedAt: now,
        now,
      }),
    );
    // The 2019 push of the same id is another event: not an untrusted time of this one.
    expect(recorded.untrustedTimes).toBe(0);
    expect(recorded.gaps[0]!.from_at).toEqual(at);
  });

  it('sets an event aside once per id and era', async () => {
    const s = await newSource();
    const bad = (year: number) => ({
      sourceId: s.id,
      runId: null,
      eventId: '994000',
      eventType: 'PushEvent',
      reason: 'malformed',
      message: 'payload.ref is missing',
      raw: { id: '994000', type: 'PushEvent', created_at: `${year}-03-01T00:00:00Z` },
    });
    const a = await storeRejectedEvents(t.db, [bad(2019)]);
    const b = await storeRejectedEvents(t.db, [bad(2026)]);
    const again = await storeRejectedEvents(t.db, [bad(2026)]);
    expect([a.firstSeen.length, b.firstSeen.length, again.seenAgain]).toEqual([1, 1, 1]);
    const keys = await t.db
      .selectFrom('rejected_events')
      .select(['event_key', 'seen_count'])
      .where('source_id', '=', String(s.id))
      .orderBy('event_key')
      .execute();
    expect(keys).toEqual([
      { event_key: '994000@2019', seen_count: 1 },
      { event_key: '994000@2026', seen_count: 2 },
    ]);
  });
});
