import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { GitHubClient } from '../../src/budget/client-types.ts';
import { isLockHeld, LockSpace } from '../../src/platform/db/locks.ts';
import type { Logger } from '../../src/platform/log.ts';
import { pollDueSources } from '../../src/poll/poll-due.ts';
import { pollSource } from '../../src/poll/poll-source.ts';
import type { RunSummary } from '../../src/poll/run-summary.ts';
import { addSource, getSource } from '../../src/store/sources.ts';
import { useTestDatabase } from '../support/db.ts';
import { type FakeGitHub, startFakeGitHub } from '../support/fake-github.ts';
import { clientFactory, memoryLogger, randomToken, testConfig } from '../support/github-client.ts';
import { type GitHubEvent, otherEvent, pushEvent } from '../support/github-factories.ts';
import { waitFor } from '../support/wait.ts';

const t = useTestDatabase();
const clients = clientFactory(t);
let fake: FakeGitHub;
let github: GitHubClient;

beforeAll(async () => {
  fake = await startFakeGitHub();
});
beforeEach(() => {
  fake.reset();
  github = clients.make({ apiUrl: fake.url }); // a fresh token: a credential and budget of its own
});
afterEach(async () => {
  fake.onRequest = null;
  await clients.closeAll();
});
afterAll(async () => {
  await fake.close();
});

function deps(o: { github?: GitHubClient; logger?: Logger } = {}) {
  return {
    config: testConfig(t, { apiUrl: fake.url }),
    db: t.db,
    pool: t.pool,
    github: o.github ?? github,
    logger: o.logger ?? memoryLogger('silent').logger,
    workerId: 'test-host:1',
  };
}

let sourceSeq = 0;
/** A new repo source (due now) and the fake feed key that serves it. */
async function newSource() {
  sourceSeq++;
  const target = `owner-${sourceSeq}/feed-${sourceSeq}`;
  const { source } = await addSource(t.db, { kind: 'repo', target }, 'live');
  return { id: Number(source.id), feed: `repo:${target}`, path: `/repos/${target}/events` };
}

const pushes = (n: number, o: Parameters<typeof pushEvent>[0] = {}) =>
  Array.from({ length: n }, () => pushEvent(o));

/** Polls regardless of next_poll_at (the source was just polled: not due again yet). */
const poll = (id: number, o: Parameters<typeof pollSource>[2] = {}, d = deps()) =>
  pollSource(d, id, { force: true, ...o });

async function count(
  table: 'push_events' | 'actors' | 'repositories' | 'ingestion_runs',
): Promise<number> {
  const r = await t.db
    .selectFrom(table)
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .executeTakeFirstOrThrow();
  return Number(r.n);
}

async function storedFor(sourceId: number): Promise<number> {
  const r = await t.db
    .selectFrom('push_events')
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .where('source_id', '=', String(sourceId))
    .executeTakeFirstOrThrow();
  return Number(r.n);
}

const sourceRow = (id: number) => getSource(t.db, id);
const runRow = (id: number | null) =>
  t.db
    .selectFrom('ingestion_runs')
    .selectAll()
    .where('id', '=', String(id))
    .executeTakeFirstOrThrow();
const feedRequests = (path: string) => fake.requests.filter((r) => r.path === path);

