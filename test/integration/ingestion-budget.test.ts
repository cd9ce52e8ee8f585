import net from 'node:net';
import { sql } from 'kysely';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { GitHubClient } from '../../src/budget/client-types.ts';
import { GitHubAuthFailed, GitHubUnreachable } from '../../src/github/errors.ts';
import { LADDERS } from '../../src/platform/attempts.ts';
import type { Logger } from '../../src/platform/log.ts';
import { pollDueSources } from '../../src/poll/poll-due.ts';
import { pollSource } from '../../src/poll/poll-source.ts';
import { readStatus } from '../../src/status/model.ts';
import { addSource, getSource } from '../../src/store/sources.ts';
import { createMetrics } from '../../src/web/metrics.ts';
import { captureLogger } from '../recovery/helpers.ts';
import { runBin } from '../support/cli.ts';
import { useTestDatabase } from '../support/db.ts';
import { type FakeGitHub, startFakeGitHub } from '../support/fake-github.ts';
import { clientFactory, randomToken, testConfig } from '../support/github-client.ts';
import { pushEvent } from '../support/github-factories.ts';

const AUTH_LADDER_SECONDS = LADDERS.auth;

/**
 * A budget refusal does not spin, only requests that reached GitHub are
 * counted, and a 401 is an auth failure on a short ladder. Against real Postgres and the
 * fake GitHub (and, for the DNS case, a name that cannot resolve: RFC 6761's `.invalid`).
 */

const t = useTestDatabase();
const clients = clientFactory(t);
let fake: FakeGitHub;

beforeAll(async () => {
  fake = await startFakeGitHub();
});
beforeEach(async () => {
  fake.reset();
  for (const table of ['ingestion_runs', 'github_requests', 'github_rate_limits'] as const) {
    await t.db.deleteFrom(table).execute();
  }
  await t.db.deleteFrom('event_sources').execute();
});
afterEach(async () => {
  await clients.closeAll();
});
afterAll(async () => {
  await fake.close();
});

function deps(github: GitHubClient, logger: Logger, token: string | null = null) {
  return {
    config: testConfig(t, { apiUrl: fake.url, token }),
    db: t.db,
    pool: t.pool,
    github,
    logger,
    workerId: 'test-host:1',
  };
}

let seq = 0;
async function newSource(lastError: string | null = null) {
  seq++;
  const target = `budget-${seq}/feed`;
  const { source } = await addSource(t.db, { kind: 'repo', target }, 'live');
  if (lastError) {
    await t.db
      .updateTable('event_sources')
      .set({ last_error: lastError })
      .where('id', '=', source.id)
      .execute();
  }
  fake.addEvents(`repo:${target}`, [pushEvent()]);
  return Number(source.id);
}

/** `n` poll requests that spent quota, the oldest `oldestMinutesAgo` minutes ago. */
async function spend(credential: string, n: number, oldestMinutesAgo: number): Promise<Date> {
  const oldest = new Date(Date.now() - oldestMinutesAgo * 60_000);
  const rows = Array.from({ length: n }, (_, i) => {
    const at = new Date(oldest.getTime() + i * 1000);
    return {
      credential,
      purpose: 'poll' as const,
      method: 'GET',
      path: '/events?per_page=100&page=1',
      outcome: 'completed' as const,
      status: 200,
      counted: true,
      reserved_at: at,
      sent_at: at,
      finished_at: at,
    };
  });
  await t.db.insertInto('github_requests').values(rows).execute();
  return oldest;
}

const sourceRow = (id: number) => getSource(t.db, id);

const runCount = async () =>
  Number(
    (
      await t.db
        .selectFrom('ingestion_runs')
        .select((eb) => eb.fn.countAll<string>().as('n'))
        .executeTakeFirstOrThrow()
    ).n,
  );

