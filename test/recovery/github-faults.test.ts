import { sql } from 'kysely';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createGitHubClient } from '../../src/budget/client.ts';
import { enrichOnce } from '../../src/enrichment/runner.ts';
import { GitHubAuthFailed } from '../../src/github/errors.ts';
import { LADDERS, ladderSeconds } from '../../src/platform/attempts.ts';
import { sourceSpec } from '../../src/platform/config/source-spec.ts';
import { pollDueSources } from '../../src/poll/poll-due.ts';
import { addSource } from '../../src/store/sources.ts';
import type { Deps } from '../../src/work/deps.ts';
import { useTestDatabase } from '../support/db.ts';
import { type FakeGitHub, type Fault, startFakeGitHub } from '../support/fake-github.ts';
import { memoryLogger, testConfig } from '../support/github-client.ts';
import { pushEvent, userProfile } from '../support/github-factories.ts';
import { waitFor } from './helpers.ts';
import { type Child, killAll, spawnBin } from './world.ts';

const AUTH_LADDER_SECONDS = LADDERS.auth;
const BACKOFF_BASE_SECONDS = ladderSeconds('poll', 1);

/**
 * GitHub's faults, from the fake, through the real runners and the real client:
 * 500/502/503, an answer that never comes (past the response timeout), a reset connection,
 * truncated JSON, a 403 secondary limit with retry-after, a 429, a 401 and a 422. For each,
 * on the poll path and on the enrichment path:
 * - nothing throws out of the runner except the 401 on enrichment, which is not the
 *   entity's fault and is surfaced as a clear GitHubAuthFailed (the claim is given back);
 * - the error is recorded once: one ledger row, one failed run (poll) or one attempt row
 *   (enrichment), one log line;
 * - the backoff written is the one the design promises (1 min ladder for failures, the
 *   credential's auth ladder for a bad token — 1 min after the first 401 —, retry-after for
 *   rate limits, with no failure counted against the
 *   source or entity for those), and an immediate second pass sends nothing.
 * The hang uses a 1.5 s response timeout (the client's timeouts are Config fields; the
 * production value is 15 s) so the suite stays fast; the code path is the same.
 * A last test runs the real bin/worker through a storm of these faults: it never exits.
 */

const t = useTestDatabase();
let fake: FakeGitHub;
const TOKEN = 'github-faults-token';
const RESPONSE_TIMEOUT_MS = 1500;
const ACTOR = { id: 4242, login: 'faulty-user' };
const children: Child[] = [];

type Expect = {
  /** ledger status (null: no answer) */
  status: number | null;
  poll: { code: string; failure: boolean; waitSeconds: number };
  enrich: { outcome: 'retry' | 'rate_limited' | 'throws'; waitSeconds: number; attempts: number };
};

const SECONDARY = JSON.stringify({
  message:
    'You have exceeded a secondary rate limit. Please wait a few minutes before you try again.',
  documentation_url: 'https://docs.github.com/rest/overview/rate-limits-for-the-rest-api',
});

const unavailable = (status: number | null): Expect => ({
  status,
  poll: { code: 'GITHUB_UNAVAILABLE', failure: true, waitSeconds: BACKOFF_BASE_SECONDS },
  enrich: { outcome: 'retry', waitSeconds: 60, attempts: 1 },
});