describe('polling a source', () => {
  it('stores every push once; nothing new next time is a 304 that spends no quota', async () => {
    const s = await newSource();
    fake.addEvents(s.feed, [
      ...pushes(30),
      ...['WatchEvent', 'IssuesEvent'].flatMap((type) =>
        Array.from({ length: 5 }, () => otherEvent(type)),
      ),
    ]);
    const before = new Date();

    const first = await pollSource(deps(), s.id);
    expect(first).toMatchObject({
      outcome: 'completed',
      eventsSeen: 40,
      eventsCreated: 30,
      pagesFetched: 1, // a short page is the end of the feed
      requestsSpent: 1,
      gap: false,
      newPending: { actor: 30, repository: 30 },
      error: null,
    });
    expect(await storedFor(s.id)).toBe(30);
    const run = await runRow(first.runId);
    expect(run).toMatchObject({
      status: 'completed',
      events_seen: 40,
      events_created: 30,
      push_events_seen: 30,
      pages_fetched: 1,
      requests_spent: 1,
      worker: 'test-host:1',
    });
    const source = await sourceRow(s.id);
    expect(source.etag).toMatch(/^W\/"[0-9a-f]+"$/);
    expect(source.recent_event_ids).toHaveLength(40);
    expect(source).toMatchObject({
      poll_interval_seconds: 60,
      consecutive_failures: 0,
      last_error: null,
    });
    expect(source.next_poll_at.getTime()).toBeGreaterThanOrEqual(before.getTime() + 60_000);
    expect(source.next_poll_at.getTime()).toBeLessThanOrEqual(Date.now() + 60_000);
    expect(feedRequests(s.path)[0]!.query).toEqual({ per_page: '100', page: '1' });

    const counted = fake.countedRequests;
    const second = await poll(s.id);
    expect(second).toMatchObject({
      outcome: 'not_modified',
      eventsSeen: 0,
      eventsCreated: 0,
      requestsSpent: 0,
    });
    expect(fake.countedRequests).toBe(counted);
    const conditional = feedRequests(s.path)[1]!;
    expect(conditional.headers['if-none-match']).toBe(source.etag);
    expect(conditional).toMatchObject({ status: 304, counted: false });
    const ledger = await t.db
      .selectFrom('github_requests')
      .select(['status', 'counted'])
      .where('run_id', '=', String(second.runId))
      .execute();
    expect(ledger).toEqual([{ status: 304, counted: false }]);
    expect(await runRow(second.runId)).toMatchObject({ status: 'not_modified', requests_spent: 0 });
    expect((await sourceRow(s.id)).recent_event_ids).toEqual(source.recent_event_ids);
  });

  it('pages only until a page overlaps what the source already held', async () => {
    const s = await newSource();
    fake.addEvents(s.feed, pushes(300));
    const first = await poll(s.id);
    // The first run of a source has no horizon: three pages without overlap is no gap.
    expect(first).toMatchObject({
      outcome: 'completed',
      pagesFetched: 3,
      eventsCreated: 300,
      gap: false,
    });

    fake.addEvents(s.feed, pushes(150));
    fake.requests.length = 0;
    const second = await poll(s.id);
    // Page 1: 100 new; page 2: 50 new + 50 held → stop. Page 3 is never asked for.
    expect(second).toMatchObject({
      outcome: 'completed',
      pagesFetched: 2,
      requestsSpent: 2,
      eventsSeen: 200,
      eventsCreated: 150,
      gap: false,
    });
    expect(feedRequests(s.path).map((r) => r.query.page)).toEqual(['1', '2']);
    expect(await storedFor(s.id)).toBe(450);
  });

  it('records a gap when three full pages pass without reaching the horizon', async () => {
    const s = await newSource();
    fake.addEvents(s.feed, pushes(10));
    await poll(s.id);
    fake.addEvents(s.feed, pushes(320)); // 20 more than the window: some are gone for good

    const run = await poll(s.id);
    expect(run).toMatchObject({
      outcome: 'completed',
      pagesFetched: 3,
      eventsCreated: 300,
      gap: true,
    });
    expect(await runRow(run.runId)).toMatchObject({ gap_detected: true, status: 'completed' });
    // The horizon moved: the next poll overlaps on page 1 and records no gap.
    fake.addEvents(s.feed, pushes(5));
    expect(await poll(s.id)).toMatchObject({ pagesFetched: 1, eventsCreated: 5, gap: false });
  });

  it('re-ingesting the same events creates nothing, even with the ETag and recent ids lost', async () => {
    const s = await newSource();
    fake.addEvents(s.feed, pushes(50));
    await poll(s.id);
    const totals = {
      pushes: await count('push_events'),
      actors: await count('actors'),
      repos: await count('repositories'),
    };
    await t.db
      .updateTable('event_sources')
      .set({ etag: null, recent_event_ids: [] })
      .where('id', '=', String(s.id))
      .execute();

    const again = await poll(s.id);
    // The pushes its completed run stored still count as the horizon: page 1 overlaps.
    expect(again).toMatchObject({
      outcome: 'completed',
      eventsSeen: 50,
      eventsCreated: 0,
      pagesFetched: 1,
      gap: false,
      newPending: { actor: 0, repository: 0 },
    });
    expect({
      pushes: await count('push_events'),
      actors: await count('actors'),
      repos: await count('repositories'),
    }).toEqual(totals);
  });

  it('stores a late event whose id is lower than everything already held', async () => {
    const s = await newSource();
    fake.addEvents(
      s.feed,
      pushes(20, {}).map((e, i) => ({ ...e, id: String(70_000_000_100 + i) })),
    );
    await poll(s.id);
    // Arrives now, but was created earlier: a lower id than all 20 held events.
    const late = pushEvent({ id: '70_000_000_000'.replaceAll('_', '') });
    fake.addEvents(s.feed, [late]);

    const run = await poll(s.id);
    expect(run).toMatchObject({ eventsCreated: 1, pagesFetched: 1 });
    const row = await t.db
      .selectFrom('push_events')
      .select(['id', 'head'])
      .where('id', '=', late.id)
      .executeTakeFirst();
    expect(row).toEqual({ id: late.id, head: late.payload.head });
  });

  it("updates a renamed actor's login and repository's name by numeric id", async () => {
    const s = await newSource();
    fake.addEvents(s.feed, [
      pushEvent({
        actor: { id: 777_001, login: 'old-login' },
        repo: { id: 888_001, name: 'old-owner/old-name' },
      }),
    ]);
    await poll(s.id);
    fake.addEvents(s.feed, [
      pushEvent({
        actor: { id: 777_001, login: 'new-login' },
        repo: { id: 888_001, name: 'new-owner/new-name' },
      }),
    ]);

    const run = await poll(s.id);
    expect(run).toMatchObject({ eventsCreated: 1, newPending: { actor: 0, repository: 0 } });
    expect(
      await t.db
        .selectFrom('actors')
        .select(['login', 'enrichment_state'])
        .where('id', '=', '777001')
        .execute(),
    ).toEqual([{ login: 'new-login', enrichment_state: 'pending' }]);
    expect(
      await t.db
        .selectFrom('repositories')
        .select('full_name')
        .where('id', '=', '888001')
        .execute(),
    ).toEqual([{ full_name: 'new-owner/new-name' }]);
  });

  it('stops paging at a 422 past the window, without a gap', async () => {
    const s = await newSource();
    fake.addEvents(s.feed, pushes(5));
    await poll(s.id);
    fake.addEvents(s.feed, pushes(250));
    fake.fail({ path: new RegExp(`^${s.path}\\?per_page=100&page=2$`), status: 422 });

    const run = await poll(s.id);
    expect(run).toMatchObject({
      outcome: 'completed',
      pagesFetched: 1,
      eventsCreated: 100,
      gap: false,
    });
  });
});