describe('a budget refusal does not spin', () => {
  it('defers every due source once: no run, no request, next poll when the window frees', async () => {
    const github = clients.make({ apiUrl: fake.url, token: null }); // anonymous: 20 polls/h
    const { logger, events } = captureLogger('debug');
    // No rate-limit observation (or a stale one): the window is the last 60 minutes, and it
    // frees when its oldest spend leaves it — not "now", which made every tick refuse again.
    const oldest = await spend('anonymous', 20, 50);
    const cause = 'GITHUB_UNAVAILABLE: GitHub unavailable on /repos/x/events: HTTP 502';
    const ids = [await newSource(cause), await newSource(), await newSource()];

    const ticks = [];
    for (let i = 0; i < 3; i++) ticks.push(await pollDueSources(deps(github, logger)));
    const [first, ...rest] = ticks;
    expect(first!.map((s) => s.outcome)).toEqual(['deferred', 'deferred', 'deferred']);
    expect(rest).toEqual([[], []]); // nothing due on the next ticks: no spin
    const frees = oldest.getTime() + 3600_000;
    for (const s of first!) {
      expect(Math.abs(s.nextPollAt!.getTime() - frees)).toBeLessThan(1500);
      expect(s.reason).toMatch(/^budget spent until \d\d:\d\d UTC$/);
      expect(s.error).toBeNull();
    }
    expect(await runCount()).toBe(0);
    expect(fake.requests).toHaveLength(0);
    for (const id of ids) {
      const row = await sourceRow(id);
      expect(Math.abs(row.next_poll_at.getTime() - frees)).toBeLessThan(1500);
      expect(row.consecutive_failures).toBe(0);
    }
    // The real cause stays in last_error.
    expect((await sourceRow(ids[0]!)).last_error).toBe(cause);
    expect((await sourceRow(ids[1]!)).last_error).toBeNull();
    // One line for the whole refusal period, naming every source; no warning, no stack.
    expect(events('ingestion.deferred')).toEqual([
      expect.objectContaining({ level: 'info', source_ids: ids, reason: 'allowance' }),
    ]);
    expect(events('ingestion.run_failed')).toEqual([]);
  });

  it("waits for GitHub's reset when it is known", async () => {
    const github = clients.make({ apiUrl: fake.url, token: null });
    const resetAt = new Date(Math.ceil(Date.now() / 1000) * 1000 + 20 * 60_000);
    await t.db
      .insertInto('github_rate_limits')
      .values({ credential: 'anonymous', quota: 60, remaining: 0, reset_at: resetAt })
      .execute();
    const id = await newSource();
    const [summary] = await pollDueSources(deps(github, captureLogger().logger));
    expect(summary).toMatchObject({ outcome: 'deferred', sourceId: id, nextPollAt: resetAt });
    expect((await sourceRow(id)).next_poll_at).toEqual(resetAt);
    expect(await runCount()).toBe(0);
  });

  it('bin/ingest says "budget spent until HH:MM" and exits 0', async () => {
    await spend('anonymous', 20, 30);
    const id = await newSource();
    const r = await runBin('ingest', [], {
      DATABASE_URL: t.url,
      GITHUB_MODE: 'live',
      GITHUB_API_URL: fake.url,
      GITHUB_TOKEN: undefined,
      LOG_LEVEL: 'warn',
    });
    expect(r.code, r.err).toBe(0);
    expect(r.out).toMatch(
      new RegExp(
        // The date too when the window ends after midnight UTC (src/poll/deferral.ts).
        `^source ${id} repo budget-\\d+/feed: deferred: budget spent until (\\d{4}-\\d\\d-\\d\\d )?\\d\\d:\\d\\d UTC; nothing sent; next poll `,
        'm',
      ),
    );
    expect(fake.requests).toHaveLength(0);
    expect(await runCount()).toBe(0);
  });
});

/** A loopback port nothing listens on (bound, then closed). */
async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const port = (server.address() as net.AddressInfo).port;
  await new Promise((r) => server.close(r));
  return port;
}

describe('only requests that reached GitHub count', () => {
  it('connection refused: GITHUB_UNREACHABLE, settled as not counted, nothing spent', async () => {
    const github = clients.make({ apiUrl: `http://127.0.0.1:${await closedPort()}` });
    const err = await github.request({ purpose: 'poll', path: '/events' }).catch((e) => e);
    expect(err).toBeInstanceOf(GitHubUnreachable);
    expect(err.code).toBe('GITHUB_UNREACHABLE');
    const rows = await t.db.selectFrom('github_requests').selectAll().execute();
    expect(rows).toMatchObject([{ outcome: 'error', status: null, counted: false }]);
    expect((await github.budget()).spent).toEqual({ poll: 0, enrich: 0, commits: 0 });
  });

  it('a DNS failure: bin/ingest, /status, bin/status and /metrics agree nothing was spent', async () => {
    const token = randomToken();
    const id = await newSource();
    const env = {
      DATABASE_URL: t.url,
      GITHUB_MODE: 'live',
      GITHUB_API_URL: 'http://gpi-dns-failure.invalid',
      GITHUB_TOKEN: token,
      LOG_LEVEL: 'error',
    };
    const ingest = await runBin('ingest', ['--json'], env);
    expect(ingest.code, ingest.err).toBe(1); // the run failed: GitHub could not be reached
    const [summary] = JSON.parse(ingest.out);
    expect(summary).toMatchObject({
      sourceId: id,
      outcome: 'failed',
      requestsSpent: 0,
      error: { code: 'GITHUB_UNREACHABLE' },
    });
    const ledger = await t.db.selectFrom('github_requests').selectAll().execute();
    expect(ledger).toMatchObject([{ outcome: 'error', status: null, counted: false }]);

    const status = await runBin('status', ['--json'], env);
    expect(status.code, status.err).toBe(0);
    expect(JSON.parse(status.out).budget.spent).toEqual({ poll: 0, enrich: 0, commits: 0 });

    const github = clients.make({ apiUrl: env.GITHUB_API_URL, token });
    const config = testConfig(t, { apiUrl: env.GITHUB_API_URL, token });
    const report = await readStatus({ config, db: t.db });
    expect(report.budget!.spent).toEqual({ poll: 0, enrich: 0, commits: 0 });
    const text = await createMetrics({ db: t.db, config, github }).scrape();
    expect(text).toMatch(/^gpi_github_budget_spent\{purpose="poll"\} 0$/m);
  });
});

