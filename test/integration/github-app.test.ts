import { sql } from 'kysely';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { GitHubClient } from '../../src/budget/client-types.ts';
import { enrichCycle } from '../../src/enrichment/cycle.ts';
import type { EnrichDeps } from '../../src/enrichment/runner.ts';
import { BudgetExhausted, GitHubAuthFailed, PoolRejected } from '../../src/github/errors.ts';
import type { Config } from '../../src/platform/config/config.ts';
import { createLogger } from '../../src/platform/log.ts';
import { useTestDatabase } from '../support/db.ts';
import { type AppKeys, appJwt, appKeys } from '../support/github-app-keys.ts';
import { clientFactory, memoryLogger, testConfig } from '../support/github-client.ts';
import { repoProfile, userProfile } from '../support/github-factories.ts';
import { useFakeGitHub } from '../support/use-fake-github.ts';
import { insertPending } from './enrichment-fixtures.ts';

/**
 * GitHub App installations in the pool: installation tokens asked for with the
 * App's JWT at GITHUB_API_URL (the fake verifies it with the App's public key), cached and
 * replaced before they expire, a 401 right after issue retried once; each installation its
 * own budget, gate and rate window — and with two of them, a backlog one installation's
 * enrichment allowance cannot cover is resolved without a 403.
 */

const t = useTestDatabase();
const clients = clientFactory(t);
const fake = useFakeGitHub({ latencyMs: 5 });
const APP_ID = 4242;
const keys: AppKeys = appKeys();

afterEach(() => clients.closeAll());
beforeEach(async () => {
  await sql`TRUNCATE actors, repositories, enrichment_attempts, github_requests, github_rate_limits`.execute(
    t.db,
  );
});

function appEnv(installations: number[], k: AppKeys = keys): Record<string, string> {
  return {
    GITHUB_APP_ID: String(APP_ID),
    GITHUB_APP_PRIVATE_KEY: k.privateKey,
    GITHUB_APP_INSTALLATION_IDS: installations.join(','),
  };
}

function appClient(installations: number[], o: { logger?: ReturnType<typeof createLogger> } = {}) {
  return clients.make({ apiUrl: fake.url, token: null, env: appEnv(installations), ...o });
}

function addApp(
  o: { limit?: number; ttl?: number; lagMs?: number; installations?: number[] } = {},
) {
  fake.addApp({
    id: APP_ID,
    publicKey: keys.publicKey,
    installations: (o.installations ?? [101, 202]).map((id) => ({ id, limit: o.limit })),
    tokenTtlSeconds: o.ttl,
    replicationLagMs: o.lagMs,
  });
}

const tokenRequests = () => fake.requests.filter((r) => r.method === 'POST');
const apiRequests = () => fake.requests.filter((r) => r.method === 'GET');