describe('a source another session is polling', () => {
  it('is busy: logged at INFO, no run row, no request', async () => {
    const s = await newSource();
    fake.addEvents(s.feed, pushes(3));
    const other = await t.newPool(1).connect();
    await other.query('SELECT pg_advisory_lock($1, $2)', [LockSpace.source, s.id]);
    const { logger, lines } = memoryLogger('info');
    const runsBefore = await count('ingestion_runs');
    try {
      const seen: RunSummary[] = [];
      const summary = await pollSource(deps({ logger }), s.id, {
        afterRun: (x) => void seen.push(x),
      });
      expect(summary).toMatchObject({ outcome: 'busy', runId: null, requestsSpent: 0 });
      expect(seen).toEqual([summary]);
    } finally {
      other.release(true); // ends that session, and its lock
    }
    expect(await count('ingestion_runs')).toBe(runsBefore);
    expect(fake.requests).toHaveLength(0);
    const busy = lines.map((l) => JSON.parse(l)).filter((l) => l.event === 'source.busy');
    expect(busy).toEqual([expect.objectContaining({ level: 'info', source_id: s.id })]);
    // Once the other session is gone (the server notices the closed socket), the same call polls.
    await waitFor(async () => !(await isLockHeld(t.db, LockSpace.source, s.id)), {
      what: 'the dead session to release its source lock',
    });
    expect((await pollSource(deps(), s.id)).outcome).toBe('completed');
  });
});

describe('the request gate', () => {
  it('serializes two pollers (two processes, one credential): one request in flight at a time', async () => {
    const token = randomToken();
    const a = clients.make({ apiUrl: fake.url, token });
    const b = clients.make({ apiUrl: fake.url, token });
    const [s1, s2] = [await newSource(), await newSource()];
    fake.addEvents(s1.feed, pushes(300));
    fake.addEvents(s2.feed, pushes(300));
    // Hold every answer a little so that two unserialized requests would overlap.
    fake.onRequest = () => new Promise((r) => setTimeout(r, 20));

    const [r1, r2] = await Promise.all([
      poll(s1.id, {}, deps({ github: a })),
      poll(s2.id, {}, deps({ github: b })),
    ]);
    expect([r1.outcome, r2.outcome]).toEqual(['completed', 'completed']);
    expect(fake.requests).toHaveLength(6);
    expect(fake.maxInFlight).toBe(1);
    expect(fake.secondaryLimitHits).toBe(0);
  });
});