describe('a 401 is an auth failure on a short ladder', () => {
  it('blocks the credential 1, 5, 15, then 60 minutes; the first accepted answer clears it', async () => {
    const github = clients.make({ apiUrl: fake.url });
    fake.fail({ path: '/users/x', status: 401, body: '{"message":"Bad credentials"}', times: 5 });
    const blocks: number[] = [];
    for (let i = 0; i < 5; i++) {
      const err = await github.request({ purpose: 'enrich', path: '/users/x' }).catch((e) => e);
      expect(err).toBeInstanceOf(GitHubAuthFailed);
      // The block runs from the instant the 401 was settled, which the ledger records: read
      // against it, not against when the test sent the request (a request of over half a
      // second, on a loaded machine, made the first block 61 s).
      const answered = await t.db
        .selectFrom('github_requests')
        .select('finished_at')
        .where('path', '=', '/users/x')
        .orderBy('id', 'desc')
        .executeTakeFirstOrThrow();
      blocks.push((err.retryAt.getTime() - answered.finished_at!.getTime()) / 1000);
      // Blocked: nothing is sent, and the budget says it is a 401.
      const refused = await github.tryReserve('enrich');
      expect(refused).toMatchObject({ ok: false, reason: 'blocked', blockReason: 'auth' });
      // Time passes (the block's end moved to the past), and it is tried again.
      await sql`UPDATE github_rate_limits SET blocked_until = now() - interval '1 second'`.execute(
        t.db,
      );
    }
    expect(blocks).toEqual([...AUTH_LADDER_SECONDS, AUTH_LADDER_SECONDS.at(-1)]);
    const before = await t.db
      .selectFrom('github_rate_limits')
      .selectAll()
      .executeTakeFirstOrThrow();
    expect(before).toMatchObject({ auth_failures: 5, block_reason: 'auth' });

    fake.setUser({ id: 1, login: 'x' });
    const ok = await github.request({ purpose: 'enrich', path: '/users/x' });
    expect(ok.status).toBe(200);
    const after = await t.db.selectFrom('github_rate_limits').selectAll().executeTakeFirstOrThrow();
    expect(after).toMatchObject({ auth_failures: 0, block_reason: null, blocked_until: null });
  });

  it('sources say GITHUB_AUTH_FAILED, and the block never turns it into a budget error', async () => {
    const token = randomToken();
    const github = clients.make({ apiUrl: fake.url, token });
    const { logger, events } = captureLogger();
    const first = await newSource();
    const second = await newSource();
    fake.fail({ path: /\/events/, status: 401, body: '{"message":"Bad credentials"}', times: 1 });

    // The first source gets the 401 (a failed run); the second then meets the blocked
    // credential before any request: deferred, no run, but its error is the real one.
    const failed = await pollSource(deps(github, logger, token), first);
    expect(failed).toMatchObject({ outcome: 'failed', error: { code: 'GITHUB_AUTH_FAILED' } });
    const summaries = await pollDueSources(deps(github, logger, token));
    expect(summaries).toEqual([
      expect.objectContaining({
        sourceId: second,
        outcome: 'deferred',
        error: expect.objectContaining({ code: 'GITHUB_AUTH_FAILED' }),
      }),
    ]);
    expect(fake.requests).toHaveLength(1);
    for (const id of [first, second]) {
      expect((await sourceRow(id)).last_error).toMatch(/^GITHUB_AUTH_FAILED: /);
    }
    const blockedUntil = (await github.budget()).blockedUntil!;
    expect((await sourceRow(second)).next_poll_at).toEqual(blockedUntil);
    expect(events('ingestion.deferred')).toEqual([
      expect.objectContaining({ level: 'warn', error_code: 'GITHUB_AUTH_FAILED' }),
    ]);

    // Polled again while blocked (an operator's --force): still the auth failure.
    const again = await pollSource(deps(github, logger, token), first, { force: true });
    expect(again).toMatchObject({ outcome: 'deferred', error: { code: 'GITHUB_AUTH_FAILED' } });
    expect((await sourceRow(first)).last_error).toMatch(/^GITHUB_AUTH_FAILED: /);
    expect(fake.requests).toHaveLength(1);
  });
});
