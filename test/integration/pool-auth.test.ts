import { sql } from 'kysely';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { recordAuthFailure } from '../../src/budget/rate-limits.ts';
import { BudgetExhausted, PoolRejected } from '../../src/github/errors.ts';
import { tokenLabel } from '../../src/platform/config/credential-label.ts';
import { readStatus } from '../../src/status/model.ts';
import { addSource } from '../../src/store/sources.ts';
import { captureLogger } from '../recovery/helpers.ts';
import { runBin } from '../support/cli.ts';
import { useTestDatabase } from '../support/db.ts';
import { clientFactory, randomToken, reserve, testConfig } from '../support/github-client.ts';
import { pushEvent, userProfile } from '../support/github-factories.ts';
import { spendRows } from '../support/ledger-factories.ts';
import { useFakeGitHub } from '../support/use-fake-github.ts';
import { insertPending, statesOf } from './enrichment-fixtures.ts';

/**
 * A credential GitHub rejects (401) leaves the pool, not the pool out of
 * service. The request it failed goes to another credential on a new reservation (the
 * ledger keeps both rows), the run or pass carries on, and only when every credential is
 * rejected does work stop, with a message naming each one, since when and until when.
 */

const t = useTestDatabase();
const clients = clientFactory(t);
const fake = useFakeGitHub();

afterEach(() => clients.closeAll());
beforeEach(async () => {
  await sql`TRUNCATE actors, repositories, enrichment_attempts, github_requests, github_rate_limits`.execute(
    t.db,
  );
});

/**
 * GITHUB_TOKENS=revoked,good, the revoked one answered 401 by the fake. The good one has
 * already spent a little (another process), so the pool's choice — the most room left —
 * sends the first request to the revoked one: the case under test, every time.
 */
async function revokedAndGood() {
  const revoked = randomToken();
  const good = randomToken();
  fake.revokeToken(revoked);
  await spendRows(t.db, tokenLabel(good), 'poll', 3);
  await spendRows(t.db, tokenLabel(good), 'enrich', 3);
  return {
    env: { GITHUB_TOKENS: `${revoked},${good}` },
    revoked: tokenLabel(revoked),
    good: tokenLabel(good),
  };
}

async function bothRevoked() {
  const tokens = [randomToken(), randomToken()];
  for (const tok of tokens) fake.revokeToken(tok);
  return { env: { GITHUB_TOKENS: tokens.join(',') }, labels: tokens.map(tokenLabel) };
}

/** The ledger rows this test's requests made (not the spend planted by revokedAndGood). */
async function ledger() {
  return t.db
    .selectFrom('github_requests')
    .select(['credential', 'path', 'status', 'outcome', 'counted'])
    .where('path', '<>', '/elsewhere')
    .orderBy('id')
    .execute();
}

function spawn(name: string, argv: string[], env: Record<string, string>) {
  return runBin(name, argv, {
    DATABASE_URL: t.url,
    GITHUB_API_URL: fake.url,
    GITHUB_MODE: 'live',
    LOG_LEVEL: 'silent',
    GITHUB_TOKEN: undefined,
    ...env,
  });
}