const CASES: { name: string; fault: Omit<Fault, 'path'>; expect: Expect }[] = [
  { name: '500', fault: { status: 500 }, expect: unavailable(500) },
  { name: '502', fault: { status: 502 }, expect: unavailable(502) },
  { name: '503', fault: { status: 503 }, expect: unavailable(503) },
  { name: 'no answer past the response timeout', fault: { hang: true }, expect: unavailable(null) },
  { name: 'connection reset', fault: { reset: true }, expect: unavailable(null) },
  {
    name: 'truncated JSON',
    fault: { status: 200, body: '[{"id":"123","type":"PushEv' },
    expect: {
      status: 200,
      poll: { code: 'MALFORMED_RESPONSE', failure: true, waitSeconds: BACKOFF_BASE_SECONDS },
      enrich: { outcome: 'retry', waitSeconds: 60, attempts: 1 },
    },
  },
  {
    name: '403 secondary limit with retry-after',
    fault: { status: 403, body: SECONDARY, headers: { 'retry-after': '120' } },
    expect: {
      status: 403,
      poll: { code: 'RATE_LIMITED', failure: false, waitSeconds: 120 },
      enrich: { outcome: 'rate_limited', waitSeconds: 120, attempts: 0 },
    },
  },
  {
    name: '429 with retry-after',
    fault: { status: 429, headers: { 'retry-after': '90' } },
    expect: {
      status: 429,
      poll: { code: 'RATE_LIMITED', failure: false, waitSeconds: 90 },
      enrich: { outcome: 'rate_limited', waitSeconds: 90, attempts: 0 },
    },
  },
  {
    name: '401 bad credentials',
    fault: { status: 401, body: '{"message":"Bad credentials"}' },
    expect: {
      status: 401,
      // The credential's first step on the auth ladder (60 s), which is also the first
      // rung of the source's own failure ladder.
      poll: { code: 'GITHUB_AUTH_FAILED', failure: true, waitSeconds: AUTH_LADDER_SECONDS[0] },
      enrich: { outcome: 'throws', waitSeconds: 0, attempts: 0 },
    },
  },
  {
    name: '422',
    fault: { status: 422, body: '{"message":"Validation Failed"}' },
    expect: {
      status: 422,
      poll: { code: 'GITHUB_REQUEST_FAILED', failure: true, waitSeconds: BACKOFF_BASE_SECONDS },
      enrich: { outcome: 'retry', waitSeconds: 60, attempts: 1 },
    },
  },
];

beforeAll(async () => {
  fake = await startFakeGitHub();
});

afterAll(async () => {
  await killAll(children);
  await fake?.close();
});

beforeEach(async () => {
  fake.reset();
  await sql`TRUNCATE push_events, actors, repositories, ingestion_runs, github_requests,
    enrichment_attempts, github_rate_limits, event_sources RESTART IDENTITY CASCADE`.execute(t.db);
});

/** Deps as the worker builds them, with a short response timeout (see header). */
function deps(): { deps: Deps; lines: string[]; close(): Promise<void> } {
  const config = testConfig(t, {
    apiUrl: fake.url,
    token: TOKEN,
    responseTimeoutMs: RESPONSE_TIMEOUT_MS,
    env: { ENRICH_LEASE_SECONDS: '60' },
  });
  const { logger, lines } = memoryLogger('info');
  const github = createGitHubClient({ config, db: t.db, databaseUrl: t.url, logger });
  return {
    deps: { config, db: t.db, pool: t.pool, github, logger, workerId: 'faults:1' },
    lines,
    close: () => github.close(),
  };
}

async function ledger() {
  const r = await sql<{ purpose: string; outcome: string; status: number | null }>`
    SELECT purpose, outcome, status FROM github_requests ORDER BY id`.execute(t.db);
  return r.rows;
}

function events(lines: string[], name: string) {
  return lines.map((l) => JSON.parse(l)).filter((l) => l.event === name);
}

/** `at` is `seconds` after `from`, give or take the test's own run time. */
function expectAbout(at: Date, from: number, seconds: number) {
  const delta = (at.getTime() - from) / 1000;
  expect(delta).toBeGreaterThanOrEqual(seconds - 1);
  expect(delta).toBeLessThanOrEqual(seconds + 10);
}