async function mint(installationId: number, jwt: string) {
  const res = await fetch(`${fake.url}/app/installations/${installationId}/access_tokens`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${jwt}`,
      accept: 'application/vnd.github+json',
      'x-github-api-version': '2022-11-28',
    },
  });
  return { status: res.status, body: (await res.json()) as { token?: string; message?: string } };
}

describe('the fake token endpoint', () => {
  it('mints only for a JWT the App signed (RS256, iss, iat/exp) and an installation it has', async () => {
    addApp();
    const now = Math.floor(Date.now() / 1000);
    const ok = await mint(101, appJwt(keys.privateKey, { iss: APP_ID }));
    expect(ok.status).toBe(201);
    expect(ok.body.token).toMatch(/^ghs_/);
    const stranger = appKeys();
    for (const [jwt, why] of [
      [appJwt(stranger.privateKey, { iss: APP_ID }), 'signed by another key'],
      [appJwt(keys.privateKey, { iss: 999 }), 'another App'],
      [appJwt(keys.privateKey, { iss: APP_ID, exp: now - 5 }), 'expired'],
      [appJwt(keys.privateKey, { iss: APP_ID, iat: now + 300 }), 'issued in the future'],
      [appJwt(keys.privateKey, { iss: APP_ID, exp: now + 3600 }), 'longer than 10 minutes'],
      [appJwt(keys.privateKey, { iss: APP_ID }, 'HS256'), 'not RS256'],
      ['not.a.jwt', 'garbage'],
    ] as const) {
      expect((await mint(101, jwt)).status, why).toBe(401);
    }
    expect((await mint(303, appJwt(keys.privateKey, { iss: APP_ID }))).status).toBe(404);
    // A minted token answers for its installation's bucket; a made-up one is a 401.
    fake.setUser(userProfile({ id: 1, login: 'one' }));
    const as = (token: string) =>
      fetch(`${fake.url}/users/one`, {
        headers: { authorization: `token ${token}`, 'x-github-api-version': '2022-11-28' },
      });
    expect((await as(ok.body.token!)).status).toBe(200);
    expect((await as('ghs_madeup')).status).toBe(401);
    expect(fake.requests.at(-2)!.credential).toBe('installation:101');
  });
});

describe('installation credentials', () => {
  it('one token per installation, asked for with the App JWT and reused', async () => {
    addApp();
    const gh = appClient([101, 202]);
    expect(gh.credentials).toEqual(['installation:101', 'installation:202']);
    for (let i = 0; i < 8; i++) fake.setUser(userProfile({ id: i + 1, login: `u${i}` }));
    for (let i = 0; i < 8; i++) {
      expect((await gh.request({ purpose: 'enrich', path: `/users/u${i}` })).status).toBe(200);
    }
    // Two tokens (one per installation), each asked for once, with a JWT the fake verified.
    expect(fake.mintedTokens.map((m) => m.installationId).sort()).toEqual([101, 202]);
    expect(tokenRequests().map((r) => r.status)).toEqual([201, 201]);
    expect(fake.jwtsSeen).toHaveLength(2);
    // Every API request carried its installation's token; the ledger knows only the labels.
    for (const r of apiRequests()) {
      const minted = fake.mintedTokens.find(
        (m) => `installation:${m.installationId}` === r.credential,
      );
      expect(r.headers.authorization).toBe(`token ${minted!.token}`);
    }
    const ledger = await t.db
      .selectFrom('github_requests')
      .select(['credential', (eb) => eb.fn.countAll<string>().as('n')])
      .groupBy('credential')
      .orderBy('credential')
      .execute();
    expect(ledger).toEqual([
      { credential: 'installation:101', n: '4' },
      { credential: 'installation:202', n: '4' },
    ]);
  });

  it('replaces a token before it expires: no request ever meets an expired one', {
    timeout: 60_000,
  }, async () => {
    addApp({ ttl: 4, installations: [101] }); // refreshed 1 s before it expires
    const gh = appClient([101]);
    fake.setUser(userProfile({ id: 1, login: 'one' }));
    // Requests until two replacements happened under them and at least 20 went out: counted
    // by what happened, not by a wall-clock window (a loaded machine sends fewer in 7 s).
    let n = 0;
    while (fake.mintedTokens.length < 3 || n < 20) {
      expect((await gh.request({ purpose: 'enrich', path: '/users/one' })).status).toBe(200);
      n++;
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(fake.mintedTokens.length).toBeGreaterThanOrEqual(3);
    expect(apiRequests().filter((r) => r.status !== 200)).toEqual([]);
    // Each request used a token that had more than the margin left when it went out.
    for (const r of apiRequests()) {
      const used = fake.mintedTokens.find((m) => r.headers.authorization === `token ${m.token}`)!;
      expect(used.expiresAt.getTime()).toBeGreaterThan(r.startedAt.getTime());
    }
  });

  it('a 401 just after a token is issued is tried once more, a second later, and succeeds', async () => {
    addApp({ lagMs: 600, installations: [101] }); // GitHub has not replicated it yet
    const gh = appClient([101]);
    fake.setUser(userProfile({ id: 1, login: 'one' }));
    const res = await gh.request({ purpose: 'enrich', path: '/users/one' });
    expect(res.status).toBe(200);
    const [first, second] = apiRequests();
    expect([first!.status, second!.status]).toEqual([401, 200]);
    expect(second!.headers.authorization).toBe(first!.headers.authorization); // the same token
    expect(second!.startedAt.getTime() - first!.startedAt.getTime()).toBeGreaterThanOrEqual(900);
    expect(fake.mintedTokens).toHaveLength(1);
    // One logical request, one ledger row, and no auth failure recorded.
    const rows = await t.db.selectFrom('github_requests').selectAll().execute();
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ outcome: 'completed', status: 200, counted: true });
    const budget = await gh.budget();
    expect(budget.blockedUntil).toBeNull();
    const rl = await t.db.selectFrom('github_rate_limits').selectAll().executeTakeFirstOrThrow();
    expect(rl).toMatchObject({
      credential: 'installation:101',
      auth_failures: 0,
      block_reason: null,
    });
  });

  it('a 401 on an older token (revoked) gets a new token at once and is tried once more', async () => {
    addApp({ installations: [101] });
    const gh = appClient([101]);
    fake.setUser(userProfile({ id: 1, login: 'one' }));
    expect((await gh.request({ purpose: 'enrich', path: '/users/one' })).status).toBe(200);
    await new Promise((r) => setTimeout(r, 5_200)); // no longer "just issued"
    fake.revokeInstallationTokens(101);
    expect((await gh.request({ purpose: 'enrich', path: '/users/one' })).status).toBe(200);
    expect(apiRequests().map((r) => r.status)).toEqual([200, 401, 200]);
    expect(fake.mintedTokens).toHaveLength(2);
    expect(apiRequests()[2]!.headers.authorization).toBe(`token ${fake.mintedTokens[1]!.token}`);
  });

  it('an installation that cannot get a token is blocked on the auth ladder; the other carries on', async () => {
    addApp();
    fake.removeInstallation(202); // uninstalled: its token request is a 404
    const { logger, lines } = memoryLogger('debug');
    const gh = appClient([101, 202], { logger });
    for (let i = 0; i < 6; i++) fake.setUser(userProfile({ id: i + 1, login: `u${i}` }));
    const outcomes: string[] = [];
    for (let i = 0; i < 6; i++) {
      const r = await gh
        .request({ purpose: 'enrich', path: `/users/u${i}` })
        .then((x) => String(x.status))
        .catch((e) => (e instanceof GitHubAuthFailed ? `401:${e.credential}` : String(e)));
      outcomes.push(r);
    }
    // No request was lost to 202: the one that met it (nothing sent) went on to 101.
    expect(outcomes).toEqual(Array(6).fill('200'));
    expect(apiRequests().every((r) => r.credential === 'installation:101')).toBe(true);
    const budget = await gh.budget();
    expect(budget.credentials.map((c) => [c.credential, c.blockReason])).toEqual([
      ['installation:101', null],
      ['installation:202', 'auth'],
    ]);
    // The reservation made for 202 went back unspent.
    const unspent = await t.db
      .selectFrom('github_requests')
      .select(['outcome', 'sent_at', 'error'])
      .where('credential', '=', 'installation:202')
      .execute();
    expect(unspent).toEqual([
      {
        outcome: 'abandoned',
        sent_at: null,
        error: expect.stringMatching(/installation 202: HTTP 404/),
      },
    ]);
    expect(lines.some((l) => l.includes('"event":"github.installation_token_failed"'))).toBe(true);
    for (const jwt of fake.jwtsSeen) expect(lines.join('\n')).not.toContain(jwt);
  });

  it('a key GitHub does not know: every installation blocked, the pool says GITHUB_AUTH_FAILED', async () => {
    addApp();
    const gh = clients.make({
      apiUrl: fake.url,
      token: null,
      env: appEnv([101, 202], appKeys()), // not the key the App registered
    });
    fake.setUser(userProfile({ id: 1, login: 'one' }));
    // One request tries each installation in turn, then names them both.
    const err = await gh.request({ purpose: 'enrich', path: '/users/one' }).catch((e) => e);
    expect(err).toBeInstanceOf(PoolRejected);
    expect(err.message).toMatch(
      /^GitHub rejected all 2 credentials \(401\): installation:101 since /,
    );
    expect(err.message).toContain('installation:202 since ');
    expect(err.message).toMatch(/check GitHub App installation:\d+ \(GITHUB_APP_ID/);
    expect(apiRequests()).toEqual([]);
    expect(tokenRequests().map((r) => r.status)).toEqual([401, 401]);
    // The next one is refused before anything is sent, and says the same.
    const refused = await gh.request({ purpose: 'enrich', path: '/users/one' }).catch((e) => e);
    expect(refused).toBeInstanceOf(BudgetExhausted);
    expect(refused.message).toMatch(/^nothing sent: GitHub rejected all 2 credentials \(401\)/);
    expect(tokenRequests()).toHaveLength(2);
    const d = await gh.tryReserve('enrich');
    expect(d).toMatchObject({ ok: false, reason: 'blocked', blockReason: 'auth' });
    expect((d as { rejected?: unknown[] }).rejected).toHaveLength(2);
  });
});

/** A runner as a worker process runs one: its own client (gate sessions, its own tokens). */
function runner(config: Config, i: number): EnrichDeps & { github: GitHubClient } {
  const github = clients.make({ apiUrl: fake.url, token: null, env: envOf(config) });
  return { config, db: t.db, github, logger: createLogger('silent'), workerId: `runner-${i}` };
}
const envOf = (c: Config): Record<string, string> => ({
  GITHUB_APP_ID: c.github.app!.id,
  GITHUB_APP_PRIVATE_KEY: keys.privateKey,
  GITHUB_APP_INSTALLATION_IDS: c.github.app!.installationIds.join(','),
});

/** Runners enrich both classes in turn until every cycle stops without having done anything. */
async function enrichAll(runners: EnrichDeps[], maxEntities?: number): Promise<string[]> {
  const stops: string[] = [];
  await Promise.all(
    runners.map(async (deps) => {
      for (let done = 0; ; ) {
        let progressed = false;
        for (const cls of ['actor', 'repository'] as const) {
          const s = await enrichCycle(deps, cls, { maxEntities: 5 });
          stops.push(s.stoppedBy);
          done += s.processed;
          if (s.processed > 0) progressed = true;
        }
        if (!progressed || (maxEntities !== undefined && done >= maxEntities)) return;
      }
    }),
  );
  return stops;
}

describe('two installations against one backlog', () => {
  // Each installation: 30 requests an hour, of which enrichment may spend 20.
  const LIMIT = 30;
  const PER_CLASS = 18; // 36 entities: more than one installation's 20, within two's 40

  async function backlog() {
    fake.setRateLimit({ resetAt: new Date(Date.now() + 1800_000) }); // mid-window
    const actors = await insertPending(t.db, 'actor', PER_CLASS, { firstId: 1000 });
    const repos = await insertPending(t.db, 'repository', PER_CLASS, { firstId: 5000 });
    for (const id of actors) fake.setUser(userProfile({ id, login: `user-${id}` }));
    for (const id of repos) fake.setRepo(repoProfile({ id, full_name: `owner-${id}/repo-${id}` }));
  }

  async function states() {
    const r = await sql<{ state: string; n: number }>`
      SELECT enrichment_state AS state, count(*)::int AS n FROM (
        SELECT enrichment_state FROM actors UNION ALL SELECT enrichment_state FROM repositories) x
      GROUP BY 1 ORDER BY 1`.execute(t.db);
    return Object.fromEntries(r.rows.map((x) => [x.state, x.n]));
  }

  it('one installation enriches its allowance and stops: the backlog is too big for it', async () => {
    addApp({ limit: LIMIT, installations: [101] });
    await backlog();
    const config = testConfig(t, { apiUrl: fake.url, token: null, env: appEnv([101]) });
    const stops = await enrichAll([runner(config, 1), runner(config, 2)]);
    expect(await states()).toEqual({ enriched: 20, pending: 16 });
    expect(stops).toContain('budget_exhausted');
    expect(fake.requests.filter((r) => r.status === 403)).toEqual([]);
  });

  it('two installations resolve all of it: both used, one request in flight each, no 403, no refetch, tokens renewed without a failed attempt', {
    timeout: 60_000,
  }, async () => {
    // Tokens live 3 s (renewed 0.75 s early), and the run is paused past that half-way.
    addApp({ limit: LIMIT, ttl: 3 });
    await backlog();
    fake.fail({ path: /^\/(users|repos)\//, delayMs: 20, times: Number.POSITIVE_INFINITY });
    const config = testConfig(t, { apiUrl: fake.url, token: null, env: appEnv([101, 202]) });
    const runners = [runner(config, 1), runner(config, 2), runner(config, 3)];

    await enrichAll(runners, 6);
    const mintedBefore = fake.mintedTokens.length;
    await new Promise((r) => setTimeout(r, 3_000)); // every token now past its renewal
    await enrichAll(runners);

    expect(await states()).toEqual({ enriched: 36 });
    const profiles = apiRequests();
    const by = (credential: string) => profiles.filter((r) => r.credential === credential).length;
    // Both installations carried it, neither beyond its enrichment allowance of 20.
    expect(by('installation:101') + by('installation:202')).toBe(36);
    expect(by('installation:101')).toBeGreaterThan(0);
    expect(by('installation:202')).toBeGreaterThan(0);
    expect(by('installation:101')).toBeLessThanOrEqual(20);
    expect(by('installation:202')).toBeLessThanOrEqual(20);
    // Never two in flight per credential; no secondary limit, no primary 403, no 401.
    expect(fake.maxInFlightByCredential['installation:101']).toBe(1);
    expect(fake.maxInFlightByCredential['installation:202']).toBe(1);
    expect(fake.maxInFlightByCredential[`app:${APP_ID}`]).toBe(1); // token requests too
    expect(fake.secondaryLimitHits).toBe(0);
    expect(profiles.filter((r) => r.status !== 200)).toEqual([]);
    // No entity fetched twice.
    expect(new Set(profiles.map((r) => r.path)).size).toBe(36);
    // Tokens expired during the run and were replaced before use: every attempt succeeded.
    expect(fake.mintedTokens.length).toBeGreaterThan(mintedBefore);
    const attempts = await sql<{ outcome: string; n: number }>`
      SELECT outcome, count(*)::int AS n FROM enrichment_attempts GROUP BY 1`.execute(t.db);
    expect(attempts.rows).toEqual([{ outcome: 'enriched', n: 36 }]);
  });
});
