import { AsyncLocalStorage } from 'node:async_hooks';
import { performance } from 'node:perf_hooks';
import { sql } from 'kysely';
import { createDb } from '../src/platform/db/pool.ts';
import { kyselyOn } from '../src/platform/db/session.ts';
import { storePage } from '../src/poll/page-store.ts';
import { pollDueSources, pollsInFlight } from '../src/poll/poll-due.ts';
import { mapEventsPage } from '../src/store/mapping.ts';
import { storePushes } from '../src/store/pushes.ts';
import { addSource } from '../src/store/sources.ts';
import { startFakeGitHub } from '../test/support/fake-github.ts';
import { type GitHubEvent, pushEvent } from '../test/support/github-factories.ts';
import { copyCeiling, pushCopyRow } from './lib/ceiling.ts';
import type { BenchDatabase } from './lib/database.ts';
import { benchConfig, benchDeps } from './lib/github.ts';
import { recordingPool, type SentStatement } from './lib/pg-recorder.ts';
import type { ResultLog } from './lib/results.ts';
import { secondsSince, timeRuns } from './lib/stats.ts';

/**
 * Benchmark 1: ingest against the physical ceiling. The fake GitHub serves SOURCES repo
 * feeds of 300 PushEvents each over loopback HTTP; the real poll path (pollDueSources →
 * pollSource, the real client with its gate and ledger) reads them in pages of 100 and
 * stores pushes, actors and repositories. Then the same push rows are COPYed into a
 * scratch table shaped like push_events (same keys and indexes): the ceiling. Target:
 * ingest ≥ 0.25 × COPY (0.40 was the first goal).
 *
 * Every statement is timed on the way (bench/lib/pg-recorder.ts), so the result says
 * where the time went: HTTP and the request ledger, each SQL statement, or JavaScript.
 */

const SOURCES = Number(process.env.BENCH_SOURCES ?? 100);
const EVENTS_PER_SOURCE = 300;
/** Actors recur across feeds, as people push to many repositories. */
const ACTOR_POOL = 5_000;
const TARGET_RATIO = 0.25;

function buildFeeds(): { target: string; events: GitHubEvent[] }[] {
  const feeds: { target: string; events: GitHubEvent[] }[] = [];
  let n = 0;
  for (let s = 1; s <= SOURCES; s++) {
    const repo = { id: 7_000_000 + s, name: `bench-org/repo-${s}` };
    const events: GitHubEvent[] = [];
    for (let i = 0; i < EVENTS_PER_SOURCE; i++) {
      const actorId = 3_000_000 + ((n++ * 7919) % ACTOR_POOL);
      events.push(pushEvent({ repo, actor: { id: actorId, login: `dev-${actorId}` } }));
    }
    feeds.push({ target: repo.name, events });
  }
  return feeds;
}

/** Which part of the poll path a statement outside github.request belongs to. */
function phaseOf(text: string): string {
  const t = text.replace(/\s+/g, ' ').trim().toLowerCase();
  if (t.startsWith('with v as materialized')) return 'store page (one bulk statement, ADR 0040)';
  if (t.startsWith('with creds') || t.startsWith('select pg_advisory_xact_lock')) {
    return "page 1's reservation (made before the run opens)";
  }
  if (t.includes('"ingestion_runs"') || t.includes('"event_sources"')) return 'runs and sources';
  if (t.startsWith('insert into "push_events"')) return 'insert push_events';
  if (t.startsWith('update push_events')) return 'fill in event ids (UPDATE push_events)';
  if (t.startsWith('insert into "actors"')) return 'upsert actors';
  if (t.startsWith('insert into "repositories"')) return 'upsert repositories';
  if (t.includes('from push_events p join ingestion_runs')) return 'horizon check';
  if (t === 'begin' || t === 'commit' || t === 'rollback') return 'BEGIN/COMMIT';
  return 'locks, budget reads, the rest';
}

interface Split {
  ms: number;
  n: number;
}

function add(split: Map<string, Split>, key: string, ms: number): void {
  const v = split.get(key) ?? { ms: 0, n: 0 };
  v.ms += ms;
  v.n += 1;
  split.set(key, v);
}

/** Round-trip and commit latency of this database, to explain the figures. */
async function probeLatency(database: BenchDatabase): Promise<{ rtt: number; commit: number }> {
  const client = await database.pool.connect();
  try {
    await client.query('CREATE TABLE IF NOT EXISTS bench_commit_probe (x int)');
    const rtt = await timeRuns(200, () => client.query('SELECT 1'));
    const commit = await timeRuns(200, () =>
      client.query('INSERT INTO bench_commit_probe VALUES (1)'),
    );
    await client.query('DROP TABLE bench_commit_probe');
    return { rtt: rtt.p50, commit: commit.p50 };
  } finally {
    client.release();
  }
}

