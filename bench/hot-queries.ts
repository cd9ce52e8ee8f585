import { performance } from 'node:perf_hooks';
import { sql } from 'kysely';
import { releaseReservation } from '../src/budget/ledger.ts';
import { reserve } from '../src/budget/reserve.ts';
import type { EntityClass } from '../src/budget/types.ts';
import { type BudgetPolicy, singleCredential } from '../src/budget/window.ts';
import { claimNext, releaseClaim } from '../src/enrichment/claim.ts';
import { credentialOf } from '../src/platform/config/credential-label.ts';
import type { Db } from '../src/platform/db/pool.ts';
import { dueSourcesQuery } from '../src/poll/poll-due.ts';
import { countDue, DEFAULT_TTL_SECONDS, hasDueWork } from '../src/work/enrichment-due.ts';
import { ENTITY_CLASSES } from '../src/work/entity.ts';
import type { BenchDatabase } from './lib/database.ts';
import { captureStatements, explainStatements, oneLine } from './lib/explain.ts';
import { BENCH_TOKEN } from './lib/github.ts';
import type { ResultLog } from './lib/results.ts';
import { secondsSince, timeRuns } from './lib/stats.ts';

/**
 * Benchmark 2: the queries every tick and every entity pay, at a realistic scale.
 * Seeded with generate_series (INSERT … SELECT, then ANALYZE): SCALE actors and as many
 * repositories — 1% pending (some leased by another worker, some waiting on backoff,
 * some refreshes), the rest enriched with ~0.5% past the TTL — 10k sources with ~1% due,
 * a month of request ledger and, for each of 16 credentials, a full window (seedWindow).
 * Each query is timed over RUNS calls, and every statement
 * it sends is EXPLAINed: a sequential scan on a big table fails the whole bench.
 */

const SCALE = Number(process.env.BENCH_SCALE ?? 1_000_000);
const SOURCES = 10_000;
const LEDGER_ROWS = Number(process.env.BENCH_LEDGER_ROWS ?? 1_000_000);
const RUNS = Number(process.env.BENCH_RUNS ?? 1000);
/** Spending requests in each credential's window for the reservation. */
const WINDOW_ROWS = Number(process.env.BENCH_WINDOW_ROWS ?? 55_000);
/** A quota with room for the full window and every reservation of the run. */
const WINDOW_QUOTA = 4 * WINDOW_ROWS;
const P99_TARGET_MS = 5;
const POOL_SIZES = [1, 2, 4, 16];
/** "Flat in the pool size": a pool of 16 reserves within this factor of one credential. */
const POOL_GROWTH_TARGET = 1.5;

async function seedEntities(db: Db, cls: EntityClass, now: Date): Promise<void> {
  const table = cls === 'actor' ? 'actors' : 'repositories';
  const nameColumn = cls === 'actor' ? 'login' : 'full_name';
  const name = cls === 'actor' ? sql`'user-' || g` : sql`'owner-' || g || '/repo-' || g`;
  // g % 100 = 0 → pending (k = g / 100 numbers them): k % 200 = 1 leased by someone else
  // and oldest (the claim must step over them), k % 5 = 4 in backoff, k % 10 = 3 a refresh.
  await sql`
    INSERT INTO ${sql.table(table)} (id, ${sql.ref(nameColumn)}, enrichment_state, attempts,
      next_attempt_at, claimed_until, claimed_by, enriched_at, etag, first_seen_at, updated_at)
    SELECT g, ${name},
      CASE WHEN g % 100 = 0 THEN 'pending' WHEN g % 1000 = 1 THEN 'gone'
           WHEN g % 1000 = 2 THEN 'failed' ELSE 'enriched' END,
      CASE WHEN g % 100 = 0 AND (g / 100) % 5 = 4 THEN 1 ELSE 0 END,
      CASE WHEN g % 100 <> 0 THEN ${now}::timestamptz
           WHEN (g / 100) % 200 = 1 THEN ${now}::timestamptz - interval '2 days' - (g / 100) * interval '1 second'
           WHEN (g / 100) % 5 = 4 THEN ${now}::timestamptz + ((g / 100) % 3600) * interval '1 second'
           ELSE ${now}::timestamptz - ((g / 100) % 86400) * interval '1 second' END,
      CASE WHEN g % 100 = 0 AND (g / 100) % 200 = 1 THEN ${now}::timestamptz + interval '1 hour' END,
      CASE WHEN g % 100 = 0 AND (g / 100) % 200 = 1 THEN 'bench:other-worker' END,
      CASE WHEN g % 100 = 0 AND (g / 100) % 10 <> 3 THEN NULL
           WHEN g % 200 = 7 THEN ${now}::timestamptz - interval '8 days' - (g % 1000) * interval '1 second'
           ELSE ${now}::timestamptz - (g % 600000) * interval '1 second' END,
      CASE WHEN g % 100 = 0 AND (g / 100) % 10 <> 3 THEN NULL ELSE 'W/"' || md5(g::text) || '"' END,
      ${now}::timestamptz - interval '30 days' + g * interval '1 millisecond',
      ${now}::timestamptz
    FROM generate_series(1, ${SCALE}::int) g`.execute(db);
}

