import { sql } from 'kysely';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { GitHubClient } from '../../src/budget/client-types.ts';
import { pollIntervalFloorSeconds } from '../../src/budget/snapshot.ts';
import { fixedClock } from '../../src/platform/clock.ts';
import { pollSource } from '../../src/poll/poll-source.ts';
import { newFleetCache, planSourcePoll } from '../../src/poll/schedule.ts';
import { addSource } from '../../src/store/sources.ts';
import { useTestDatabase } from '../support/db.ts';
import { type FakeGitHub, startFakeGitHub } from '../support/fake-github.ts';
import { clientFactory, memoryLogger, testConfig } from '../support/github-client.ts';
import { pushEvent } from '../support/github-factories.ts';

/**
 * The poll plan against real Postgres and the fake GitHub: a round of 304s is free, so the
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

async function samples(): Promise<Set<number>> {
  const rows = await t.db.selectFrom('event_sources').select('poll_cost_samples').execute();
  return new Set(rows.map((r) => r.poll_cost_samples));
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

  it('new sources start as busy; their first conditional answers are believed: the round after the first 304s is at 60 s', async () => {
    const ids = await fleet(SOURCES);
    const first = await round(ids);
    expect(first.outcomes).toEqual(['completed']);
    // Every poll spent a counted request, unconditionally (no ETag yet): no evidence of how
    // busy the feeds are, so they stay at the prior and the poll share decides, as before.
    const floor = await pollIntervalFloorSeconds(t.db, github.credentials, SOURCES, ENRICH_SHARE);
    expect(Math.min(...first.seconds)).toBeGreaterThanOrEqual(floor - 1);
    expect(new Set(first.costs)).toEqual(new Set([1]));
    expect(await samples()).toEqual(new Set([0]));

    // The first conditional round: every feed answers 304, and is believed idle at once.
    const second = await round(ids);
    expect(second.outcomes).toEqual(['not_modified']);
    expect(new Set(second.costs)).toEqual(new Set([0]));
    expect(await samples()).toEqual(new Set([1]));
    expect(new Set(second.seconds)).toEqual(new Set([60]));
    const third = await round(ids);
    expect(new Set(third.seconds)).toEqual(new Set([60]));
    expect(await samples()).toEqual(new Set([2]));
  });

  it('2,000 sources on 8 tokens, as an import leaves them: after an all-304 round every next poll is at most 120 s out', async () => {
    const n = 2_000;
    await sql`
      INSERT INTO event_sources (kind, target, mode, commits_enabled, etag)
      SELECT 'repo', 'many/repo-' || g, 'live', false, '"etag"' FROM generate_series(1, ${n}::int) g`.execute(
      t.db,
    );
    const rows = await t.db.selectFrom('event_sources').selectAll().execute();
    const eight = Array.from({ length: 8 }, (_, i) => `token:${String(i).padStart(8, '0')}`);
    // ENRICH_SHARE's default: 8 tokens leave polls 8 × 1,667 counted requests an hour.
    const config = testConfig(t, { apiUrl: fake.url });
    const plan = { db: t.db, github: { ...github, credentials: eight }, config };
    // One round's cache, as pollDueSources gives every poll of a round.
    const cache = newFleetCache();
    const now = clock.now();
    const seconds: number[] = [];
    for (const row of rows) {
      const p = await planSourcePoll(
        plan,
        row,
        { requestsSpent: 0, pollIntervalSeconds: 60, conditional: true },
        now,
        cache,
      );
      seconds.push(p.seconds);
    }
    expect(Math.max(...seconds)).toBeLessThanOrEqual(120);
    expect(new Set(seconds)).toEqual(new Set([60]));
    // The same poll under the old rule (the prior moved halfway, to 0.5) is 270 s out: what
    // an earlier review measured.
    const halfway = await planSourcePoll(
      plan,
      { ...rows[0]!, poll_cost_samples: 1 },
      { requestsSpent: 0, pollIntervalSeconds: 60, conditional: true },
      now,
      newFleetCache(),
    );
    expect(halfway.cost).toBe(0.5);
    expect(halfway.seconds).toBe(270);
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