describe('a request that gets a 401 in a pool', () => {
  it('is sent again on another credential; both ledger rows are kept, the rejected one blocked with its reason', async () => {
    const { env, revoked, good } = await revokedAndGood();
    const { logger, events } = captureLogger('debug');
    const gh = clients.make({ apiUrl: fake.url, token: null, env, logger });
    fake.setUser(userProfile({ id: 1, login: 'one' }));

    const r = await gh.request({ purpose: 'enrich', path: '/users/one' });

    expect(r.status).toBe(200);
    expect(fake.requests.map((q) => [q.credential, q.status])).toEqual([
      ['invalid', 401],
      [good, 200],
    ]);
    expect(await ledger()).toEqual([
      { credential: revoked, path: '/users/one', status: 401, outcome: 'error', counted: true },
      { credential: good, path: '/users/one', status: 200, outcome: 'completed', counted: true },
    ]);
    const served = await t.db
      .selectFrom('github_requests')
      .select('id')
      .where('credential', '=', good)
      .where('path', '=', '/users/one')
      .executeTakeFirstOrThrow();
    expect(r.requestId).toBe(Number(served.id));
    const rejected = events('github.credential_rejected');
    expect(rejected).toHaveLength(1);
    expect(rejected[0]).toMatchObject({ credential: revoked, path: '/users/one', level: 'warn' });

    // /status shows the block with its reason; the good credential is not blocked.
    const status = await readStatus({
      db: t.db,
      config: testConfig(t, { apiUrl: fake.url, token: null, env }),
    });
    const byLabel = new Map(status.credentials.map((c) => [c.label, c]));
    expect(byLabel.get(revoked)).toMatchObject({
      blocked: true,
      blockReason: 'auth',
      authBlock: { failures: 1, error: 'HTTP 401: Bad credentials' },
    });
    expect(byLabel.get(revoked)!.authBlock!.since).toBeInstanceOf(Date);
    expect(byLabel.get(good)).toMatchObject({ blocked: false, authBlock: null });
    expect(status.budget!.blockedUntil).toBeNull();
  });

  it('a pre-made reservation (enrichment) is replaced by a new one on the good credential', async () => {
    const { env, revoked, good } = await revokedAndGood();
    const gh = clients.make({ apiUrl: fake.url, token: null, env });
    fake.setUser(userProfile({ id: 2, login: 'two' }));
    const reservation = await reserve(gh, 'enrich', { path: '/users/two' });
    expect(reservation!.credential).toBe(revoked);

    const r = await gh.request({
      purpose: 'enrich',
      path: '/users/two',
      reservation: reservation!,
    });

    expect(r.status).toBe(200);
    expect(r.requestId).not.toBe(reservation!.id);
    const rows = await ledger();
    expect(rows.map((x) => [x.credential, x.status])).toEqual([
      [revoked, 401],
      [good, 200],
    ]);
  });

  it('when every credential is rejected: PoolRejected names each, since when and until when; then nothing is sent', async () => {
    const { env, labels } = await bothRevoked();
    const gh = clients.make({ apiUrl: fake.url, token: null, env });
    fake.setUser(userProfile({ id: 3, login: 'three' }));

    const err = await gh.request({ purpose: 'poll', path: '/users/three' }).catch((e) => e);

    expect(err).toBeInstanceOf(PoolRejected);
    expect(err.code).toBe('GITHUB_AUTH_FAILED');
    const blocks = (err as PoolRejected).blocks;
    expect(blocks.map((b) => b.credential)).toEqual(labels);
    for (const b of blocks) {
      expect(err.message).toContain(
        `${b.credential} since ${b.since.toISOString()}, blocked until ${b.until.toISOString()} (HTTP 401: Bad credentials)`,
      );
    }
    expect(err.message).toMatch(/^GitHub rejected all 2 credentials \(401\)/);
    expect((await ledger()).map((x) => x.status)).toEqual([401, 401]);

    // The next request is refused before anything goes out, and says the same.
    const sent = fake.requests.length;
    const refused = await gh.request({ purpose: 'poll', path: '/users/three' }).catch((e) => e);
    expect(refused).toBeInstanceOf(BudgetExhausted);
    expect(refused.blockReason).toBe('auth');
    expect(refused.message).toMatch(/^nothing sent: GitHub rejected all 2 credentials \(401\)/);
    for (const l of labels) expect(refused.message).toContain(l);
    expect(fake.requests.length).toBe(sent);
  });
});