describe('failures', () => {
  it('a rate-limit 403 writes the wait, not a failure, and no data', async () => {
    const s = await newSource();
    fake.addEvents(s.feed, pushes(10));
    fake.fail({
      path: s.path,
      status: 403,
      headers: { 'retry-after': '600' },
      body: JSON.stringify({ message: 'You have exceeded a secondary rate limit.' }),
    });
    const pushesBefore = await count('push_events');
    const before = Date.now();

    const run = await poll(s.id);
    expect(run).toMatchObject({
      outcome: 'failed',
      eventsCreated: 0,
      error: { code: 'RATE_LIMITED' },
    });
    expect(await count('push_events')).toBe(pushesBefore);
    const source = await sourceRow(s.id);
    expect(source.consecutive_failures).toBe(0);
    expect(source.last_error).toMatch(/^RATE_LIMITED: /);
    expect(source.next_poll_at.getTime()).toBeGreaterThanOrEqual(before + 600_000);
    expect(source.next_poll_at.getTime()).toBeLessThanOrEqual(Date.now() + 600_000);
    expect(await runRow(run.runId)).toMatchObject({
      status: 'failed',
      error: expect.stringMatching(/^RATE_LIMITED/),
    });
  });

  it('a 5xx climbs the failure ladder; a success resets it', async () => {
    const s = await newSource();
    fake.addEvents(s.feed, pushes(2));
    fake.fail({ path: s.path, status: 502, times: 2 });
    const before = Date.now();
    await poll(s.id);
    const second = await poll(s.id);
    expect(second.error?.code).toBe('GITHUB_UNAVAILABLE');
    const failed = await sourceRow(s.id);
    expect(failed.consecutive_failures).toBe(2);
    expect(failed.next_poll_at.getTime()).toBeGreaterThanOrEqual(before + 120_000);
    expect(failed.next_poll_at.getTime()).toBeLessThanOrEqual(Date.now() + 120_000);

    expect((await poll(s.id)).outcome).toBe('completed');
    expect(await sourceRow(s.id)).toMatchObject({ consecutive_failures: 0, last_error: null });
  });

  const withoutActor = () => {
    const e = pushEvent() as Partial<GitHubEvent>;
    delete e.actor;
    return e as GitHubEvent;
  };
  // Poison in one event is rejected (ADR 0020): the run completes, the good events
  // beside it are stored, the source counts no failure, its horizon moves on.
  it.each([
    ['a PushEvent without actor', 'malformed', /^actor is missing$/, () => withoutActor()],
    [
      'an event id "abc"',
      'bad_id',
      /^id must be a numeric id.*\(got "abc"\)/,
      () => pushEvent({ id: 'abc', created_at: '2026-11-29T08:00:00Z' }),
    ],
  ])(
    '%s is rejected; the run completes with every good event stored',
    async (_what, reason, says, poison) => {
      const s = await newSource();
      fake.addEvents(s.feed, pushes(5));
      await poll(s.id);
      const before = await count('push_events');

      const good = [...pushes(3), ...pushes(3)];
      fake.addEvents(s.feed, [...good.slice(0, 3), poison(), ...good.slice(3)]);
      const run = await poll(s.id);
      expect(run).toMatchObject({
        outcome: 'completed',
        eventsCreated: 6,
        eventsRejected: 1,
        error: null,
      });
      expect(await count('push_events')).toBe(before + 6);
      const set = await t.db
        .selectFrom('rejected_events')
        .select(['reason', 'message', 'run_id', 'seen_count'])
        .where('source_id', '=', String(s.id))
        .execute();
      expect(set).toMatchObject([{ reason, run_id: String(run.runId), seen_count: 1 }]);
      expect(set[0]!.message).toMatch(says);
      const after = await sourceRow(s.id);
      expect(after).toMatchObject({ consecutive_failures: 0, last_error: null });
      expect(await runRow(run.runId)).toMatchObject({
        status: 'completed',
        events_created: 6,
        events_rejected: 1,
      });
    },
  );

  it.each([
    [
      'truncated JSON',
      'MALFORMED_RESPONSE',
      /./,
      (f: FakeGitHub, _feed: string, path: string) =>
        f.fail({ path, status: 200, body: '[{"id":"1","type":"PushEv' }),
    ],
    [
      'a page that is not an array',
      'MALFORMED_EVENT',
      /expected a JSON array of events, got object/,
      (f: FakeGitHub, _feed: string, path: string) =>
        f.fail({ path, status: 200, body: '{"message":"not a list"}' }),
    ],
  ])(
    'a page that is not an array of events (%s) fails the run and writes nothing, leaving stored data and the horizon untouched',
    async (_what, code, says, inject) => {
      const s = await newSource();
      fake.addEvents(s.feed, pushes(5));
      await poll(s.id);
      const held = await sourceRow(s.id);
      const totals = {
        pushes: await count('push_events'),
        actors: await count('actors'),
        repos: await count('repositories'),
      };

      fake.addEvents(s.feed, pushes(3));
      inject(fake, s.feed, s.path);
      fake.addEvents(s.feed, pushes(3));
      const run = await poll(s.id);
      expect(run).toMatchObject({ outcome: 'failed', eventsCreated: 0, error: { code } });
      expect(run.error?.message).toMatch(says);
      expect({
        pushes: await count('push_events'),
        actors: await count('actors'),
        repos: await count('repositories'),
      }).toEqual(totals);
      const after = await sourceRow(s.id);
      expect(after).toMatchObject({
        etag: held.etag,
        recent_event_ids: held.recent_event_ids,
        consecutive_failures: 1,
      });
      expect(after.last_error).toMatch(new RegExp(`^${code}: `));
      expect(await runRow(run.runId)).toMatchObject({
        status: 'failed',
        events_created: 0,
        error: expect.stringContaining(code),
      });
    },
  );
});