async function seedSources(db: Db, now: Date): Promise<void> {
  // next_poll_at spread over the coming hour, 36 s of it already past: ~1% due.
  await sql`
    INSERT INTO event_sources (kind, target, mode, enabled, poll_interval_seconds, next_poll_at,
      last_polled_at, recent_event_ids, etag, commits_enabled)
    SELECT 'repo', 'owner-' || g || '/repo-' || g, 'live', g % 20 <> 0, 60,
      ${now}::timestamptz + ((g % 3600) - 36) * interval '1 second',
      ${now}::timestamptz - interval '1 hour',
      ARRAY(SELECT g::bigint * 1000 + x FROM generate_series(0, 299) x),
      'W/"' || md5(g::text) || '"', true
    FROM generate_series(1, ${SOURCES}::int) g`.execute(db);
}

async function seedLedger(
  db: Db,
  credential: string,
  now: Date,
  rows = LEDGER_ROWS,
): Promise<void> {
  // A month of history at a steady rate, older than the window.
  await sql`
    INSERT INTO github_requests (credential, purpose, method, path, outcome, status, counted,
      reserved_at, sent_at, finished_at, duration_ms)
    SELECT ${credential}, CASE WHEN g % 3 = 0 THEN 'poll' ELSE 'enrich' END, 'GET',
      '/users/user-' || g, 'completed', 200, true, t, t, t, 40
    FROM generate_series(1, ${rows}::int) g,
      LATERAL (SELECT ${now}::timestamptz - interval '1 hour 1 minute'
        - (g::float8 / ${rows}) * interval '30 days' AS t) x`.execute(db);
}

/**
 * A FULL window: WINDOW_ROWS requests spread evenly over the credential's
 * window, a third polls, 1 in 11 a 304 and 1 in 97 abandoned unsent (both free): 55,000 rows
 * leave ~49,400 that spend, 14 a second — about what one gate carries. Each is  answered 40 ms
 * after it was reserved, before the rate-limit observation. Half the credentials (`fresh`)
 * have GitHub's hour: a reset 20 minutes ahead, so their window is the last 41 minutes;
 * the others no rate-limit row: the last 60 minutes. The quota is raised so that every
 * reservation of the run still has room.
 */
async function seedWindow(db: Db, credential: string, now: Date, fresh: boolean): Promise<void> {
  const spanSeconds = fresh ? 41 * 60 - 5 : 3600 - 5;
  await sql`
    INSERT INTO github_requests (credential, purpose, method, path, outcome, status, counted,
      reserved_at, sent_at, finished_at, duration_ms)
    SELECT ${credential}, CASE WHEN g % 3 = 0 THEN 'poll' ELSE 'enrich' END, 'GET',
      '/users/user-' || g,
      CASE WHEN g % 97 = 0 THEN 'abandoned' ELSE 'completed' END,
      CASE WHEN g % 97 = 0 THEN NULL WHEN g % 11 = 0 THEN 304 ELSE 200 END,
      CASE WHEN g % 97 = 0 THEN NULL ELSE g % 11 <> 0 END,
      t, CASE WHEN g % 97 = 0 THEN NULL ELSE t END, t + interval '40 milliseconds', 40
    FROM generate_series(1, ${WINDOW_ROWS}::int) g,
      LATERAL (SELECT ${now}::timestamptz - interval '2 seconds'
        - (g::float8 / ${WINDOW_ROWS}) * ${spanSeconds} * interval '1 second' AS t) x`.execute(db);
  if (fresh) {
    await sql`
      INSERT INTO github_rate_limits (credential, quota, remaining, reset_at, observed_at)
      VALUES (${credential}, ${WINDOW_QUOTA}, ${WINDOW_QUOTA - WINDOW_ROWS},
        ${now}::timestamptz + interval '20 minutes', ${now}::timestamptz - interval '1 second')`.execute(
      db,
    );
  }
}

interface HotQuery {
  name: string;
  /** A reservation on a pool of this many credentials. */
  pool?: number;
  run: (db: Db) => Promise<unknown>;
}

/**
 * Reserve + release on a budget policy: what every request pays before it is sent
 * (src/budget/reserve.ts), and what a runner told no by the fair share pays to give it back
 * (src/budget/ledger.ts). With a pool, the choice of credential is part of it.
 */
function reserveRelease(name: string, policy: BudgetPolicy): HotQuery {
  return {
    name,
    pool: policy.credentials.length,
    run: async (db) => {
      const now = new Date();
      const d = await reserve(db, policy, 'enrich', {
        now,
        entity: { class: 'actor', id: 42 },
        path: '/users/user-42',
      });
      if (!d.ok) throw new Error(`reserve said no (${d.reason}): the seed leaves room`);
      await releaseReservation(db, d.reservation.id, 'bench', now);
    },
  };
}