describe('the reason kept with an auth block', () => {
  it("is GitHub's message, without control characters, at most 200 characters", async () => {
    const env = { GITHUB_TOKENS: `${randomToken()},${randomToken()}` };
    const gh = clients.make({ apiUrl: fake.url, token: null, env });
    fake.setUser(userProfile({ id: 4, login: 'four' }));
    const hostile = `Bad\r\n\u001b[31mcredentials ${'x'.repeat(5_000)}`;
    fake.fail({ path: '/users/four', status: 401, body: JSON.stringify({ message: hostile }) });

    // Whichever credential meets the 401 is set aside; the other serves the request.
    expect((await gh.request({ purpose: 'enrich', path: '/users/four' })).status).toBe(200);

    const row = await t.db
      .selectFrom('github_rate_limits')
      .select('auth_error')
      .where('credential', '=', fake.requests[0]!.credential)
      .executeTakeFirstOrThrow();
    expect(row.auth_error).toMatch(/^HTTP 401: Bad \[31mcredentials x+$/);
    expect(row.auth_error!.length).toBe(200);
  });
});

describe('bin/ingest with GITHUB_TOKENS=revoked,good', () => {
  it('completes the run on the good token (exit 0), the push stored once, the source not deferred', async () => {
    const { env, revoked, good } = await revokedAndGood();
    const { source } = await addSource(t.db, { kind: 'repo', target: 'auth/ingest' }, 'live');
    fake.addEvents('repo:auth/ingest', [pushEvent(), pushEvent()]);

    const r = await spawn('ingest', [], env);

    expect(r.err).toBe('');
    expect(r.code).toBe(0);
    expect(r.out).toMatch(
      new RegExp(`^source ${source.id} repo auth/ingest: completed: 2 events seen, 2 created`),
    );
    const pushes = await t.db.selectFrom('push_events').select('id').execute();
    expect(pushes).toHaveLength(2);
    const row = await t.db
      .selectFrom('event_sources')
      .selectAll()
      .where('id', '=', source.id)
      .executeTakeFirstOrThrow();
    expect(row).toMatchObject({ consecutive_failures: 0, last_error: null });
    expect((await ledger()).map((x) => [x.credential, x.status])).toEqual([
      [revoked, 401],
      [good, 200],
    ]);
  });

  it('the last credential left rejected, the others already blocked: PoolRejected, a failure of the source', async () => {
    const { env, labels } = await bothRevoked();
    const [first, second] = labels as [string, string];
    // The second was blocked by an earlier 401: only the first is tried, and it is rejected.
    await recordAuthFailure(t.db, second, new Date(), 5000, 'HTTP 401: Bad credentials');
    const { source } = await addSource(t.db, { kind: 'repo', target: 'auth/last' }, 'live');
    fake.addEvents('repo:auth/last', [pushEvent()]);

    const r = await spawn('ingest', [], env);

    expect(r.code).toBe(1);
    expect(r.out).toContain(
      `GITHUB_AUTH_FAILED: GitHub rejected all 2 credentials (401): ${first} since `,
    );
    expect(r.out).not.toMatch(/budget/);
    const row = await t.db
      .selectFrom('event_sources')
      .selectAll()
      .where('id', '=', source.id)
      .executeTakeFirstOrThrow();
    expect(row.consecutive_failures).toBe(1);
  });

  it('all revoked: the run fails (exit 1) with a line naming every credential', async () => {
    const { env, labels } = await bothRevoked();
    const { source } = await addSource(t.db, { kind: 'repo', target: 'auth/none' }, 'live');
    fake.addEvents('repo:auth/none', [pushEvent()]);

    const r = await spawn('ingest', [], env);

    expect(r.code).toBe(1);
    expect(r.out).toMatch(
      new RegExp(
        `^source ${source.id} repo auth/none: failed \\(GITHUB_AUTH_FAILED: GitHub rejected all 2 credentials \\(401\\): ${labels[0]} since `,
      ),
    );
    expect(r.out).toContain(`${labels[1]} since `);
    expect(r.out).not.toMatch(/budget/);
  });
});

describe('bin/enrich with GITHUB_TOKENS=revoked,good', () => {
  it('--limit 3 completes with a summary: 3 enriched on the good token (exit 0)', async () => {
    const { env, revoked, good } = await revokedAndGood();
    const actors = await insertPending(t.db, 'actor', 4, { firstId: 500 });
    for (const id of actors) fake.setUser(userProfile({ id, login: `user-${id}` }));

    const r = await spawn('enrich', ['--limit', '3', '--class', 'actor'], env);

    expect(r.err).toBe('');
    expect(r.code).toBe(0);
    const lines = r.out.trim().split('\n');
    expect(lines.slice(0, 3).every((l) => / enriched \(200\)$/.test(l))).toBe(true);
    expect(lines[3]).toMatch(/^enrich: 3\/3 done \(enriched 3,.*stopped: limit reached/);
    expect((await statesOf(t.db, 'actor')).enriched).toBe(3);
    const rows = await ledger();
    expect(rows.filter((x) => x.credential === revoked).map((x) => x.status)).toEqual([401]);
    expect(rows.filter((x) => x.credential === good).map((x) => x.status)).toEqual([200, 200, 200]);
  });

  it('all revoked: the summary says GitHub rejected every credential (naming them), exit 1', async () => {
    const { env, labels } = await bothRevoked();
    await insertPending(t.db, 'actor', 2, { firstId: 600 });

    const r = await spawn('enrich', ['--limit', '2', '--json'], env);

    expect(r.code).toBe(1);
    const summary = JSON.parse(r.out);
    expect(summary).toMatchObject({
      done: 0,
      stoppedBy: 'auth',
      error: { code: 'GITHUB_AUTH_FAILED' },
    });
    for (const l of labels) expect(summary.error.message).toContain(`${l} since `);
    expect(r.err).toContain('GitHub rejected all 2 credentials (401)');
    expect((await statesOf(t.db, 'actor')).pending).toBe(2);

    // Once blocked, a second pass sends nothing and names the auth failure, not the budget.
    const sent = fake.requests.length;
    const again = await spawn('enrich', ['--limit', '2'], env);
    expect(again.code).toBe(1);
    expect(again.out).toMatch(
      /^enrich: 0\/2 done .* stopped: GitHub rejected every credential \(401\): GitHub rejected all 2 credentials/,
    );
    expect(again.out).not.toContain('budget says no');
    expect(fake.requests.length).toBe(sent);
  });
});