describe('GitHub faults on the poll path', () => {
  for (const c of CASES) {
    it(`${c.name}: one failed run, one ledger row, the promised backoff`, async () => {
      const d = deps();
      try {
        await addSource(t.db, sourceSpec('repo', 'fault/feed'), 'live');
        fake.addEvents('repo:fault/feed', [pushEvent({ repo: { id: 1, name: 'fault/feed' } })]);
        fake.fail({ path: '/repos/fault/feed/events', ...c.fault });
        const before = Date.now();
        const [run] = await pollDueSources(d.deps);
        expect(run).toMatchObject({ outcome: 'failed', error: { code: c.expect.poll.code } });

        expect(await ledger()).toEqual([
          {
            purpose: 'poll',
            // A 422 is returned to the runner as an answer; everything else is an error.
            outcome: c.expect.status === 422 ? 'completed' : 'error',
            status: c.expect.status,
          },
        ]);
        const runs = await sql<{ status: string; error: string }>`
          SELECT status, error FROM ingestion_runs`.execute(t.db);
        expect(runs.rows).toHaveLength(1);
        expect(runs.rows[0]!.status).toBe('failed');
        expect(runs.rows[0]!.error.startsWith(`${c.expect.poll.code}: `)).toBe(true);
        expect(runs.rows[0]!.error).not.toContain(TOKEN);
        const source = await t.db.selectFrom('event_sources').selectAll().executeTakeFirstOrThrow();
        expect(source.consecutive_failures).toBe(c.expect.poll.failure ? 1 : 0);
        expect(source.last_error).toBe(runs.rows[0]!.error);
        expectAbout(source.next_poll_at, before, c.expect.poll.waitSeconds);
        expect(events(d.lines, 'ingestion.run_failed')).toHaveLength(1);
        expect(await t.db.selectFrom('push_events').selectAll().execute()).toEqual([]);

        // Not hammered: the next pass finds nothing due and sends nothing.
        const seen = fake.requests.length;
        expect(await pollDueSources(d.deps)).toEqual([]);
        expect(fake.requests.length).toBe(seen);
      } finally {
        await d.close();
      }
    });
  }
});

describe('GitHub faults on the enrichment path', () => {
  for (const c of CASES) {
    it(`${c.name}: one attempt row, one ledger row, the promised wait`, async () => {
      const d = deps();
      try {
        await t.db.insertInto('actors').values({ id: ACTOR.id, login: ACTOR.login }).execute();
        fake.setUser(userProfile(ACTOR));
        fake.fail({ path: `/users/${ACTOR.login}`, ...c.fault });
        const before = Date.now();
        if (c.expect.enrich.outcome === 'throws') {
          await expect(enrichOnce(d.deps, 'actor')).rejects.toBeInstanceOf(GitHubAuthFailed);
        } else {
          const r = await enrichOnce(d.deps, 'actor');
          expect(r).toMatchObject({ outcome: c.expect.enrich.outcome, entityId: String(ACTOR.id) });
        }

        expect(await ledger()).toEqual([
          {
            purpose: 'enrich',
            outcome: c.expect.status === 422 ? 'completed' : 'error',
            status: c.expect.status,
          },
        ]);
        const attempts = await sql<{ outcome: string; http_status: number | null }>`
          SELECT outcome, http_status FROM enrichment_attempts`.execute(t.db);
        expect(attempts.rows).toEqual([
          {
            outcome: c.expect.enrich.outcome === 'throws' ? 'interrupted' : c.expect.enrich.outcome,
            http_status: c.expect.status,
          },
        ]);
        const actor = await t.db.selectFrom('actors').selectAll().executeTakeFirstOrThrow();
        expect(actor).toMatchObject({
          enrichment_state: 'pending',
          attempts: c.expect.enrich.attempts,
          claimed_until: null,
        });
        if (c.expect.enrich.waitSeconds > 0)
          expectAbout(actor.next_attempt_at, before, c.expect.enrich.waitSeconds);
        const logged =
          events(d.lines, 'enrichment.failed').length +
          events(d.lines, 'enrichment.deferred').length;
        expect(logged).toBe(1);

        // An immediate second pass sends nothing: the entity waits (or, for a rate limit,
        // the whole credential). A bad token blocks the credential too: retrying it on
        // every tick with another entity would only repeat the 401.
        const seen = fake.requests.length;
        fake.fail({ path: `/users/${ACTOR.login}`, ...c.fault });
        const again = await enrichOnce(d.deps, 'actor');
        expect(['idle', 'budget_exhausted']).toContain(again.outcome);
        expect(fake.requests.length).toBe(seen);
      } finally {
        await d.close();
      }
    });
  }
});