function hotQueries(pools: BudgetPolicy[]): HotQuery[] {
  const claimRelease = (cls: EntityClass) => async (db: Db) => {
    const claim = await claimNext(db, cls, {
      now: new Date(),
      leaseSeconds: 60,
      workerId: 'bench:hot',
    });
    if (!claim) throw new Error(`claimNext(${cls}) found nothing: the seed has due rows`);
    if (!(await releaseClaim(db, claim))) throw new Error(`releaseClaim(${cls}) lost its lease`);
  };
  return [
    {
      name: 'due-source pre-filter',
      run: (db) => dueSourcesQuery(db, 'live', new Date()).execute(),
    },
    ...ENTITY_CLASSES.flatMap((cls) => [
      {
        name: `reconcile check hasDueWork(${cls})`,
        run: (db: Db) => hasDueWork(db, cls, new Date(), DEFAULT_TTL_SECONDS),
      },
      {
        name: `countDue(${cls})`,
        run: (db: Db) => countDue(db, cls, new Date(), DEFAULT_TTL_SECONDS),
      },
      { name: `claim + release (${cls})`, run: claimRelease(cls) },
    ]),
    ...pools.map((p) =>
      reserveRelease(`reserve + release (enrich), pool of ${p.credentials.length}`, p),
    ),
  ];
}

export async function benchHotQueries(
  database: BenchDatabase,
  results: ResultLog,
): Promise<string[]> {
  const failures: string[] = [];
  const { db } = database;
  const now = new Date();
  // The token-configured credential, and installations as GITHUB_TOKENS and an App would
  // add them, each with a full window. Pools of 1 to 16: the
  // reservation must not grow with the pool, nor with the window.
  const token = { label: credentialOf('live', BENCH_TOKEN), defaultQuota: WINDOW_QUOTA };
  const installations = Array.from({ length: 15 }, (_, i) => ({
    label: `installation:${i + 1}`,
    defaultQuota: WINDOW_QUOTA,
  }));
  const share = singleCredential(token.label).share;
  const pools: BudgetPolicy[] = POOL_SIZES.map((n) => ({
    credentials: [token, ...installations.slice(0, n - 1)],
    share,
  }));

  const t0 = performance.now();
  for (const cls of ENTITY_CLASSES) await seedEntities(db, cls, now);
  await seedSources(db, now);
  await seedLedger(db, token.label, now);
  for (const c of installations) await seedLedger(db, c.label, now, Math.floor(LEDGER_ROWS / 30));
  for (const [i, c] of [token, ...installations].entries()) {
    await seedWindow(db, c.label, now, i % 2 === 0);
  }
  // VACUUM as well as ANALYZE: a table that has lived a while has a visibility map, which
  // is what lets the planner answer from an index alone.
  await sql`VACUUM (ANALYZE)`.execute(db);
  results.record({
    bench: 'hot',
    metric: 'seed time',
    value: secondsSince(t0),
    unit: 's',
    detail: {
      actors: SCALE,
      repositories: SCALE,
      sources: SOURCES,
      ledger: LEDGER_ROWS,
      windowRowsPerCredential: WINDOW_ROWS,
    },
  });

  const p99s = new Map<string, number>();
  for (const q of hotQueries(pools)) {
    const timing = await timeRuns(RUNS, () => q.run(db));
    results.record({
      bench: 'hot',
      metric: `${q.name} p50`,
      value: timing.p50,
      unit: 'ms',
      detail: { runs: timing.runs, mean: timing.mean, max: timing.max },
    });
    // The reservation's goal: p99 ≤ 5 ms against a full window.
    results.record({
      bench: 'hot',
      metric: `${q.name} p99`,
      value: timing.p99,
      unit: 'ms',
      target: { op: q.pool ? '<=' : '<', value: P99_TARGET_MS },
      detail: { runs: timing.runs, mean: timing.mean, max: timing.max, pool: q.pool },
    });
    if (q.pool) p99s.set(String(q.pool), timing.p99);

    const statements = await captureStatements(database.url, (recDb) => q.run(recDb));
    for (const check of await explainStatements(database.pool, statements)) {
      results.note(`  plan for: ${oneLine(check.statement.text)}`);
      for (const line of check.plan) results.note(`    ${line}`);
      for (const scan of check.bigSeqScans) {
        const msg = `${q.name}: ${scan} in ${oneLine(check.statement.text, 100)}`;
        failures.push(msg);
        results.note(`  !!! SEQUENTIAL SCAN ON A BIG TABLE: ${msg}`);
      }
    }
  }
  const first = p99s.get(String(POOL_SIZES[0]));
  const last = p99s.get(String(POOL_SIZES.at(-1)));
  if (first !== undefined && last !== undefined) {
    results.record({
      bench: 'hot',
      metric: `reserve + release p99, pool of ${POOL_SIZES.at(-1)} ÷ pool of ${POOL_SIZES[0]}`,
      value: last / first,
      unit: '×',
      target: { op: '<=', value: POOL_GROWTH_TARGET },
      detail: Object.fromEntries(p99s),
    });
  }
  return failures;
}
