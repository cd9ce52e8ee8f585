import { sql } from 'kysely';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { GitHubClient } from '../../src/budget/client-types.ts';
import { fetchOnce } from '../../src/commits/fetch-rest.ts';
import { enrichOnce } from '../../src/enrichment/runner.ts';
import { ANSWER_MAX_BYTES } from '../../src/github/answer-limits.ts';
import type { Logger } from '../../src/platform/log.ts';
import { SET_ASIDE_SECONDS } from '../../src/poll/poll-deaths.ts';
import { pollDueSources } from '../../src/poll/poll-due.ts';
import { pollSource } from '../../src/poll/poll-source.ts';
import { addSource, getSource, setSourceEnabled } from '../../src/store/sources.ts';
import { chain, insertPushes, insertRepository } from '../support/commit-world.ts';
import { useTestDatabase } from '../support/db.ts';
import { type FakeGitHub, startFakeGitHub } from '../support/fake-github.ts';
import { clientFactory, memoryLogger, testConfig } from '../support/github-client.ts';
import { pushEvent } from '../support/github-factories.ts';

/**
 * A hostile GitHub, answered against real Postgres: an events page of
 * 110 MB, a profile of 2 MB, and headers that would block a token until 2058, defer a source
 * to 2286 or fail every run with INTERNAL. Each is now a bounded, transient outcome.
 */

const t = useTestDatabase();
const clients = clientFactory(t);
let fake: FakeGitHub;
let github: GitHubClient;
let log: { logger: Logger; lines: string[] };

const MB = 1024 * 1024;

beforeAll(async () => {
  fake = await startFakeGitHub();
});
beforeEach(async () => {
  fake.reset();
  await sql`TRUNCATE event_sources, ingestion_runs, push_events, stored_commits,
    commit_fetch_turns, actors, repositories, github_requests, github_rate_limits
    RESTART IDENTITY CASCADE`.execute(t.db);
  log = memoryLogger('info');
  github = clients.make({ apiUrl: fake.url, logger: log.logger });
});
afterEach(() => clients.closeAll());
afterAll(() => fake.close());

function deps() {
  return {
    config: testConfig(t, { apiUrl: fake.url }),
    db: t.db,
    pool: t.pool,
    github,
    logger: log.logger,
    workerId: 'test-host:1',
  };
}

async function repoSource(target: string) {
  const { source } = await addSource(t.db, { kind: 'repo', target }, 'live');
  return { id: Number(source.id), feed: `repo:${target}`, path: `/repos/${target}/events` };
}

const events = (lines: string[], event: string) =>
  lines.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.event === event);