async function storeOnly(
  database: BenchDatabase,
  feeds: { target: string }[],
  fake: { feed(key: string): GitHubEvent[] },
  path: 'storePushes' | 'bulk' = 'storePushes',
): Promise<number> {
  const pages = feeds.flatMap((f, i) => {
    const events = fake.feed(`repo:${f.target}`); // newest first, as served
    return [0, 1, 2].map((p) => ({
      sourceId: i + 1,
      events: events.slice(p * 100, p * 100 + 100),
    }));
  });
  // The page store as the poll path runs it: storePage on the poll's own session, where
  // the merge is a prepared statement planned once (ADR 0122), each page its own
  // transaction (BEGIN, the merge, COMMIT). On a pool's Kysely it would be planned per page.
  const client = path === 'bulk' ? await database.pool.connect() : null;
  const session = client ? kyselyOn(client) : null;
  const t0 = performance.now();
  try {
    for (const page of pages) {
      const mapped = mapEventsPage(page.events, 'bench');
      if (session) {
        await storePage(
          session,
          mapped,
          { sourceId: page.sourceId, runId: null, targetsFrom: database.db },
          async () => 0,
        );
        continue;
      }
      await database.db
        .transaction()
        .execute((trx) =>
          storePushes(trx, mapped.pushes, { origin: 'poll', sourceId: page.sourceId }),
        );
    }
  } finally {
    client?.release();
  }
  const perSecond = (pages.length * 100) / secondsSince(t0);
  await sql`TRUNCATE push_events, actors, repositories`.execute(database.db);
  return perSecond;
}

