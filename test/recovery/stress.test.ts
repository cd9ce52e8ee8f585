import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sourceSpec } from '../../src/platform/config/source-spec.ts';
import { addSource } from '../../src/store/sources.ts';
import { useTestDatabase } from '../support/db.ts';
import { type FakeGitHub, startFakeGitHub } from '../support/fake-github.ts';
import { pushEvent, repoProfile, userProfile } from '../support/github-factories.ts';
import { adminQuery } from '../support/postgres-server.ts';
import { waitFor } from './helpers.ts';
import { type Child, killAll, spawnBin } from './world.ts';

/**
 * Multi-process stress: 4 bin/worker and 2 bin/enrich against one database and a
 * fake GitHub serving 50 repository sources (150 pushes by 20 actors, so entities are shared
 * between sources and contended by every process). The fake answers a second concurrent
 * request with a secondary-limit 403, and adds latency so requests overlap in time if the
 * gate ever lets them. Afterwards, from the fake's own request log and the tables:
 * - never two requests in flight on one of the credential's gates (REST, GraphQL), no secondary-limit hit;
 * - no source polled twice within its poll interval (each feed's page 1 requested once:
 *   the interval, ≥ 60 s, is longer than the whole test);
 * - no entity fetched twice (each profile path answered once);
 * - every event stored once, and every request the fake saw is one ledger row.
 * Bounded: the processes run until the world is ingested and enriched, then stop on SIGTERM.
 */

const SOURCES = 50;
const ACTORS = 20;
const PUSHES_PER_REPO = 3;
const TOKEN = 'stress-test-token';

const t = useTestDatabase();
let fake: FakeGitHub;
const children: Child[] = [];
const eventIds: string[] = [];
const repoNames: string[] = [];
const logins: string[] = [];

function env(): Record<string, string> {
  return {
    // Idle jobs log job.completed at debug: the ticks at the end are counted by them.
    LOG_LEVEL: 'debug',
    DATABASE_URL: t.url,
    GITHUB_MODE: 'live',
    GITHUB_API_URL: fake.url,
    GITHUB_TOKEN: TOKEN,
    TICK_SECONDS: '1',
    // Workers and bin/enrich all wait on one gate: give a waiting request room.
    GATE_WAIT_SECONDS: '30',
  };
}

beforeAll(async () => {
  fake = await startFakeGitHub({ latencyMs: 15 });
  const actors = Array.from({ length: ACTORS }, (_, j) => ({
    id: 95_000 + j,
    login: `stress-user-${j}`,
  }));
  for (const a of actors) {
    fake.setUser(userProfile(a));
    logins.push(a.login);
  }
  const events = [];
  for (let i = 0; i < SOURCES; i++) {
    const repo = { id: 90_000 + i, name: `stress-org-${i}/repo-${i}` };
    fake.setRepo(repoProfile({ id: repo.id, full_name: repo.name }));
    repoNames.push(repo.name);
    for (let k = 0; k < PUSHES_PER_REPO; k++) {
      const ev = pushEvent({
        id: 60_000_000_000 + i * 10 + k,
        actor: actors[(i + k * 7) % ACTORS]!,
        repo,
      });
      events.push(ev);
      eventIds.push(ev.id);
    }
  }
  fake.addEvents('public', events);
  for (const name of repoNames) await addSource(t.db, sourceSpec('repo', name), 'live');
});

afterAll(async () => {
  await killAll(children);
  await fake?.close();
});

async function progress() {
  const r = await sql<{ events: number; settled: number; pending: number; unpolled: number }>`
    SELECT
      (SELECT count(*)::int FROM push_events) AS events,
      (SELECT count(*)::int FROM (
         SELECT enrichment_state FROM actors UNION ALL SELECT enrichment_state FROM repositories) e
       WHERE enrichment_state <> 'pending') AS settled,
      (SELECT count(*)::int FROM (
         SELECT enrichment_state FROM actors UNION ALL SELECT enrichment_state FROM repositories) e
       WHERE enrichment_state = 'pending') AS pending,
      (SELECT count(*)::int FROM event_sources
       WHERE next_poll_at <= now() OR last_polled_at IS NULL) AS unpolled`.execute(t.db);
  return r.rows[0]!;
}

async function connectionsNow(): Promise<number> {
  const r = await adminQuery(
    t.adminUrl,
    'SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = $1',
    [t.name],
  );
  return (r.rows[0] as { n: number }).n;
}

