import { sql } from 'kysely';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { releaseReservation, settleAbandonedReservations } from '../../src/budget/ledger.ts';
import { pollIntervalFloorSeconds } from '../../src/budget/snapshot.ts';
import { allowanceFor } from '../../src/budget/window.ts';
import { useTestDatabase } from '../support/db.ts';
import { clientFactory, reserve } from '../support/github-client.ts';
import { pushEvent, userProfile } from '../support/github-factories.ts';
import { spendRows } from '../support/ledger-factories.ts';
import { useFakeGitHub } from '../support/use-fake-github.ts';

/** The hourly budget, computed from the shared ledger. */

const t = useTestDatabase();
const clients = clientFactory(t);
const fake = useFakeGitHub();

beforeEach(async () => {
  // Several tests share the 'anonymous' credential: each starts from an empty ledger.
  await sql`TRUNCATE github_requests, github_rate_limits`.execute(t.db);
});
afterEach(() => clients.closeAll());

/** Ledger rows as other processes would have left them in the current window. */
const spend = (
  credential: string,
  purpose: 'poll' | 'enrich' | 'commits',
  n: number,
  o?: Parameters<typeof spendRows>[4],
) => spendRows(t.db, credential, purpose, n, o);

describe('allowance split', () => {
  it('gives enrichment floor(quota × share) and polls the rest', () => {
    expect(allowanceFor(60, 2 / 3)).toEqual({ enrich: 40, poll: 20 });
    expect(allowanceFor(5000, 2 / 3)).toEqual({ enrich: 3333, poll: 1667 });
  });

  it('tells a purpose no once its share is spent, while the other may still go', async () => {
    const gh = clients.make({ apiUrl: fake.url, token: null });
    expect(gh.credential).toBe('anonymous');
    await spend(gh.credential, 'enrich', 39);
    await spend(gh.credential, 'enrich', 5, { status: 304 }); // free
    await spend(gh.credential, 'enrich', 5, { outcome: 'abandoned', sent: false }); // never sent

    const last = await reserve(gh, 'enrich', { path: '/users/x' });
    expect(last).not.toBeNull();
    expect(await reserve(gh, 'enrich')).toBeNull();
    expect(await reserve(gh, 'poll')).not.toBeNull();

    const b = await gh.budget();
    expect(b).toMatchObject({
      credential: 'anonymous',
      quota: 60,
      allowance: { enrich: 40, poll: 20 },
      spent: { enrich: 40, poll: 1 },
      remaining: null,
      blockedUntil: null,
    });
  });

  it('commits spend the background allowance with enrichment, never the polls', async () => {
    const gh = clients.make({ apiUrl: fake.url, token: null });
    await spend(gh.credential, 'enrich', 25);
    await spend(gh.credential, 'commits', 5);
    await spend(gh.credential, 'commits', 3, { status: 304 }); // free
    // 40 of 60 is the background's: 30 spent, 10 left for either of its purposes.
    for (let i = 0; i < 10; i++) {
      expect(
        await gh.tryReserve('commits', { path: `/repos/o/r/compare/a...b${i}` }),
      ).toMatchObject({
        ok: true,
      });
    }
    expect(await gh.tryReserve('commits')).toMatchObject({ ok: false, reason: 'allowance' });
    expect(await gh.tryReserve('enrich')).toMatchObject({ ok: false, reason: 'allowance' });
    // Polls keep all of theirs.
    for (let i = 0; i < 20; i++) expect(await reserve(gh, 'poll')).not.toBeNull();
    expect(await reserve(gh, 'poll')).toBeNull();
    expect(await gh.budget()).toMatchObject({
      allowance: { enrich: 40, poll: 20 },
      spent: { enrich: 25, commits: 15, poll: 20 },
    });
  });

  it('enrichment that spent the background allowance leaves commits nothing, and polls all theirs', async () => {
    const gh = clients.make({ apiUrl: fake.url, token: null });
    await spend(gh.credential, 'enrich', 40);
    expect(await gh.tryReserve('commits')).toMatchObject({ ok: false, reason: 'allowance' });
    expect(await reserve(gh, 'poll')).not.toBeNull();
  });

  it('counts rows from the last hour only when no reset is known', async () => {
    const gh = clients.make({ apiUrl: fake.url });
    await spend(gh.credential, 'poll', 3, { ageSeconds: 2 * 3600 });
    await spend(gh.credential, 'poll', 2, { ageSeconds: 30 });
    expect((await gh.budget()).spent.poll).toBe(2);
  });

  it('a released reservation gives its request back', async () => {
    const gh = clients.make({ apiUrl: fake.url, token: null });
    await spend(gh.credential, 'poll', 19);
    const r = await reserve(gh, 'poll');
    expect(r).not.toBeNull();
    expect(await reserve(gh, 'poll')).toBeNull();
    await releaseReservation(t.db, r!.id, 'released unused', new Date());
    const again = await reserve(gh, 'poll');
    expect(again).not.toBeNull();
    const row = await t.db
      .selectFrom('github_requests')
      .select(['outcome', 'error'])
      .where('id', '=', String(r!.id))
      .executeTakeFirstOrThrow();
    expect(row).toEqual({ outcome: 'abandoned', error: 'released unused' });
  });

  it('a request made with an earlier reservation uses that row, not a new one', async () => {
    const gh = clients.make({ apiUrl: fake.url });
    fake.setUser(userProfile({ id: 5, login: 'five' }));
    const r = await reserve(gh, 'enrich', {
      entity: { class: 'actor', id: 5 },
      path: '/users/five',
      jobId: 'j',
    });
    const res = await gh.request({ purpose: 'enrich', path: '/users/five', reservation: r! });
    expect(res.requestId).toBe(r!.id);
    const rows = await t.db
      .selectFrom('github_requests')
      .selectAll()
      .where('credential', '=', gh.credential)
      .execute();
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({
      outcome: 'completed',
      entity_class: 'actor',
      entity_id: '5',
      job_id: 'j',
    });
  });

  it('concurrent reservations from separate processes never exceed the allowance', async () => {
    const a = clients.make({ apiUrl: fake.url, token: null });
    const b = clients.make({ apiUrl: fake.url, token: null });
    await spend(a.credential, 'poll', 10);
    // Each client reserves on the shared app pool here; the advisory xact lock is what serializes.
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) => reserve(i % 2 ? a : b, 'poll')),
    );
    expect(results.filter(Boolean)).toHaveLength(10);
  });
});