export async function benchIngest(database: BenchDatabase, results: ResultLog): Promise<string[]> {
  const feeds = buildFeeds();
  const total = SOURCES * EVENTS_PER_SOURCE;
  // A token's bucket, far larger than the run needs: the quota must not be the limit here.
  const fake = await startFakeGitHub({ tokenLimit: 10_000_000 });
  // Every statement is timed and filed under what the poll path was doing: inside a
  // github.request (reservation, ledger) or outside it (storing, bookkeeping). Several
  // sources are polled at once, so "inside" is the statement's own async context (a
  // promise reaction runs in the context its .then was called from: the query's caller),
  // not a global counter that another poll's request would switch on.
  const inRequest = new AsyncLocalStorage<true>();
  let requestMs = 0;
  let requests = 0;
  const inside = new Map<string, Split>();
  const outside = new Map<string, Split>();
  let recording = false;
  const onStatement = (s: SentStatement) => {
    if (!recording) return;
    if (inRequest.getStore()) add(inside, 'ledger + budget SQL', s.ms);
    else add(outside, phaseOf(s.text), s.ms);
  };
  const pool = recordingPool(database.url, 8, onStatement, 'gpi-bench-ingest');
  const db = createDb(pool);
  const config = benchConfig(database, fake.url);
  const deps = { ...benchDeps(database, config, 'bench:ingest', db), pool };
  const request = deps.github.request.bind(deps.github);
  deps.github = {
    ...deps.github,
    request: async (req) => {
      const t0 = performance.now();
      try {
        return await inRequest.run(true, () => request(req));
      } finally {
        requests++;
        requestMs += performance.now() - t0;
      }
    },
  };
  try {
    for (const f of feeds) {
      fake.addEvents(`repo:${f.target}`, f.events);
      await addSource(deps.db, { kind: 'repo', target: f.target }, 'live');
    }
    // Due for certain: next_poll_at defaults to the database's now(), which can be a
    // fraction of a millisecond after the JavaScript clock the pre-filter compares with.
    await sql`UPDATE event_sources SET next_poll_at = now() - interval '1 minute'`.execute(db);

    // The data path alone: each page mapped and stored in its own transaction, as the
    // poll path stores it, without HTTP, the gate, the ledger or run bookkeeping.
    const storeAlone = await storeOnly(database, feeds, fake);
    const bulkAlone = await storeOnly(database, feeds, fake, 'bulk');
    recording = true;

    const t0 = performance.now();
    const summaries = await pollDueSources(deps);
    const seconds = secondsSince(t0);
    recording = false;

    const created = summaries.reduce((a, s) => a + s.eventsCreated, 0);
    const failed = summaries.filter((s) => s.outcome !== 'completed');
    const stored = await sql<{ n: string }>`SELECT count(*) AS n FROM push_events`.execute(db);
    if (failed.length || created !== total || Number(stored.rows[0]!.n) !== total) {
      throw new Error(
        `ingest bench: expected ${total} pushes stored by ${SOURCES} completed runs; got ` +
          `${created} created, ${stored.rows[0]!.n} stored, ${failed.length} runs not completed ` +
          `(${failed[0]?.error?.message ?? failed[0]?.outcome ?? ''}); ` +
          JSON.stringify(
            summaries.filter((s) => s.eventsCreated !== EVENTS_PER_SOURCE).slice(0, 3),
          ),
      );
    }
    const eventsPerSecond = total / seconds;

    // The ceiling: the same rows (as the poll path maps them) through COPY.
    const rows = feeds.flatMap((f, i) =>
      mapEventsPage(f.events, f.target).pushes.map((p) => pushCopyRow(p, 'poll', i + 1, 1)),
    );
    const copyPerSecond = await copyCeiling(database, rows);
    const ratio = eventsPerSecond / copyPerSecond;

    const totalMs = seconds * 1000;
    // The polls in flight at once: their summed time is what the phases below divide.
    const streams = Math.min(SOURCES, pollsInFlight(deps));
    const streamMs = totalMs * streams;
    const pct = (ms: number) => `${((ms / streamMs) * 100).toFixed(1)}%`;
    const pages = feeds.length * 3;
    const ledger = inside.get('ledger + budget SQL') ?? { ms: 0, n: 0 };
    const profile: Record<string, string> = {
      [`github.request total (${requests})`]: pct(requestMs),
      [`  ledger + budget SQL (${ledger.n})`]: pct(ledger.ms),
      '  gate, HTTP, JSON.parse (the rest of it)': pct(requestMs - ledger.ms),
    };
    let outsideMs = 0;
    for (const [k, v] of [...outside].sort((a, b) => b[1].ms - a[1].ms)) {
      profile[`${k} (${v.n})`] = pct(v.ms);
      outsideMs += v.ms;
    }
    profile['the rest: mapping, kysely, pool waits, idle tail'] = pct(
      Math.max(0, streamMs - requestMs - outsideMs),
    );
    const statementsSent = [...outside.values()].reduce((a, v) => a + v.n, ledger.n);
    const statementsPerPage = statementsSent / pages;
    const latency = await probeLatency(database);

    const detail = {
      sources: SOURCES,
      events: total,
      seconds,
      requests: fake.requests.length,
      secondaryLimitHits: fake.secondaryLimitHits,
      // The gate's own pool is not recorded: add its 2 statements per request (ADR 0080).
      statementsPerPage: statementsPerPage + 2,
      msPerPage: totalMs / pages,
      dbRoundTripMs: latency.rtt,
      dbCommitMs: latency.commit,
    };
    results.record({
      bench: 'ingest',
      metric: 'poll path events/s',
      value: eventsPerSecond,
      unit: 'events/s',
      detail,
    });
    results.record({
      bench: 'ingest',
      metric: 'COPY ceiling rows/s',
      value: copyPerSecond,
      unit: 'rows/s',
      detail: { rows: rows.length },
    });
    results.record({
      bench: 'ingest',
      metric: 'store alone (map + storePushes per page) events/s',
      value: storeAlone,
      unit: 'events/s',
      detail: { ratioToCopy: storeAlone / copyPerSecond, msPerPage: 100_000 / storeAlone },
    });
    results.record({
      bench: 'ingest',
      metric: 'store alone / COPY ratio',
      value: storeAlone / copyPerSecond,
      unit: '×',
    });
    results.record({
      bench: 'ingest',
      metric: 'page store alone (map + storePage on the poll session) / COPY',
      value: bulkAlone / copyPerSecond,
      unit: '×',
      target: { op: '>=', value: TARGET_RATIO },
      detail: { eventsPerSecond: bulkAlone, msPerPage: 100_000 / bulkAlone },
    });
    results.record({
      bench: 'ingest',
      metric: 'ingest / COPY ratio',
      value: ratio,
      unit: '×',
      target: { op: '>=', value: TARGET_RATIO },
      detail: { ...detail, profile },
    });
    results.note(
      `  ${(totalMs / pages).toFixed(1)} ms per page of 100: ~${Math.round(statementsPerPage + 2)} statements ` +
        `(database round trip ${latency.rtt.toFixed(2)} ms, a committing INSERT ${latency.commit.toFixed(2)} ms)`,
    );
    results.note(
      `  where the poll path spent its time (shares of the ${streams} concurrent polls' summed time):`,
    );
    for (const [k, v] of Object.entries(profile)) results.note(`    ${v.padStart(6)}  ${k}`);
    return [];
  } finally {
    await deps.github.close();
    await db.destroy();
    await fake.close();
  }
}