describe('the real worker under a storm of faults', () => {
  it('never exits, records every failure once, and stops cleanly', {
    timeout: 180_000,
  }, async () => {
    // One repository source per fault, plus a profile fault per actor. The faults that
    // block the credential (403/429 rate limits, the 401) come last: once one of them has
    // blocked it, the sources still due are deferred — no request, no run — until it frees.
    const blocks = (c: (typeof CASES)[number]) =>
      c.expect.poll.code === 'RATE_LIMITED' || c.expect.poll.code === 'GITHUB_AUTH_FAILED';
    const storm = [
      ...CASES.filter((c) => !c.fault.hang && !blocks(c)),
      ...CASES.filter((c) => blocks(c)),
    ];
    const blocking = storm.filter(blocks).length;
    for (const [i, c] of storm.entries()) {
      const name = `storm/r${i}`;
      await addSource(t.db, sourceSpec('repo', name), 'live');
      const actor = { id: 7000 + i, login: `storm-${i}` };
      fake.addEvents(`repo:${name}`, [pushEvent({ repo: { id: 7100 + i, name }, actor })]);
      // A reset on a kept-alive socket is sent once more on a new one (src/github/http-fetch.ts),
      // and the worker's sockets are kept alive: the failure is a server that resets that too.
      const times = c.fault.reset ? 2 : 1;
      fake.fail({ path: `/repos/${name}/events`, times, ...c.fault });
    }
    const worker = spawnBin('worker', {
      DATABASE_URL: t.url,
      GITHUB_MODE: 'live',
      GITHUB_API_URL: fake.url,
      GITHUB_TOKEN: TOKEN,
      TICK_SECONDS: '1',
      // Idle jobs log job.completed at debug: the ticks below are counted by them.
      LOG_LEVEL: 'debug',
    });
    children.push(worker);
    // Every source has either failed once or been deferred by the block.
    const settled = async () => {
      const r = await sql<{ failed: number; deferred: number }>`
        SELECT count(*) FILTER (WHERE EXISTS (
                 SELECT 1 FROM ingestion_runs r WHERE r.source_id = s.id AND r.status = 'failed'))::int AS failed,
               count(*) FILTER (WHERE NOT EXISTS (
                 SELECT 1 FROM ingestion_runs r WHERE r.source_id = s.id) AND s.next_poll_at > now())::int AS deferred
        FROM event_sources s`.execute(t.db);
      return r.rows[0]!;
    };
    await waitFor(
      async () => {
        const s = await settled();
        return s.failed + s.deferred === storm.length && s.failed >= storm.length - blocking + 1;
      },
      { timeoutMs: 30_000, what: 'every faulty source to fail once or wait for the block' },
    );
    // A few more ticks: nothing is retried early, and the process is still up.
    const ticks = () =>
      worker.lines.filter((l) => l.event === 'job.completed' && l.queue === 'poll-sources').length;
    const at = ticks();
    await waitFor(() => ticks() >= at + 3, { timeoutMs: 60_000, what: 'three more ticks' });
    expect(worker.process.exitCode).toBeNull();
    const runs = await sql<{ source_id: string; n: number }>`
      SELECT source_id::text, count(*)::int AS n FROM ingestion_runs GROUP BY 1`.execute(t.db);
    expect(runs.rows.every((r) => r.n === 1)).toBe(true);
    const { failed, deferred } = await settled();
    expect(worker.lines.filter((l) => l.event === 'ingestion.run_failed')).toHaveLength(failed);
    // The deferred sources were put off in one line per refusal, never one per tick.
    const deferrals = worker.lines.filter((l) => l.event === 'ingestion.deferred');
    expect(deferrals.flatMap((l) => l.source_ids as number[])).toHaveLength(deferred);
    expect(worker.lines.filter((l) => l.level === 'fatal' || l.event === 'queue.error')).toEqual(
      [],
    );
    worker.process.kill('SIGTERM');
    expect(await worker.exited).toEqual({ code: 0, signal: null });
  });
});
