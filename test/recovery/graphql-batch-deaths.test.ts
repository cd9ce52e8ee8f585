import { sql } from 'kysely';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { settleAbandonedReservations } from '../../src/budget/ledger.ts';
import { chain, insertPushes, insertRepository, pushShas } from '../support/commit-world.ts';
import { useTestDatabase } from '../support/db.ts';
import { type FakeGitHub, type RecordedRequest, startFakeGitHub } from '../support/fake-github.ts';
import { waitFor } from './helpers.ts';
import { type Child, killAll, spawnBin } from './world.ts';

/**
 * GraphQL batches and real deaths (ADR 0182), with real processes: bin/commits fetching by
 * GraphQL batches, SIGKILLed from outside while its query is at GitHub, and a second fetcher
 * started while a query hangs longer than the lease. A batch holds its pushes for as long as it
 * works on them; a death is charged only to the pushes of the query in flight — each a suspect
 * when the query asked about others, asked alone from then on — so no push ends `failed` for
 * a death that was not its own.
 */

const t = useTestDatabase();
let fake: FakeGitHub;
const children: Child[] = [];
const TOKEN = 'ghp_batchdeaths00000000000';

beforeAll(async () => {
  fake = await startFakeGitHub();
});
afterAll(async () => {
  await fake?.close();
});
beforeEach(async () => {
  await sql`TRUNCATE push_events, stored_commits, commit_fetch_turns, repositories,
    actors, github_requests, github_rate_limits, commits_graphql_minutes`.execute(t.db);
  fake.reset();
  fake.setRateLimit({ resetAt: new Date(Date.now() + 1800_000) });
});
afterEach(async () => {
  await killAll(children.splice(0));
});

function commitsRun(env: Record<string, string> = {}, limit = 60): Child {
  const child = spawnBin(
    'commits',
    {
      DATABASE_URL: t.url,
      GITHUB_MODE: 'live',
      GITHUB_API_URL: fake.url,
      GITHUB_TOKEN: TOKEN,
      COMMITS_TRANSPORT: 'graphql',
      LOG_LEVEL: 'warn',
      ...env,
    },
    ['--limit', String(limit), '--json'],
  );
  children.push(child);
  return child;
}

/** `n` one-commit pushes, each on a repository of its own; their heads. */
async function onePushes(n: number, first: number): Promise<string[]> {
  const seeds = [];
  for (let i = 0; i < n; i++) {
    const id = first + i;
    const name = `deaths/r${id}`;
    await insertRepository(t.db, id, name);
    const line = chain(fake, name, 2);
    seeds.push({ repositoryId: id, before: line[0]!, head: line[1]! });
  }
  await insertPushes(t.db, seeds);
  return seeds.map((s) => s.head);
}

const queryInFlight = (): RecordedRequest | undefined =>
  fake.requests.find((r) => r.path === '/graphql' && r.endedAt === null);

async function pushRows() {
  const r = await sql<{
    head: string;
    state: string;
    deaths: number;
    batchDeaths: number;
    open: boolean;
    error: string | null;
  }>`SELECT head, commits_state AS state, commits_deaths AS deaths,
      commits_batch_deaths AS "batchDeaths", commits_fetch_started_at IS NOT NULL AS open,
      commits_error AS error
    FROM push_events`.execute(t.db);
  return r.rows;
}

/** Time passes: dead leases and backoffs expire, the reconciler settles the dead ledger rows. */
async function timePasses(): Promise<void> {
  await sql`UPDATE push_events SET commits_claimed_until = now() - interval '1 second',
    commits_next_attempt_at = now() - interval '1 second' WHERE commits_state = 'pending'`.execute(
    t.db,
  );
  await sql`UPDATE github_requests SET reserved_at = reserved_at - interval '1 hour'
    WHERE finished_at IS NULL`.execute(t.db);
  await settleAbandonedReservations(t.db, 300);
}