describe('an answer over its cap', () => {
  it('a 110 MB events page: read stops at 8 MB, the run fails GITHUB_ANSWER_TOO_LARGE and backs off; the other source is polled', async () => {
    const bad = await repoSource('hostile/huge');
    const good = await repoSource('kind/small');
    fake.addEvents(good.feed, [pushEvent({ repo: { id: 77, name: 'kind/small' } })]);
    fake.fail({ path: bad.path, hugeBody: { bytes: 110 * MB }, times: Number.POSITIVE_INFINITY });

    const before = Date.now();
    const summaries = await pollDueSources(deps());
    const byId = new Map(summaries.map((s) => [s.sourceId, s]));
    expect(byId.get(good.id)?.outcome).toBe('completed');
    expect(byId.get(good.id)?.eventsCreated).toBe(1);
    expect(byId.get(bad.id)?.outcome).toBe('failed');
    expect(byId.get(bad.id)?.error?.code).toBe('GITHUB_ANSWER_TOO_LARGE');

    const source = await getSource(t.db, bad.id);
    expect(source.consecutive_failures).toBe(1);
    expect(source.last_error).toMatch(/^GITHUB_ANSWER_TOO_LARGE: .*8 MB cap for events answers/);
    // The first step of the failure ladder: a minute.
    expect(source.next_poll_at.getTime()).toBeGreaterThanOrEqual(before + 60_000);
    expect(source.next_poll_at.getTime()).toBeLessThanOrEqual(Date.now() + 60_000);
    // GitHub did answer: the request is counted, settled as an error with no status.
    const ledger = await t.db
      .selectFrom('github_requests')
      .select(['outcome', 'status', 'path', 'counted'])
      .where('path', 'like', `${bad.path}%`)
      .execute();
    expect(ledger).toEqual([
      { outcome: 'error', status: 200, path: `${bad.path}?per_page=100&page=1`, counted: true },
    ]);
    // The fake wrote the cap and what socket buffers held, then the client hung up.
    const served = fake.requests.find((r) => r.path === bad.path)!;
    await new Promise((r) => setTimeout(r, 100));
    expect(served.bytesSent!).toBeGreaterThan(ANSWER_MAX_BYTES.events);
    expect(served.bytesSent!).toBeLessThan(3 * ANSWER_MAX_BYTES.events);

    // Its next poll backs off further: the second failure is two minutes.
    await sql`UPDATE event_sources SET next_poll_at = now() WHERE id = ${bad.id}`.execute(t.db);
    const again = await pollSource(deps(), bad.id);
    expect(again.error?.code).toBe('GITHUB_ANSWER_TOO_LARGE');
    const after = await getSource(t.db, bad.id);
    expect(after.consecutive_failures).toBe(2);
    expect(after.next_poll_at.getTime()).toBeGreaterThanOrEqual(Date.now() + 115_000);
  });

  it('a declared Content-Length over the cap is refused before its body', async () => {
    const bad = await repoSource('hostile/declared');
    fake.fail({ path: bad.path, hugeBody: { bytes: 50 * MB, declareLength: true } });
    const r = await pollSource(deps(), bad.id);
    expect(r.error?.code).toBe('GITHUB_ANSWER_TOO_LARGE');
    expect(r.error?.message).toMatch(/declares 50 MB, over the 8 MB cap/);
  });

  it('a 2 MB profile is a failed attempt of the entity (1 MB cap), on its retry ladder', async () => {
    await t.db
      .insertInto('actors')
      .values({ id: '4242', login: 'bloated', next_attempt_at: new Date(Date.now() - 1000) })
      .execute();
    fake.fail({ path: '/users/bloated', hugeBody: { bytes: 2 * MB } });
    const r = await enrichOnce(deps(), 'actor');
    expect(r.outcome).toBe('retry');
    const row = await t.db
      .selectFrom('actors')
      .select(['enrichment_state', 'attempts', 'last_error', 'next_attempt_at'])
      .where('id', '=', '4242')
      .executeTakeFirstOrThrow();
    expect(row.enrichment_state).toBe('pending');
    expect(row.attempts).toBe(1);
    expect(row.last_error).toMatch(/1 MB cap for profile answers/);
    expect(row.next_attempt_at.getTime()).toBeGreaterThan(Date.now() + 30_000);
  });
});