describe('multi-process stress', () => {
  it('4 workers and 2 bin/enrich: one request in flight, nothing polled, fetched or stored twice', {
    timeout: 120_000,
  }, async () => {
    const entities = ACTORS + SOURCES;
    let peakConnections = 0;
    for (let w = 0; w < 4; w++) children.push(spawnBin('worker', env()));
    await Promise.all(
      children.map((c) => c.waitForLine((l) => l.event === 'worker.started', 'a worker to start')),
    );
    // bin/enrich stops when nothing is due: start both once ingestion has made work.
    await waitFor(async () => (await progress()).pending >= 10, {
      timeoutMs: 30_000,
      what: 'pending entities for bin/enrich to compete for',
    });
    const enrichers = [0, 1].map(() =>
      spawnBin('enrich', { ...env(), LOG_LEVEL: 'info' }, ['--limit', String(entities)]),
    );
    children.push(...enrichers);

    await waitFor(
      async () => {
        peakConnections = Math.max(peakConnections, await connectionsNow());
        const p = await progress();
        return p.events === eventIds.length && p.settled === entities && p.unpolled === 0;
      },
      { timeoutMs: 90_000, intervalMs: 200, what: 'every source polled and every entity settled' },
    );
    for (const e of enrichers) expect((await e.exited).code, e.stderr.join('')).toBe(0);
    const workers = children.filter((c) => !enrichers.includes(c));
    // A few more ticks with everything done: a source must not be polled again early.
    const polls = () =>
      workers.reduce(
        (n, w) =>
          n +
          w.lines.filter((l) => l.event === 'job.completed' && l.queue === 'poll-sources').length,
        0,
      );
    const pollsAtEnd = polls();
    await waitFor(() => polls() >= pollsAtEnd + 3, {
      timeoutMs: 60_000,
      what: 'three more poll-sources ticks',
    });
    for (const w of workers) w.process.kill('SIGTERM');
    for (const w of workers) expect(await w.exited).toEqual({ code: 0, signal: null });

    // One request in flight per gate of the credential, as GitHub itself would have seen it:
    // its REST requests one at a time, and its GraphQL queries (commits) one at a time beside.
    for (const [gate, most] of Object.entries(fake.maxInFlightByCredential)) {
      expect({ gate, most }).toEqual({ gate, most: 1 });
    }
    expect(fake.maxInFlight).toBeLessThanOrEqual(2);
    expect(fake.secondaryLimitHits).toBe(0);

    // No source polled twice within its interval: one page-1 request per feed, one run
    // per source, and the interval each run scheduled is longer than the test.
    const pageOnes = new Map<string, number>();
    for (const r of fake.requests)
      if (r.path.endsWith('/events') && (r.query.page ?? '1') === '1')
        pageOnes.set(r.path, (pageOnes.get(r.path) ?? 0) + 1);
    expect(pageOnes.size).toBe(SOURCES);
    expect(
      [...pageOnes.values()].every((n) => n === 1),
      JSON.stringify([...pageOnes]),
    ).toBe(true);
    const runs = await sql<{ source_id: string; status: string; n: number }>`
      SELECT source_id::text, status, count(*)::int AS n FROM ingestion_runs GROUP BY 1, 2`.execute(
      t.db,
    );
    expect(runs.rows.length).toBe(SOURCES);
    expect(runs.rows.every((r) => r.status === 'completed' && r.n === 1)).toBe(true);
    const intervals = await sql<{ shortest: number }>`
      SELECT min(extract(epoch FROM next_poll_at - last_polled_at))::int AS shortest
      FROM event_sources`.execute(t.db);
    expect(intervals.rows[0]!.shortest).toBeGreaterThanOrEqual(60);

    // No entity fetched twice: every profile path answered once (a 304 would be a refresh).
    const profiles = fake.requests.filter(
      (r) =>
        !r.path.endsWith('/events') &&
        !r.path.includes('/compare/') &&
        r.path !== '/graphql' && // commits, by GraphQL batches: not profiles
        r.status !== 304,
    );
    const byPath = new Map<string, number>();
    for (const r of profiles) byPath.set(r.path, (byPath.get(r.path) ?? 0) + 1);
    expect([...byPath.keys()].sort(), 'every actor and repository fetched').toEqual(
      [...logins.map((l) => `/users/${l}`), ...repoNames.map((n) => `/repos/${n}`)].sort(),
    );
    expect([...byPath.entries()].filter(([, n]) => n > 1)).toEqual([]);
    // The repo and org sources target their pushes for commits: no push compared twice.
    const compares = new Map<string, number>();
    for (const r of fake.requests)
      if (r.path.includes('/compare/')) compares.set(r.path, (compares.get(r.path) ?? 0) + 1);
    expect([...compares.entries()].filter(([, n]) => n > 1)).toEqual([]);

    // Every event once; every request the fake saw is exactly one ledger row.
    const stored = await sql<{ id: string }>`SELECT id::text FROM push_events ORDER BY id`.execute(
      t.db,
    );
    expect(stored.rows.map((r) => r.id)).toEqual([...eventIds].sort());
    const created = await sql<{ n: number }>`
      SELECT sum(events_created)::int AS n FROM ingestion_runs`.execute(t.db);
    expect(created.rows[0]!.n).toBe(eventIds.length);
    const ledger = await sql<{ outcome: string; n: number }>`
      SELECT outcome, count(*)::int AS n FROM github_requests GROUP BY 1`.execute(t.db);
    const sent = ledger.rows
      .filter((r) => r.outcome === 'completed' || r.outcome === 'error')
      .reduce((n, r) => n + r.n, 0);
    expect(sent).toBe(fake.requests.length);
    expect(
      ledger.rows.find((r) => r.outcome === 'reserved' || r.outcome === 'sent'),
    ).toBeUndefined();

    // Who did the work: both kinds of process took part (the point of the test).
    const byWorker = await sql<{ worker: string; n: number }>`
      SELECT worker, count(*)::int AS n FROM enrichment_attempts GROUP BY 1`.execute(t.db);
    const enricherIds = new Set(enrichers.map((e) => `:${e.process.pid}`));
    const byCli = byWorker.rows
      .filter((r) => [...enricherIds].some((s) => r.worker.endsWith(s)))
      .reduce((n, r) => n + r.n, 0);
    console.log(
      `stress: ${fake.requests.length} requests, ${SOURCES} sources, ${eventIds.length} events, ${entities} entities ` +
        `(${byCli} enriched by bin/enrich, ${entities - byCli} by workers), ` +
        `${workers.reduce((n, w) => n + w.lines.filter((l) => l.event === 'source.busy').length, 0)} source.busy, ` +
        `peak ${peakConnections} connections`,
    );
  });
});
