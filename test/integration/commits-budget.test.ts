import { sql } from 'kysely';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { credentialRefuses } from '../../src/budget/snapshot.ts';
import { useTestDatabase } from '../support/db.ts';
import { clientFactory } from '../support/github-client.ts';
import { spendRows } from '../support/ledger-factories.ts';
import { useFakeGitHub } from '../support/use-fake-github.ts';

/**
 * The third purpose (ADR 0071): `commits` spends the background allowance together with
 * `enrich`, floor(quota × ENRICH_SHARE); polls keep the rest. Asked through the client's
 * own tryReserve, so this holds whatever the budget layer looks like inside.
 */

const t = useTestDatabase();
const clients = clientFactory(t);
const fake = useFakeGitHub();

beforeEach(async () => {
  await sql`TRUNCATE github_requests, github_rate_limits`.execute(t.db);
});
afterEach(() => clients.closeAll());

describe('the commits purpose', () => {
  it('is counted with enrich against the background allowance', async () => {
    const gh = clients.make({ apiUrl: fake.url, token: null }); // 60: 40 background, 20 poll
    await spendRows(t.db, gh.credential, 'enrich', 25);
    await spendRows(t.db, gh.credential, 'commits', 14);

    const last = await gh.tryReserve('commits', { path: '/repos/o/r/compare/a...b' });
    expect(last.ok).toBe(true);
    const commits = await gh.tryReserve('commits');
    expect(commits).toMatchObject({ ok: false, reason: 'allowance' });
    // enrich is refused by the same allowance: commits spent what it had left
    expect(await gh.tryReserve('enrich')).toMatchObject({ ok: false, reason: 'allowance' });
    // polls are never starved by either
    expect((await gh.tryReserve('poll')).ok).toBe(true);

    const b = await gh.budget();
    expect(b.allowance).toEqual({ enrich: 40, poll: 20 });
    expect(b.spent).toEqual({ enrich: 25, commits: 15, poll: 1 });
    expect(credentialRefuses(b, 'commits')).toBe(true);
    expect(credentialRefuses(b, 'enrich')).toBe(true);
    expect(credentialRefuses(b, 'poll')).toBe(false);
  });

  it('may take the whole background allowance when enrichment spends nothing', async () => {
    const gh = clients.make({ apiUrl: fake.url, token: null });
    for (let i = 0; i < 40; i++) expect((await gh.tryReserve('commits')).ok).toBe(true);
    expect(await gh.tryReserve('commits')).toMatchObject({ ok: false, reason: 'allowance' });
    expect((await gh.budget()).spent).toEqual({ enrich: 0, commits: 40, poll: 0 });
  });

  it('leaves the poll allowance whole: a full poll side refuses polls, not commits', async () => {
    const gh = clients.make({ apiUrl: fake.url, token: null });
    await spendRows(t.db, gh.credential, 'poll', 20);
    expect(await gh.tryReserve('poll')).toMatchObject({ ok: false, reason: 'allowance' });
    expect((await gh.tryReserve('commits')).ok).toBe(true);
  });

  it('a free 304 and a never-sent reservation spend nothing of it', async () => {
    const gh = clients.make({ apiUrl: fake.url, token: null });
    await spendRows(t.db, gh.credential, 'commits', 39);
    await spendRows(t.db, gh.credential, 'commits', 5, { status: 304 });
    await spendRows(t.db, gh.credential, 'commits', 5, { outcome: 'abandoned', sent: false });
    expect((await gh.tryReserve('commits')).ok).toBe(true);
    expect((await gh.tryReserve('enrich')).ok).toBe(false);
  });
});
