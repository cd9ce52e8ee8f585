import { sql } from 'kysely';
import { afterEach, describe, expect, it } from 'vitest';
import { recordAuthFailure } from '../../src/budget/rate-limits.ts';
import { reserveIfFree } from '../../src/budget/reserve.ts';
import { pollIntervalFloorSeconds, snapshotRefuses } from '../../src/budget/snapshot.ts';
import { budgetStateStatement } from '../../src/budget/window.ts';
import { type Clock, fixedClock } from '../../src/platform/clock.ts';
import { tokenLabel } from '../../src/platform/config/credential-label.ts';
import { int4Key, LockSpace } from '../../src/platform/db/locks.ts';
import { deferralOf } from '../../src/poll/deferral.ts';
import { pollDueSources } from '../../src/poll/poll-due.ts';
import { addSource } from '../../src/store/sources.ts';
import { captureLogger } from '../recovery/helpers.ts';
import { useTestDatabase } from '../support/db.ts';
import { clientFactory, randomToken, reserve, testConfig } from '../support/github-client.ts';
import { pushEvent, userProfile } from '../support/github-factories.ts';
import { spendRows } from '../support/ledger-factories.ts';
import { explain, indexReads, seqScans } from '../support/plans.ts';
import { useFakeGitHub } from '../support/use-fake-github.ts';

/**
 * A pool of credentials (ADR 0050): GITHUB_TOKENS gives each token its own
 * budget, ledger rows and request gate; a request goes to the credential with the most of
 * its purpose's allowance left; the pool refuses only when every credential does, and
 * then frees when the first one does; a credential GitHub rejects is blocked alone.
 */

const t = useTestDatabase();
const clients = clientFactory(t);
const fake = useFakeGitHub();

afterEach(() => clients.closeAll());

/** A client over a pool of `n` fresh tokens (and the tokens, for the fake's buckets). */
function pool(n = 2, o: { gateWaitSeconds?: number; clock?: Clock } = {}) {
  const tokens = Array.from({ length: n }, randomToken);
  const gh = clients.make({
    apiUrl: fake.url,
    token: null,
    env: { GITHUB_TOKENS: tokens.join(',') },
    ...o,
  });
  return { gh, tokens, labels: tokens.map(tokenLabel) };
}

/** What GitHub last said about a credential: its quota, what is left, when it resets. */
async function observed(
  credential: string,
  o: { quota: number; remaining?: number; resetInMinutes: number; now?: Date },
) {
  const now = o.now ?? new Date();
  await t.db
    .insertInto('github_rate_limits')
    .values({
      credential,
      quota: o.quota,
      remaining: o.remaining ?? o.quota,
      reset_at: new Date(Math.ceil(now.getTime() / 1000) * 1000 + o.resetInMinutes * 60_000),
      observed_at: new Date(now.getTime() - 30 * 60_000),
    })
    .execute();
}

/** `n` requests of `purpose` another process already spent on `credential` in this window. */
const spend = (credential: string, purpose: 'poll' | 'enrich', n: number) =>
  spendRows(t.db, credential, purpose, n);

async function reservedOn(ids: number[]): Promise<Record<string, number>> {
  const rows = await t.db
    .selectFrom('github_requests')
    .select(['credential', (eb) => eb.fn.countAll<string>().as('n')])
    .where(
      'id',
      'in',
      ids.map((id) => String(id)),
    )
    .groupBy('credential')
    .execute();
  return Object.fromEntries(rows.map((r) => [r.credential, Number(r.n)]));
}