describe('pollDueSources', () => {
  it('polls only enabled, due sources of its mode, and hands each summary over after the lock is released', async () => {
    await t.db.updateTable('event_sources').set({ enabled: false }).execute(); // earlier tests' sources
    const due = await newSource();
    const later = await newSource();
    const disabled = await newSource();
    const { source: fixture } = await addSource(
      t.db,
      { kind: 'org', target: 'fixture-only' },
      'fixture',
    );
    await t.db
      .updateTable('event_sources')
      .set({ next_poll_at: new Date(Date.now() + 3_600_000) })
      .where('id', '=', String(later.id))
      .execute();
    await t.db
      .updateTable('event_sources')
      .set({ enabled: false })
      .where('id', '=', String(disabled.id))
      .execute();
    fake.addEvents(due.feed, pushes(4));
    const { logger, lines } = memoryLogger('info');

    const seen: { summary: RunSummary; lockHeld: boolean; status: string }[] = [];
    const summaries = await pollDueSources(deps({ logger }), {
      jobId: 'job-42',
      afterRun: async (summary) => {
        const run = await runRow(summary.runId);
        seen.push({
          summary,
          lockHeld: await isLockHeld(t.db, LockSpace.source, summary.sourceId),
          status: run.status,
        });
      },
    });
    expect(summaries.map((s) => s.sourceId)).toEqual([due.id]);
    expect(summaries[0]).toEqual({
      runId: expect.any(Number),
      sourceId: due.id,
      source: `repo ${due.feed.slice('repo:'.length)}`,
      outcome: 'completed',
      eventsSeen: 4,
      eventsCreated: 4,
      eventsRejected: 0,
      pagesFetched: 1,
      requestsSpent: 1,
      gap: false,
      newPending: { actor: 4, repository: 4 },
      commitsPending: 0,
      nextPollAt: expect.any(Date),
      error: null,
    });
    expect(seen).toEqual([{ summary: summaries[0], lockHeld: false, status: 'completed' }]);
    expect(fake.requests.map((r) => r.path)).toEqual([due.path]);
    expect(Number(fixture.id)).toBeGreaterThan(0);

    const events = lines
      .map((l) => JSON.parse(l))
      .filter((l) => String(l.event).startsWith('ingestion.'));
    expect(events.map((e) => e.event)).toEqual([
      'ingestion.run_started',
      'ingestion.run_completed',
    ]);
    for (const e of events)
      expect(e).toMatchObject({ run_id: summaries[0]!.runId, source_id: due.id, job_id: 'job-42' });
    expect((await runRow(summaries[0]!.runId)).job_id).toBe('job-42');

    // With --force the not-yet-due source is polled too (and the disabled one still not).
    const forced = await pollDueSources(deps(), { force: true });
    expect(forced.map((s) => s.sourceId).sort()).toEqual([due.id, later.id].sort());
  });

  it('re-reads the source under its lock: a source polled meanwhile is skipped with no run row', async () => {
    const s = await newSource();
    await t.db
      .updateTable('event_sources')
      .set({ next_poll_at: new Date(Date.now() + 60_000) })
      .where('id', '=', String(s.id))
      .execute();
    const runsBefore = await count('ingestion_runs');
    const summaries = await pollDueSources(deps(), { sourceId: s.id });
    expect(summaries).toEqual([
      expect.objectContaining({
        outcome: 'skipped',
        runId: null,
        reason: expect.stringMatching(/^not due until/),
      }),
    ]);
    expect(await count('ingestion_runs')).toBe(runsBefore);
    expect(fake.requests).toHaveLength(0);
  });
});