describe('rate-limit window', () => {
  it('uses the hour GitHub reported and what was spent since its last answer', async () => {
    const gh = clients.make({ apiUrl: fake.url, token: 'tok-window' });
    fake.addEvents('public', [pushEvent()]);
    const resetAt = new Date(Math.ceil(Date.now() / 1000) * 1000 + 40 * 60_000);
    fake.setRateLimit({ limit: 100, remaining: 10, resetAt }, { token: 'tok-window' });

    await gh.request({ purpose: 'poll', path: '/events' });
    const open = await reserve(gh, 'poll');

    const b = await gh.budget();
    expect(b.quota).toBe(100);
    expect(b.resetAt).toEqual(resetAt);
    // GitHub said 9 left; one reservation is open since.
    expect(b.remaining).toBe(8);
    expect(b.spent.poll).toBe(2);
    expect(open).not.toBeNull();
  });

  it('the poll floor spreads the poll allowance over the enabled sources', async () => {
    const gh = clients.make({ apiUrl: fake.url, token: null });
    expect(await pollIntervalFloorSeconds(t.db, gh.credential, 1)).toBe(180);
    expect(await pollIntervalFloorSeconds(t.db, gh.credential, 4)).toBe(720);
    expect(await pollIntervalFloorSeconds(t.db, 'token:abcdef01', 1)).toBe(3);
  });
});

describe('abandoned reservations', () => {
  it('settles rows left open by a dead process; a sent one still counts', async () => {
    const gh = clients.make({ apiUrl: fake.url, token: 'tok-sweep' });
    const old = new Date(Date.now() - 20 * 60_000);
    await t.db
      .insertInto('github_requests')
      .values([
        {
          credential: gh.credential,
          purpose: 'poll',
          path: '/a',
          outcome: 'reserved',
          reserved_at: old,
        },
        {
          credential: gh.credential,
          purpose: 'poll',
          path: '/b',
          outcome: 'sent',
          reserved_at: old,
          sent_at: old,
        },
        {
          credential: gh.credential,
          purpose: 'poll',
          path: '/c',
          outcome: 'reserved',
          reserved_at: new Date(),
        },
      ])
      .execute();
    expect((await gh.budget()).spent.poll).toBe(3);

    expect(await settleAbandonedReservations(t.db, 15 * 60)).toBe(2);
    expect(await settleAbandonedReservations(t.db, 15 * 60)).toBe(0);

    const rows = await t.db
      .selectFrom('github_requests')
      .select(['path', 'outcome'])
      .where('credential', '=', gh.credential)
      .orderBy('path')
      .execute();
    expect(rows).toEqual([
      { path: '/a', outcome: 'abandoned' },
      { path: '/b', outcome: 'abandoned' },
      { path: '/c', outcome: 'reserved' },
    ]);
    expect((await gh.budget()).spent.poll).toBe(2);
  });
});