describe('a compare over its cap', () => {
  it('a 40 MB compare (32 MB cap) puts the push on its retry ladder: one attempt counted, backed off', async () => {
    await insertRepository(t.db, 90, 'hostile/commits');
    const shas = chain(fake, 'hostile/commits', 3);
    await insertPushes(t.db, [{ repositoryId: 90, before: shas[0]!, head: shas[2]! }]);
    fake.fail({ path: /\/compare\//, hugeBody: { bytes: 40 * MB } });
    const r = await fetchOnce(deps());
    expect(r).toMatchObject({ outcome: 'retry', requests: 1, status: 200 });
    expect(r.detail).toMatch(
      /^GitHub's answer on .*compare.* refused: HTTP 200 answer passed the 32 MB cap/,
    );
    const push = await t.db
      .selectFrom('push_events')
      .select(['commits_state', 'commits_attempts', 'commits_error', 'commits_next_attempt_at'])
      .executeTakeFirstOrThrow();
    expect(push).toMatchObject({ commits_state: 'pending', commits_attempts: 1 });
    expect(push.commits_error).toMatch(/32 MB cap for compare answers/);
    expect(push.commits_next_attempt_at!.getTime()).toBeGreaterThan(Date.now() + 30_000);
  });
});

describe('polls that died', () => {
  it('should the poll die on page 1, its source is due one poll interval after the run began, not a failure backoff; once page 1 is stored, one interval of its answer after its commit', async () => {
    const s = await repoSource('dying/in-flight');
    // A source that failed three times (a fourth failure backs off 8 minutes) and last heard an
    // X-Poll-Interval of 30 s; its feed now announces 5 s and serves two pages.
    await sql`UPDATE event_sources SET consecutive_failures = 3, poll_interval_seconds = 30
      WHERE id = ${s.id}`.execute(t.db);
    fake.setPollInterval(s.feed, 5);
    fake.addEvents(
      s.feed,
      Array.from({ length: 150 }, () => pushEvent({ repo: { id: 78, name: 'dying/in-flight' } })),
    );
    const during = new Map<string, { at: Date; deaths: number }>();
    const requestedAt = new Map<string, number>();
    fake.onRequest = async (req) => {
      if (req.path !== s.path) return;
      requestedAt.set(req.query.page!, Date.now());
      const row = await getSource(t.db, s.id);
      during.set(req.query.page!, { at: row.next_poll_at, deaths: row.poll_deaths });
    };
    const before = Date.now();
    expect((await pollSource(deps(), s.id)).outcome).toBe('completed');
    // Page 1 in flight: the run's start + the 30 s it knew.
    const page1 = during.get('1')!.at.getTime();
    expect(page1).toBeGreaterThanOrEqual(before + 30_000);
    expect(page1).toBeLessThanOrEqual(requestedAt.get('1')! + 30_000);
    // Page 2 in flight: page 1's commit + the 5 s page 1 announced.
    const page2 = during.get('2')!.at.getTime();
    expect(page2).toBeGreaterThanOrEqual(requestedAt.get('1')! + 5_000);
    expect(page2).toBeLessThanOrEqual(requestedAt.get('2')! + 5_000);
    // The completed run then wrote its own plan, and cleared the failures.
    expect(await getSource(t.db, s.id)).toMatchObject({
      consecutive_failures: 0,
      poll_interval_seconds: 5,
    });
  });

  it('a dead run found by the next poll is a failure; the second death in a row sets the source aside for a day; enable retries it', async () => {
    const s = await repoSource('dying/twice');
    fake.addEvents(s.feed, [pushEvent()]);
    // A run its process left, dead on its answer: page 1 sent, never answered.
    const deadRun = async (onAnswer = true) => {
      const run = await t.db
        .insertInto('ingestion_runs')
        .values({ source_id: s.id, status: 'running', worker: 'dead:1' })
        .returning('id')
        .executeTakeFirstOrThrow();
      if (onAnswer) {
        await t.db
          .insertInto('github_requests')
          .values({
            credential: 'token:dead',
            purpose: 'poll',
            path: `${s.path}?per_page=100&page=1`,
            outcome: 'sent',
            sent_at: new Date(),
            run_id: run.id,
          })
          .execute();
      }
      return run;
    };

    // A run that died beside another one's answer (no request of its own in flight): a
    // failure of the source, not a death.
    await deadRun(false);
    expect((await pollSource(deps(), s.id)).outcome).toBe('completed');
    expect(events(log.lines, 'ingestion.run_interrupted')[0]).toMatchObject({
      on_answer: false,
      deaths: 0,
    });
    log.lines.length = 0;
    await sql`UPDATE event_sources SET next_poll_at = now() WHERE id = ${s.id}`.execute(t.db);
    fake.addEvents(s.feed, [pushEvent()]);

    // One death: counted under the lock, and the poll goes on (the source is due).
    const first = await deadRun();
    const r1 = await pollSource(deps(), s.id);
    expect(r1.outcome).toBe('completed');
    const line = events(log.lines, 'ingestion.run_interrupted')[0];
    expect(line).toMatchObject({
      run_id: Number(first.id),
      on_answer: true,
      deaths: 1,
      max_deaths: 2,
    });
    const run1 = await t.db
      .selectFrom('ingestion_runs')
      .select('status')
      .where('id', '=', first.id)
      .executeTakeFirstOrThrow();
    expect(run1.status).toBe('interrupted');
    // The completed run cleared the count.
    expect((await getSource(t.db, s.id)).poll_deaths).toBe(0);

    // Two deaths in a row: the second sets it aside, and nothing is requested.
    await sql`UPDATE event_sources SET poll_deaths = 1, next_poll_at = now() WHERE id = ${s.id}`.execute(
      t.db,
    );
    const second = await deadRun();
    const requests = fake.requests.length;
    const before = Date.now();
    const r2 = await pollSource(deps(), s.id);
    expect(r2.outcome).toBe('skipped');
    expect(r2.reason).toMatch(/^not due until /);
    expect(fake.requests).toHaveLength(requests);
    const aside = await getSource(t.db, s.id);
    expect(aside.poll_deaths).toBe(2);
    expect(aside.consecutive_failures).toBe(1);
    expect(aside.next_poll_at.getTime()).toBeGreaterThanOrEqual(before + SET_ASIDE_SECONDS * 1000);
    expect(aside.last_error).toMatch(
      new RegExp(
        `^POLL_DIED: polling this source killed the process 2 times in a row .*; last run ${second.id}\\); set aside until \\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d UTC: bin/sources enable ${s.id} polls it again now$`,
      ),
    );
    expect(events(log.lines, 'source.set_aside')).toEqual([
      expect.objectContaining({ source_id: s.id, deaths: 2 }),
    ]);

    // The operator's way back: enable clears the deaths and polls it now.
    await setSourceEnabled(t.db, s.id, true);
    expect(await getSource(t.db, s.id)).toMatchObject({ poll_deaths: 0, consecutive_failures: 0 });
    // (The feed has not changed since the first poll: a 304.)
    expect((await pollSource(deps(), s.id)).outcome).toBe('not_modified');
    expect(fake.requests).toHaveLength(requests + 1);
  });
});

describe('headers from GitHub are clamped', () => {
  it.each([
    ['0.5', 60, 'ignored'],
    ['1e10', 60, 'ignored'],
    ['Infinity', 60, 'ignored'],
    ['-5', 60, 'ignored'],
    ['1000000000', 3600, '3600 s'],
    ['0', 1, '1 s'],
  ])(
    'X-Poll-Interval %j: the run completes, the interval is %i s, a warn says %j',
    async (sent, stored, used) => {
      const s = await repoSource(`poll/interval-${stored}-${used.length}-${sent.length}`);
      fake.addEvents(s.feed, [pushEvent()]);
      fake.setPollInterval(s.feed, sent);
      const before = Date.now();
      const r = await pollSource(deps(), s.id);
      expect(r.outcome).toBe('completed');
      expect(r.error).toBeNull();
      const source = await getSource(t.db, s.id);
      expect(source.poll_interval_seconds).toBe(stored);
      expect(source.consecutive_failures).toBe(0);
      // Never further than an hour ahead, whatever the header said.
      expect(source.next_poll_at.getTime()).toBeLessThanOrEqual(before + 3600_000 + 5_000);
      const warned = events(log.lines, 'github.header_clamped');
      expect(warned).toEqual([
        expect.objectContaining({
          level: 'warn',
          header: 'x-poll-interval',
          sent: JSON.stringify(sent),
          used,
        }),
      ]);
    },
  );

  it('retry-after: 999999999 on a 403 blocks the credential for an hour, not until 2058', async () => {
    const s = await repoSource('limits/retry-after');
    fake.fail({
      path: s.path,
      status: 403,
      headers: { 'retry-after': '999999999' },
      body: JSON.stringify({ message: 'You have exceeded a secondary rate limit.' }),
    });
    const before = Date.now();
    const r = await pollSource(deps(), s.id);
    expect(r.error?.code).toBe('RATE_LIMITED');
    const block = await t.db
      .selectFrom('github_rate_limits')
      .select(['blocked_until', 'block_reason'])
      .executeTakeFirstOrThrow();
    expect(block.block_reason).toBe('rate_limit');
    expect(block.blocked_until!.getTime()).toBeGreaterThanOrEqual(before + 3600_000 - 1000);
    expect(block.blocked_until!.getTime()).toBeLessThanOrEqual(Date.now() + 3600_000);
    const source = await getSource(t.db, s.id);
    expect(source.next_poll_at.getTime()).toBeLessThanOrEqual(Date.now() + 3600_000);
    expect(events(log.lines, 'github.header_clamped')[0]).toMatchObject({
      header: 'retry-after',
      used: '3600 s',
    });
  });

  it('x-ratelimit-reset: 9999999999 with nothing remaining defers the source an hour, not to 2286', async () => {
    const s = await repoSource('limits/reset');
    const other = await repoSource('limits/other');
    fake.addEvents(s.feed, [pushEvent()]);
    // The answer's own reset says 2286; the fake bucket is at zero after this request.
    fake.setRateLimit({ remaining: 1, resetAt: new Date(9_999_999_999_000) });
    const before = Date.now();
    // The answer to this poll says remaining 0, reset in 2286.
    expect((await pollSource(deps(), s.id)).outcome).toBe('completed');
    // The next source is put off by our budget: until the reset as clamped, an hour.
    const deferred = await pollSource(deps(), other.id);
    expect(deferred.outcome).toBe('deferred');
    // The time alone today, with its date when the hour is tomorrow's (a run near midnight).
    expect(deferred.reason).toMatch(/budget spent until (\d{4}-\d\d-\d\d )?\d\d:\d\d UTC$/);
    const rl = await t.db
      .selectFrom('github_rate_limits')
      .select(['remaining', 'reset_at'])
      .executeTakeFirstOrThrow();
    expect(rl.remaining).toBe(0);
    expect(rl.reset_at.getTime()).toBeLessThanOrEqual(Date.now() + 3600_000);
    expect(rl.reset_at.getTime()).toBeGreaterThanOrEqual(before + 3600_000 - 1000);
    for (const id of [s.id, other.id]) {
      const src = await getSource(t.db, id);
      expect(src.next_poll_at.getTime(), `source ${id}`).toBeLessThanOrEqual(Date.now() + 3600_000);
    }
  });
});