describe('bin/commits killed mid-query', () => {
  it('SIGKILL twice while a query is at GitHub: no push ends failed, and none is charged a death it did not cause', async () => {
    const heads = await onePushes(60, 700);
    // Slow answers: each kill lands while a query is out.
    fake.graphql.configure({ queryDelayMs: 2_000 });

    for (let kill = 1; kill <= 2; kill++) {
      const run = commitsRun();
      await waitFor(queryInFlight, { timeoutMs: 60_000, what: `query ${kill} in flight` });
      const asked = fake.graphql.queries.at(-1)!;
      const pushesAsked = Object.keys(asked.variables).filter((k) => /^o\d+$/.test(k)).length;
      run.process.kill('SIGKILL');
      expect(await run.exited).toEqual({ code: null, signal: 'SIGKILL' });
      const rows = await pushRows();
      expect(rows.filter((r) => r.state === 'failed')).toEqual([]);
      // The pushes of the query that was out are in flight (its attempt open), no other.
      expect(rows.filter((r) => r.open)).toHaveLength(pushesAsked);
      if (kill === 1) expect(pushesAsked).toBe(60); // one first-round query asks about all 60
      if (kill === 2) expect(pushesAsked).toBe(1); // every push is a suspect now: asked alone
      await timePasses();
    }

    fake.graphql.configure({ queryDelayMs: 0 });
    const last = commitsRun();
    expect(await last.exited).toEqual({ code: 0, signal: null });
    expect(JSON.parse(last.stdout.join(''))).toMatchObject({
      fetched: 60,
      outcomes: { complete: 60, failed: 0, retry: 0 },
    });
    const rows = await pushRows();
    expect(rows.every((r) => r.state === 'complete' && !r.open)).toBe(true);
    // First kill: one query about all 60 → each a suspect once. Second: one suspect asked
    // alone → that push's own death (one of two before it is set aside). Nobody else.
    expect(rows.map((r) => r.batchDeaths)).toEqual(Array(60).fill(1));
    expect(rows.reduce((n, r) => n + r.deaths, 0)).toBe(1);
    for (const head of heads)
      expect(await pushShas(t.db, head)).toEqual([{ position: 0, sha: head }]);
  });

  it('a suspect whose own query is killed twice is set aside: failed, with why — and only it', async () => {
    await onePushes(10, 800);
    fake.graphql.configure({ queryDelayMs: 2_000 });
    let suspect: string | undefined;
    for (let kill = 1; kill <= 3; kill++) {
      const run = commitsRun({}, 10);
      await waitFor(queryInFlight, { timeoutMs: 60_000, what: `query ${kill} in flight` });
      const asked = fake.graphql.queries.at(-1)!;
      if (kill === 2) suspect = String(asked.variables.n0);
      if (kill === 3) expect(String(asked.variables.n0)).toBe(suspect); // the oldest due, again
      run.process.kill('SIGKILL');
      await run.exited;
      await timePasses();
    }
    fake.graphql.configure({ queryDelayMs: 0 });
    const last = commitsRun({}, 10);
    expect(await last.exited).toEqual({ code: 0, signal: null });
    const rows = await pushRows();
    const failed = rows.filter((r) => r.state === 'failed');
    expect(failed).toHaveLength(1);
    expect(failed[0]).toMatchObject({ deaths: 2, batchDeaths: 1 });
    expect(failed[0]!.error).toMatch(/killed its process 2 times/);
    expect(rows.filter((r) => r.state === 'complete')).toHaveLength(9);
  });
});

describe('a query that hangs longer than the lease', () => {
  it('a second fetcher started meanwhile takes none of the batch’s pushes, and charges no death', async () => {
    await onePushes(20, 900);
    // The first query is answered once the second fetcher has exited, not after a fixed
    // delay: an answer 8 s late was, on a loaded machine, sometimes there before the second
    // (a Node process of its own) had finished. Late all the same: past the 1 s lease.
    let secondDone!: () => void;
    const secondExited = new Promise<void>((resolve) => {
      secondDone = resolve;
    });
    fake.graphql.configure({ answerAfter: secondExited });
    try {
      const first = commitsRun({ ENRICH_LEASE_SECONDS: '1' }, 20);
      const out = await waitFor(queryInFlight, {
        timeoutMs: 60_000,
        what: 'the first query in flight',
      });
      // The query has been out longer than the lease the pushes were claimed for.
      await waitFor(() => Date.now() - out.startedAt.getTime() > 1_500, {
        what: 'the query out longer than the 1 s lease',
      });
      const second = commitsRun({ ENRICH_LEASE_SECONDS: '1' }, 20);
      expect(await second.exited).toEqual({ code: 0, signal: null });
      expect(JSON.parse(second.stdout.join(''))).toMatchObject({
        fetched: 0,
        stoppedBy: 'nothing_due',
      });
      // The second ended while the first's query was still out.
      expect(out.endedAt).toBeNull();
      secondDone();
      expect(await first.exited).toEqual({ code: 0, signal: null });
      expect(JSON.parse(first.stdout.join(''))).toMatchObject({
        fetched: 20,
        outcomes: { complete: 20, failed: 0, retry: 0 },
      });
      const rows = await pushRows();
      expect(rows.every((r) => r.state === 'complete')).toBe(true);
      expect(rows.every((r) => r.deaths === 0 && r.batchDeaths === 0)).toBe(true);
      expect(fake.graphql.queries).toHaveLength(1);
    } finally {
      secondDone();
    }
  });
});
