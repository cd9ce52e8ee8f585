import { sql } from 'kysely';
import { afterEach, describe, expect, it } from 'vitest';
import {
  GitHubAuthFailed,
  GitHubRequestFailed,
  GitHubUnavailable,
  MalformedResponse,
  RateLimited,
} from '../../src/github/errors.ts';
import { useTestDatabase } from '../support/db.ts';
import { clientFactory, memoryLogger, randomToken, reserve } from '../support/github-client.ts';
import { pushEvent, repoProfile, userProfile } from '../support/github-factories.ts';
import { useFakeGitHub } from '../support/use-fake-github.ts';

/** The live client against the fake GitHub: answers, classification, ledger, secrets. */

const t = useTestDatabase();
const clients = clientFactory(t);
const fake = useFakeGitHub();

afterEach(() => clients.closeAll());

async function ledgerRow(id: number) {
  return t.db
    .selectFrom('github_requests')
    .selectAll()
    .where('id', '=', String(id))
    .executeTakeFirstOrThrow();
}

async function lastLedgerRow() {
  return t.db
    .selectFrom('github_requests')
    .selectAll()
    .orderBy('id', 'desc')
    .limit(1)
    .executeTakeFirstOrThrow();
}

describe('answers', () => {
  it('returns a feed page with its ETag, poll interval and rate limit, recorded in the ledger', async () => {
    const gh = clients.make({ apiUrl: fake.url });
    fake.addEvents('public', [pushEvent(), pushEvent()]);
    fake.setPollInterval('public', 90);

    const res = await gh.request<{ id: string }[]>({
      purpose: 'poll',
      path: '/events?per_page=100&page=1',
      jobId: 'job-1',
    });

    expect(res.status).toBe(200);
    expect(res.data).toHaveLength(2);
    expect(res.etag).toMatch(/^W\/"/);
    expect(res.pollInterval).toBe(90);
    expect(res.rateLimit).toMatchObject({ limit: 5000, remaining: 4999 });
    expect(res.counted).toBe(true);
    expect(res.url).toBe(`${fake.url}/events?per_page=100&page=1`);
    const row = await ledgerRow(res.requestId);
    expect(row).toMatchObject({
      credential: gh.credential,
      purpose: 'poll',
      method: 'GET',
      path: '/events?per_page=100&page=1',
      outcome: 'completed',
      status: 200,
      counted: true,
      rate_limit_limit: 5000,
      rate_limit_remaining: 4999,
      job_id: 'job-1',
    });
    expect(row.sent_at!.getTime()).toBeGreaterThanOrEqual(row.reserved_at.getTime());
    const rl = await t.db
      .selectFrom('github_rate_limits')
      .selectAll()
      .where('credential', '=', gh.credential)
      .executeTakeFirstOrThrow();
    expect(rl).toMatchObject({ quota: 5000, remaining: 4999, blocked_until: null });
  });

  it('sends the ETag verbatim; a 304 spends no quota and is recorded as not counted', async () => {
    const token = randomToken();
    const gh = clients.make({ apiUrl: fake.url, token });
    fake.addEvents('public', [pushEvent()]);
    const first = await gh.request({ purpose: 'poll', path: '/events' });
    const remaining = fake.rateLimit({ token }).remaining;

    const second = await gh.request({ purpose: 'poll', path: '/events', etag: first.etag });

    expect(first.etag).toMatch(/^W\/"[0-9a-f]+"$/);
    expect(fake.requests[1]!.headers['if-none-match']).toBe(first.etag);
    expect(second).toMatchObject({ status: 304, counted: false, data: undefined });
    expect(fake.rateLimit({ token }).remaining).toBe(remaining);
    expect(await ledgerRow(second.requestId)).toMatchObject({
      status: 304,
      counted: false,
      outcome: 'completed',
    });
    expect((await gh.budget()).spent.poll).toBe(1);
  });

  it('reserves the ledger row before the request leaves', async () => {
    const gh = clients.make({ apiUrl: fake.url });
    fake.setUser(userProfile({ id: 7, login: 'octocat' }));
    const seen: unknown[] = [];
    fake.onRequest = async (req) => {
      const rows = await t.db
        .selectFrom('github_requests')
        .select(['outcome', 'path', 'credential'])
        .where('path', '=', req.rawUrl)
        .execute();
      seen.push(...rows);
    };
    await gh.request({ purpose: 'enrich', path: '/users/octocat' });
    expect(seen).toEqual([{ outcome: 'sent', path: '/users/octocat', credential: gh.credential }]);
  });

  it('returns 404, 410 and 422 as answers with no data', async () => {
    const gh = clients.make({ apiUrl: fake.url });
    fake.fail({ path: '/repos/a/b', status: 410 });
    fake.addEvents('public', [pushEvent()]);
    expect(await gh.request({ purpose: 'enrich', path: '/users/nobody' })).toMatchObject({
      status: 404,
      data: undefined,
      counted: true,
    });
    expect(await gh.request({ purpose: 'enrich', path: '/repos/a/b' })).toMatchObject({
      status: 410,
      data: undefined,
    });
    const past = await gh.request({ purpose: 'poll', path: '/events?per_page=100&page=4' });
    expect(past).toMatchObject({ status: 422, data: undefined });
    expect(await ledgerRow(past.requestId)).toMatchObject({ outcome: 'completed', status: 422 });
  });

  it('encodes [bot] logins end to end', async () => {
    const gh = clients.make({ apiUrl: fake.url });
    fake.setUser(userProfile({ id: 49699333, login: 'dependabot[bot]' }));
    const encoded = await gh.request<{ login: string }>({
      purpose: 'enrich',
      path: '/users/dependabot%5Bbot%5D',
    });
    const raw = await gh.request<{ login: string }>({
      purpose: 'enrich',
      path: '/users/dependabot[bot]',
    });
    expect(encoded.data?.login).toBe('dependabot[bot]');
    expect(raw.data?.login).toBe('dependabot[bot]');
    expect(fake.requests.map((r) => r.rawUrl)).toEqual([
      '/users/dependabot%5Bbot%5D',
      '/users/dependabot%5Bbot%5D',
    ]);
    expect((await ledgerRow(raw.requestId)).path).toBe('/users/dependabot%5Bbot%5D');
  });

  it('follows a renamed repository to its new home and reports the final URL', async () => {
    const gh = clients.make({ apiUrl: fake.url });
    fake.setRepo(repoProfile({ id: 42, full_name: 'old/name' }));
    fake.renameRepo('old/name', 'new/name');
    const res = await gh.request<{ id: number; full_name: string }>({
      purpose: 'enrich',
      path: '/repos/old/name',
    });
    expect(res.status).toBe(200);
    expect(res.url).toBe(`${fake.url}/repositories/42`);
    expect(res.data).toMatchObject({ id: 42, full_name: 'new/name' });
    expect(fake.requests.map((r) => [r.rawUrl, r.status])).toEqual([
      ['/repos/old/name', 301],
      ['/repositories/42', 200],
    ]);
  });
});

describe('failures', () => {
  it('5xx, timeouts and resets are GitHubUnavailable; the ledger says error', async () => {
    const gh = clients.make({ apiUrl: fake.url, responseTimeoutMs: 300 });
    fake.fail({ path: '/users/a', status: 502 });
    fake.fail({ path: '/users/b', hang: true });
    fake.fail({ path: '/users/c', reset: true });

    const e502 = await gh.request({ purpose: 'enrich', path: '/users/a' }).catch((e) => e);
    expect(e502).toBeInstanceOf(GitHubUnavailable);
    expect(e502.status).toBe(502);
    expect(await lastLedgerRow()).toMatchObject({ outcome: 'error', status: 502, counted: true });

    const hung = await gh.request({ purpose: 'enrich', path: '/users/b' }).catch((e) => e);
    expect(hung).toBeInstanceOf(GitHubUnavailable);
    expect(hung.message).toMatch(/timeout/);
    expect(await lastLedgerRow()).toMatchObject({ outcome: 'error', status: null, counted: null });

    const reset = await gh.request({ purpose: 'enrich', path: '/users/c' }).catch((e) => e);
    expect(reset).toBeInstanceOf(GitHubUnavailable);
    expect(await lastLedgerRow()).toMatchObject({ outcome: 'error', status: null });
  });

  it('a 2xx with a truncated body is MalformedResponse, never data', async () => {
    const gh = clients.make({ apiUrl: fake.url });
    fake.fail({ path: '/events', status: 200, body: '[{"id":"1","type":"PushEv' });
    const err = await gh.request({ purpose: 'poll', path: '/events' }).catch((e) => e);
    expect(err).toBeInstanceOf(MalformedResponse);
    expect(await lastLedgerRow()).toMatchObject({ outcome: 'error', status: 200, counted: true });
  });

  it('401 is GitHubAuthFailed; a 403 that is not a rate limit is GitHubRequestFailed', async () => {
    const gh = clients.make({ apiUrl: fake.url });
    fake.fail({ path: '/users/x', status: 401, body: '{"message":"Bad credentials"}' });
    fake.fail({
      path: '/repos/a/dmca',
      status: 403,
      body: '{"message":"Repository access blocked"}',
    });
    const blocked = await gh.request({ purpose: 'enrich', path: '/repos/a/dmca' }).catch((e) => e);
    expect(blocked).toBeInstanceOf(GitHubRequestFailed);
    expect(blocked.status).toBe(403);
    expect((await gh.budget()).blockedUntil).toBeNull();
    await expect(gh.request({ purpose: 'enrich', path: '/users/x' })).rejects.toBeInstanceOf(
      GitHubAuthFailed,
    );
    // A rejected token blocks its credential on the auth ladder's first step (1 min): no
    // process repeats the 401 meanwhile, and the budget says why.
    const budget = await gh.budget();
    expect(budget.blockReason).toBe('auth');
    expect(budget.blockedUntil!.getTime() - Date.now()).toBeGreaterThan(55_000);
    expect(budget.blockedUntil!.getTime() - Date.now()).toBeLessThanOrEqual(60_000);
  });
});

describe('rate limits', () => {
  it('403 with remaining 0 is RateLimited until the reset, stored and honoured by reserve', async () => {
    const token = randomToken();
    const gh = clients.make({ apiUrl: fake.url, token });
    const resetAt = new Date(Math.ceil(Date.now() / 1000) * 1000 + 20 * 60_000);
    fake.setRateLimit({ limit: 5000, remaining: 0, resetAt }, { token });

    const err = await gh.request({ purpose: 'poll', path: '/events' }).catch((e) => e);

    expect(err).toBeInstanceOf(RateLimited);
    expect(err.retryAt.getTime()).toBe(resetAt.getTime());
    const rl = await t.db
      .selectFrom('github_rate_limits')
      .selectAll()
      .where('credential', '=', gh.credential)
      .executeTakeFirstOrThrow();
    expect(rl).toMatchObject({ remaining: 0, blocked_until: resetAt });
    expect(await reserve(gh, 'enrich')).toBeNull();
    expect((await gh.budget()).blockedUntil).toEqual(resetAt);
    expect(fake.requests).toHaveLength(1);
  });

  it('429 honours retry-after; a secondary-limit 403 without one waits at least a minute', async () => {
    const gh = clients.make({ apiUrl: fake.url });
    fake.fail({ path: '/users/a', status: 429, headers: { 'retry-after': '120' } });
    const before = Date.now();
    const e429 = await gh.request({ purpose: 'enrich', path: '/users/a' }).catch((e) => e);
    expect(e429).toBeInstanceOf(RateLimited);
    expect(e429.retryAt.getTime()).toBeGreaterThanOrEqual(before + 120_000);
    expect(e429.retryAt.getTime()).toBeLessThanOrEqual(Date.now() + 120_000);

    const gh2 = clients.make({ apiUrl: fake.url });
    fake.fail({
      path: '/users/b',
      status: 403,
      body: '{"message":"You have exceeded a secondary rate limit."}',
    });
    const e403 = await gh2.request({ purpose: 'enrich', path: '/users/b' }).catch((e) => e);
    expect(e403).toBeInstanceOf(RateLimited);
    expect(e403.retryAt.getTime()).toBeGreaterThanOrEqual(before + 60_000);
  });

  it('stops before GitHub says 403 when the observed remaining runs out', async () => {
    const token = randomToken();
    const gh = clients.make({ apiUrl: fake.url, token });
    fake.setUser(userProfile({ id: 1, login: 'a' }));
    fake.setRateLimit(
      { limit: 5000, remaining: 2, resetAt: new Date(Date.now() + 30 * 60_000) },
      { token },
    );

    await gh.request({ purpose: 'enrich', path: '/users/a' });
    await gh.request({ purpose: 'enrich', path: '/users/a' });
    expect(await reserve(gh, 'enrich')).toBeNull();
    await expect(gh.request({ purpose: 'poll', path: '/users/a' })).rejects.toMatchObject({
      code: 'BUDGET_EXHAUSTED',
    });

    expect(fake.requests.map((r) => r.status)).toEqual([200, 200]);
    expect((await gh.budget()).remaining).toBe(0);
  });
});

describe('secrets', () => {
  it('never writes the token to logs or the ledger', async () => {
    const token = `ghp_SENTINEL${randomToken()}`;
    const { logger, lines } = memoryLogger('trace');
    const gh = clients.make({ apiUrl: fake.url, token, logger, responseTimeoutMs: 300 });
    fake.setUser(userProfile({ id: 1, login: 'a' }));
    fake.fail({ path: '/users/b', status: 401, body: '{"message":"Bad credentials"}' });
    fake.fail({ path: '/users/c', reset: true });
    fake.fail({ path: '/users/d', status: 403, body: '{"message":"API rate limit exceeded"}' });

    for (const p of ['/users/a', '/users/b', '/users/c', '/users/d']) {
      await gh.request({ purpose: 'enrich', path: p, jobId: 'job-9' }).catch((err) => {
        logger.error({ err }, 'request failed');
      });
      // A 401 or a rate limit blocks the credential; lift it so every path is sent.
      await sql`UPDATE github_rate_limits SET blocked_until = NULL`.execute(t.db);
    }

    expect(fake.requests[0]!.headers.authorization).toBe(`token ${token}`);
    expect(lines.filter((l) => l.includes('"github.request"'))).toHaveLength(4);
    expect(lines.join('\n')).not.toContain('SENTINEL');
    const dump = await sql<{ t: string }>`
      SELECT string_agg(r::text, '\n') AS t FROM github_requests r`.execute(t.db);
    const rates = await sql<{ t: string }>`
      SELECT string_agg(r::text, '\n') AS t FROM github_rate_limits r`.execute(t.db);
    expect(dump.rows[0]!.t).toContain('/users/a');
    expect(dump.rows[0]!.t).not.toContain('SENTINEL');
    expect(rates.rows[0]!.t ?? '').not.toContain('SENTINEL');
  });
});