describe('the pool', () => {
  it('is labelled by fingerprints, in configuration order, and never holds a token in a row', async () => {
    const { gh, tokens, labels } = pool(3);
    expect(gh.credentials).toEqual(labels);
    expect(gh.credential).toBe(labels[0]);
    fake.setUser(userProfile({ id: 1, login: 'one' }));
    await gh.request({ purpose: 'enrich', path: '/users/one' });
    const rows = await sql<{ t: string }>`
      SELECT string_agg(x::text, E'\n') AS t FROM github_requests x`.execute(t.db);
    for (const token of tokens) expect(rows.rows[0]!.t).not.toContain(token);
  });

  it('sends each request to the credential with the most of its purpose allowance left', async () => {
    const { gh, labels } = pool(2);
    const [a, b] = labels as [string, string];
    await spend(a, 'enrich', 30);
    await spend(b, 'enrich', 10);
    await spend(b, 'poll', 25);
    const enrich = await reserve(gh, 'enrich');
    const poll = await reserve(gh, 'poll');
    expect(enrich!.credential).toBe(b);
    expect(poll!.credential).toBe(a);
  });

  it('spreads a run of reservations evenly: open ones count as spent', async () => {
    const { gh, labels } = pool(2);
    const ids: number[] = [];
    for (let i = 0; i < 20; i++) ids.push((await reserve(gh, 'enrich'))!.id);
    expect(await reservedOn(ids)).toEqual({ [labels[0]!]: 10, [labels[1]!]: 10 });
  });

  it("skips a credential whose budget lock another reservation holds; waits only when every one's is held", async () => {
    const { gh, labels } = pool(2);
    const [a, b] = labels as [string, string];
    // a has the most room, so it is the first choice.
    await spend(b, 'enrich', 10);
    const other = await t.pool.connect();
    try {
      await other.query('BEGIN');
      await other.query('SELECT pg_advisory_xact_lock($1, $2)', [LockSpace.budget, int4Key(a)]);
      // a's lock is held by another transaction: the reservation goes to b at once.
      expect((await reserve(gh, 'enrich'))!.credential).toBe(b);
      await other.query('SELECT pg_advisory_xact_lock($1, $2)', [LockSpace.budget, int4Key(b)]);
      // Both held: it waits (for the best one, a) until the other transaction ends.
      let done = false;
      const waiting = reserve(gh, 'enrich').then((r) => {
        done = true;
        return r;
      });
      await new Promise((r) => setTimeout(r, 300));
      expect(done).toBe(false);
      await other.query('COMMIT');
      expect((await waiting)!.credential).toBe(a);
    } finally {
      other.release();
    }
  });

  it('reserveIfFree never waits: every lock held elsewhere is null, not a no and not a wait', async () => {
    const { labels } = pool(2);
    const policy = {
      credentials: labels.map((label) => ({ label, defaultQuota: 5000 })),
      share: 2 / 3,
    };
    const other = await t.pool.connect();
    try {
      await other.query('BEGIN');
      for (const label of labels) {
        await other.query('SELECT pg_advisory_xact_lock($1, $2)', [
          LockSpace.budget,
          int4Key(label),
        ]);
      }
      const d = await t.db
        .transaction()
        .execute((trx) =>
          reserveIfFree(trx, policy, 'enrich', { now: new Date(), path: '/users/x' }, new Set()),
        );
      expect(d).toBeNull();
      await other.query('ROLLBACK');
      const free = await t.db
        .transaction()
        .execute((trx) =>
          reserveIfFree(trx, policy, 'enrich', { now: new Date(), path: '/users/x' }, new Set()),
        );
      expect(free?.ok).toBe(true);
    } finally {
      other.release();
    }
  });

  it('a credential the cheap choice over-counts (its window starts mid-minute) is still chosen exactly', async () => {
    // The client's clock is set so that a's window starts 10 s into a minute, wherever the
    // wall clock is in its own minute: the spends 1 s before the window start share its minute.
    const clock = fixedClock(new Date(Math.floor(Date.now() / 60_000) * 60_000 + 10_000));
    const { gh, labels } = pool(2, { clock });
    const [a, b] = labels as [string, string];
    // b's allowance is spent. a's window starts inside a minute whose earlier part holds
    // spends that left the window: the whole-minute counters see a as full too, the exact
    // window does not.
    await observed(a, { quota: 60, resetInMinutes: 40, now: clock.now() });
    await observed(b, { quota: 60, resetInMinutes: 40, now: clock.now() });
    await spendRows(t.db, b, 'enrich', 40, { at: new Date(clock.now().getTime() - 60_000) });
    const aStart = (await gh.budget()).credentials.find((c) => c.credential === a)!;
    const windowStart = new Date(aStart.resetAt!.getTime() - 3600_000 - 60_000);
    expect(windowStart.getUTCSeconds()).toBe(10);
    const before = new Date(windowStart.getTime() - 1000);
    await spendRows(t.db, a, 'enrich', 40, { at: before });
    const d = await gh.tryReserve('enrich');
    expect(d.ok).toBe(true);
    if (d.ok) expect(d.reservation.credential).toBe(a);
  });

  it('refuses only when every credential refuses, until the first one frees', async () => {
    const { gh, labels } = pool(2);
    const [a, b] = labels as [string, string];
    await observed(a, { quota: 60, resetInMinutes: 40 });
    await observed(b, { quota: 60, resetInMinutes: 20 });
    await spend(a, 'enrich', 40);
    await spend(b, 'enrich', 39);
    const last = await reserve(gh, 'enrich');
    expect(last!.credential).toBe(b);

    const d = await gh.tryReserve('enrich');
    expect(d.ok).toBe(false);
    if (d.ok) return;
    // b resets first: that is when the pool frees.
    expect(d.reason).toBe('allowance');
    expect(d.credential).toBe(b);
    const bReset = (await gh.budget()).credentials.find((c) => c.credential === b)!.resetAt!;
    expect(d.retryAt).toEqual(bReset);
    // Polls still have room on both.
    expect(await reserve(gh, 'poll')).not.toBeNull();
    const total = await gh.budget();
    expect(snapshotRefuses(total, 'enrich')).toBe(true);
    expect(snapshotRefuses(total, 'poll')).toBe(false);
  });

  it('a credential blocked by a 401 is skipped while the others carry on', async () => {
    const { gh, labels } = pool(2);
    const [a, b] = labels as [string, string];
    const block = await recordAuthFailure(t.db, a, new Date(), 5000);
    const ids: number[] = [];
    for (let i = 0; i < 6; i++) ids.push((await reserve(gh, 'poll'))!.id);
    expect(await reservedOn(ids)).toEqual({ [b]: 6 });

    const total = await gh.budget();
    expect(total.blockedUntil).toBeNull(); // the pool is not blocked: one of two is
    expect(total.credentials.map((c) => [c.credential, c.blockReason])).toEqual([
      [a, 'auth'],
      [b, null],
    ]);
    expect(snapshotRefuses(total, 'poll')).toBe(false);

    // b spent too: the pool refuses, until the first to free (a's block ends in a minute),
    // and the reason is b's budget — one rejected token is not why the pool waits.
    await observed(b, { quota: 60, resetInMinutes: 30 });
    await spend(b, 'poll', 20);
    const d = await gh.tryReserve('poll');
    expect(d).toMatchObject({ ok: false, reason: 'allowance', retryAt: block.until });
    expect(deferralOf(d as Extract<typeof d, { ok: false }>).authError).toBeNull();
  });

  it('is an auth failure only when every credential is rejected', async () => {
    const { gh, labels } = pool(2);
    const now = new Date();
    const first = await recordAuthFailure(t.db, labels[1]!, now, 5000);
    await recordAuthFailure(t.db, labels[0]!, now, 5000);
    await recordAuthFailure(t.db, labels[0]!, now, 5000); // a's second 401: a longer block
    const d = await gh.tryReserve('enrich');
    expect(d).toMatchObject({
      ok: false,
      reason: 'blocked',
      blockReason: 'auth',
      credential: labels[1],
      retryAt: first.until,
    });
    const deferral = deferralOf(d as Extract<typeof d, { ok: false }>);
    // Every credential named, since when and until when.
    expect(deferral.authError).toMatch(
      new RegExp(
        `^GITHUB_AUTH_FAILED: GitHub rejected all 2 credentials \\(401\\): ${labels[0]} since ${now.toISOString()}, blocked until .*; ${labels[1]} since ${now.toISOString()}, blocked until ${first.until.toISOString()}`,
      ),
    );
    expect(deferral.authError).toContain('GITHUB_TOKENS');
    expect((await gh.budget()).blockReason).toBe('auth');
  });

  it('concurrent reservations of two processes never exceed any credential allowance', async () => {
    const tokens = [randomToken(), randomToken()];
    const env = { GITHUB_TOKENS: tokens.join(',') };
    const p1 = clients.make({ apiUrl: fake.url, token: null, env });
    const p2 = clients.make({ apiUrl: fake.url, token: null, env });
    const [a, b] = tokens.map(tokenLabel) as [string, string];
    await observed(a, { quota: 60, resetInMinutes: 30 });
    await observed(b, { quota: 60, resetInMinutes: 30 });
    await spend(a, 'enrich', 36); // 4 left of 40
    await spend(b, 'enrich', 33); // 7 left
    const results = await Promise.all(
      Array.from({ length: 30 }, (_, i) => reserve(i % 2 ? p1 : p2, 'enrich')),
    );
    const granted = results.filter((r) => r !== null);
    expect(granted).toHaveLength(11);
    expect(await reservedOn(granted.map((r) => r!.id))).toEqual({ [a]: 4, [b]: 7 });
  });

  it('the poll interval floor spreads the sum of the poll allowances over the sources', async () => {
    const { labels } = pool(2);
    // 1,667 + 1,667 poll requests an hour for 10 sources: one poll each every 11 s.
    expect(await pollIntervalFloorSeconds(t.db, labels, 10)).toBe(11);
    expect(await pollIntervalFloorSeconds(t.db, labels[0]!, 10)).toBe(22);
    await observed(labels[1]!, { quota: 60, resetInMinutes: 10 });
    expect(await pollIntervalFloorSeconds(t.db, labels, 10)).toBe(Math.ceil(36000 / 1687));
  });

  it('reads every credential budget in one statement, each window from the spend index alone', async () => {
    const { labels } = pool(3);
    // A day of history for the three credentials and others, so the planner has a choice;
    // timed from one instant, so a slow VACUUM below cannot move the window under the rows.
    const at = new Date();
    await sql`
      INSERT INTO github_requests (credential, purpose, path, outcome, status, counted,
        reserved_at, sent_at, finished_at)
      SELECT (ARRAY[${labels[0]}, ${labels[1]}, ${labels[2]}, 'token:other'])[1 + g % 4],
        CASE WHEN g % 3 = 0 THEN 'poll' ELSE 'enrich' END, '/x', 'completed', 200, true,
        ${at}::timestamptz - g * interval '1 second', ${at}::timestamptz - g * interval '1 second',
        ${at}::timestamptz - g * interval '1 second'
      FROM generate_series(1, 86400) g`.execute(t.db);
    await sql`VACUUM (ANALYZE) github_requests`.execute(t.db);
    const statement = budgetStateStatement(
      labels.map((label) => ({ label, defaultQuota: 5000 })),
      at,
    );
    const r = await statement.execute(t.db);
    expect(r.rows.map((row) => row.credential)).toEqual(labels);
    // Each counts its own rows only: a quarter of the last hour's 3,600 (± the row on the
    // window's edge).
    for (const row of r.rows) expect(Math.abs(row.poll + row.enrich - 900)).toBeLessThanOrEqual(1);
    const plan = await explain(t.db, statement);
    expect(indexReads(plan, 'github_requests_spend', ['Index Only Scan']), plan.shown).not.toEqual(
      [],
    );
    expect(seqScans(plan, 'github_requests'), plan.shown).toEqual([]);
  });
});

