import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { fixedClock } from '../../src/clock.ts';
import { pollIntervalFloorSeconds } from '../../src/github/budget.ts';
import type { GitHubClient } from '../../src/github/types.ts';
import { pollSource } from '../../src/ingestion/runner.ts';
import { addSource } from '../../src/ingestion/sources.ts';
import { useTestDatabase } from '../support/db.ts';
import { type FakeGitHub, startFakeGitHub } from '../support/fake-github.ts';
import { clientFactory, memoryLogger, testConfig } from '../support/github-client.ts';
import { pushEvent } from '../support/github-factories.ts';

/**
 * Issue 19 item 3 against real Postgres and the fake GitHub: a round of 304s is free, so the
 * next polls are at the feeds' X-Poll-Interval, not at 3600 × sources / poll allowance.
 */

const t = useTestDatabase();
const clients = clientFactory(t);
let fake: FakeGitHub;
let github: GitHubClient;
const SOURCES = 20;
/**
 * Polls get 5% of the quota (250 of a token's 5,000 an hour): the old floor for 20 sources is
 * then 288 s, far above the feeds' 60 s, with few polls to make.
 */
const ENRICH_SHARE = 0.95;
const clock = fixedClock(new Date());

beforeAll(async () => {
  fake = await startFakeGitHub();
});
beforeEach(async () => {
  fake.reset();
  await t.db.deleteFrom('ingestion_runs').execute();
  await t.db.deleteFrom('event_sources').execute();
  github = clients.make({ apiUrl: fake.url });
  clock.set(new Date());
});
afterEach(async () => {
  await clients.closeAll();
});
afterAll(async () => {
  await fake.close();
});

function deps() {
  return {
    config: testConfig(t, { apiUrl: fake.url, env: { ENRICH_SHARE: String(ENRICH_SHARE) } }),
    db: t.db,
    pool: t.pool,
    github,
    logger: memoryLogger('silent').logger,
    workerId: 'test-host:1',
    clock,
  };
}

async function fleet(n: number): Promise<number[]> {
  const ids: number[] = [];
  for (let i = 0; i < n; i++) {
    const target = `idle-${i}/feed`;
    const { source } = await addSource(t.db, { kind: 'repo', target }, 'live');
    fake.addEvents(`repo:${target}`, [pushEvent()]);
    ids.push(Number(source.id));
  }
  return ids;
}

/** One poll of every source; returns each source's next poll in seconds from the clock. */
async function round(ids: number[]) {
  const outcomes = new Set<string>();
  for (const id of ids) outcomes.add((await pollSource(deps(), id, { force: true })).outcome);
  const rows = await t.db
    .selectFrom('event_sources')
    .select(['id', 'next_poll_at', 'poll_cost'])
    .orderBy('id')
    .execute();
  const now = clock.now().getTime();
  return {
    outcomes: [...outcomes],
    seconds: rows.map((r) => (r.next_poll_at.getTime() - now) / 1000),
    costs: rows.map((r) => r.poll_cost),
  };
}

async function countedRequests(): Promise<number> {
  const r = await t.db
    .selectFrom('github_requests')
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .where('counted', '=', true)
    .executeTakeFirstOrThrow();
  return Number(r.n);
}

describe('a schedule that knows a 304 is free', () => {
  it('learned-idle sources: a round of 304s puts every next poll at X-Poll-Interval', async () => {
    const ids = await fleet(SOURCES);
    await round(ids); // the first answers (200s) and their ETags
    // As after a quiet day: the sources' recent polls were all 304s.
    await t.db.updateTable('event_sources').set({ poll_cost: 0.01 }).execute();
    const spent = await countedRequests();

    const r = await round(ids);
    expect(r.outcomes).toEqual(['not_modified']);
    expect(await countedRequests()).toBe(spent);
    expect(new Set(r.seconds)).toEqual(new Set([60]));
    // The old floor would have put them minutes out.
    expect(
      await pollIntervalFloorSeconds(t.db, github.credentials, SOURCES, ENRICH_SHARE),
    ).toBeGreaterThan(200);
  });

  it('new sources start as busy and learn: three rounds of 304s bring them to 60 s', async () => {
    const ids = await fleet(SOURCES);
    const first = await round(ids);
    expect(first.outcomes).toEqual(['completed']);
    // Every poll spent a counted request: the poll share decides, as it did before.
    const floor = await pollIntervalFloorSeconds(t.db, github.credentials, SOURCES, ENRICH_SHARE);
    expect(Math.min(...first.seconds)).toBeGreaterThanOrEqual(floor - 1);

    const second = await round(ids);
    const third = await round(ids);
    expect(second.outcomes).toEqual(['not_modified']);
    expect(Math.max(...third.seconds)).toBeLessThan(Math.min(...second.seconds));
    const fourth = await round(ids);
    expect(fourth.outcomes).toEqual(['not_modified']);
    expect(new Set(fourth.costs)).toEqual(new Set([0.125]));
    expect(new Set(fourth.seconds)).toEqual(new Set([60]));
  });

  it('mixed: an idle feed polls at 60 s, a busy one shares what the idle ones leave', async () => {
    const ids = await fleet(SOURCES);
    await round(ids);
    const half = ids.slice(0, SOURCES / 2).map(String);
    await t.db.updateTable('event_sources').set({ poll_cost: 0.01 }).execute();
    await t.db.updateTable('event_sources').set({ poll_cost: 1 }).where('id', 'in', half).execute();
    const [busy, idle] = [ids[0]!, ids[SOURCES - 1]!];
    fake.addEvents('repo:idle-0/feed', [pushEvent()]);
    expect((await pollSource(deps(), busy, { force: true })).outcome).toBe('completed');
    expect((await pollSource(deps(), idle, { force: true })).outcome).toBe('not_modified');
    const next = async (id: number) => {
      const row = await t.db
        .selectFrom('event_sources')
        .select('next_poll_at')
        .where('id', '=', String(id))
        .executeTakeFirstOrThrow();
      return (row.next_poll_at.getTime() - clock.now().getTime()) / 1000;
    };
    const floor = await pollIntervalFloorSeconds(t.db, github.credentials, SOURCES, ENRICH_SHARE);
    expect(await next(idle)).toBe(60);
    expect(await next(busy)).toBeGreaterThan(60);
    expect(await next(busy)).toBeLessThan(floor);
  });
});