describe('requests through the pool', () => {
  it('go out with each credential header, one in flight per credential, both at once', async () => {
    const tokens = [randomToken(), randomToken()];
    const env = { GITHUB_TOKENS: tokens.join(',') };
    // Two processes, each with its own gate sessions, and answers that take a while.
    const p1 = clients.make({ apiUrl: fake.url, token: null, env });
    const p2 = clients.make({ apiUrl: fake.url, token: null, env });
    for (let i = 0; i < 16; i++) fake.setUser(userProfile({ id: i + 1, login: `u${i}` }));
    fake.fail({ path: /^\/users\//, delayMs: 40, times: Number.POSITIVE_INFINITY });

    const results = await Promise.all(
      Array.from({ length: 16 }, (_, i) =>
        (i % 2 ? p1 : p2).request({ purpose: 'enrich', path: `/users/u${i}` }),
      ),
    );

    expect(results.every((r) => r.status === 200)).toBe(true);
    const labels = tokens.map(tokenLabel);
    expect(fake.maxInFlightByCredential).toEqual({ [labels[0]!]: 1, [labels[1]!]: 1 });
    expect(fake.maxInFlight).toBe(2);
    expect(fake.secondaryLimitHits).toBe(0);
    const perCredential = new Map<string, number>();
    for (const r of fake.requests)
      perCredential.set(r.credential, (perCredential.get(r.credential) ?? 0) + 1);
    // Both carried the load (the choice is a read, so two processes choosing at the same
    // instant may pick the same credential: balanced, not alternating).
    expect(perCredential.size).toBe(2);
    for (const n of perCredential.values()) expect(n).toBeGreaterThanOrEqual(4);
    // Each request carried its own token, which the ledger knows only by its label.
    for (const r of fake.requests) {
      const token = tokens[labels.indexOf(r.credential)];
      expect(r.headers.authorization).toBe(`token ${token}`);
    }
  });

  it('a 401 blocks only the credential GitHub rejected; the request and the next ones use the other', async () => {
    const { gh, labels } = pool(2);
    for (let i = 0; i < 5; i++) fake.setUser(userProfile({ id: i + 1, login: `u${i}` }));
    fake.fail({ path: '/users/u0', status: 401, body: '{"message":"Bad credentials"}' });
    // The 401 blocks its credential and the same request is sent again on the other.
    expect((await gh.request({ purpose: 'enrich', path: '/users/u0' })).status).toBe(200);
    const [first, second] = fake.requests;
    expect([first!.status, second!.status]).toEqual([401, 200]);
    const rejected = first!.credential;
    expect(labels).toContain(rejected);
    const other = labels.find((l) => l !== rejected)!;
    expect(second!.credential).toBe(other);

    for (let i = 1; i < 5; i++) {
      expect((await gh.request({ purpose: 'enrich', path: `/users/u${i}` })).status).toBe(200);
    }
    expect(fake.requests.slice(1).map((r) => r.credential)).toEqual(Array(5).fill(other));
    const budget = await gh.budget();
    expect(budget.credentials.find((c) => c.credential === rejected)!.blockReason).toBe('auth');
  });
});

describe('polling through the pool', () => {
  async function sources(n: number, tag: string): Promise<number[]> {
    const ids: number[] = [];
    for (let i = 0; i < n; i++) {
      const target = `pool-${tag}-${i}/feed`;
      const { source } = await addSource(t.db, { kind: 'repo', target }, 'live');
      // Due a minute ago: the column's default, the database's now(), can be microseconds
      // past the millisecond clock that asks which sources are due.
      await t.db
        .updateTable('event_sources')
        .set({ next_poll_at: new Date(Date.now() - 60_000) })
        .where('id', '=', source.id)
        .execute();
      fake.addEvents(`repo:${target}`, [pushEvent()]);
      ids.push(Number(source.id));
    }
    return ids;
  }

  it('polls on the credentials left while one is rejected, and defers only when all refuse', async () => {
    const tokens = [randomToken(), randomToken()];
    const env = { GITHUB_TOKENS: tokens.join(',') };
    const github = clients.make({ apiUrl: fake.url, token: null, env });
    const [a, b] = github.credentials as [string, string];
    const { logger, events } = captureLogger('debug');
    const deps = {
      config: testConfig(t, { apiUrl: fake.url, token: null, env }),
      db: t.db,
      pool: t.pool,
      github,
      logger,
      workerId: 'test-host:1',
    };

    // a is blocked by a 401: every due source is polled, on b.
    await recordAuthFailure(t.db, a, new Date(), 5000);
    await sources(3, 'open');
    const first = await pollDueSources(deps);
    expect(first.map((s) => s.outcome)).toEqual(['completed', 'completed', 'completed']);
    expect(new Set(fake.requests.map((r) => r.credential))).toEqual(new Set([b]));

    // Both spent: every due source is deferred to the first moment either frees (b resets
    // in 10 minutes, a's 401 block is lifted in 1), in one log line, with no run row and no
    // auth error (one rejected credential is not why the pool waits).
    await t.db.deleteFrom('github_rate_limits').execute();
    await observed(a, { quota: 60, resetInMinutes: 30 });
    await observed(b, { quota: 60, resetInMinutes: 10 });
    await spend(a, 'poll', 20);
    await spend(b, 'poll', 20);
    const ids = await sources(3, 'spent');
    const runsBefore = await t.db.selectFrom('ingestion_runs').select('id').execute();
    const second = (await pollDueSources(deps)).filter((s) => ids.includes(s.sourceId));
    expect(second.map((s) => s.outcome)).toEqual(['deferred', 'deferred', 'deferred']);
    const bReset = (await github.budget()).credentials.find((c) => c.credential === b)!.resetAt!;
    for (const s of second) {
      expect(s.nextPollAt).toEqual(bReset);
      expect(s.error).toBeNull();
    }
    expect(await t.db.selectFrom('ingestion_runs').select('id').execute()).toHaveLength(
      runsBefore.length,
    );
    const deferred = events('ingestion.deferred');
    expect(deferred).toHaveLength(1);
    expect(deferred[0]).toMatchObject({ reason: 'allowance', level: 'info' });
  });
});
