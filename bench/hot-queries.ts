import { performance } from 'node:perf_hooks';
import { sql } from 'kysely';
import type { Db } from '../src/db/pool.ts';
import { claimNext, releaseClaim } from '../src/enrichment/claim.ts';
import { countDue, DEFAULT_TTL_SECONDS, hasDueWork } from '../src/enrichment/due.ts';
import { ENTITY_CLASSES, type EntityClass } from '../src/enrichment/entity.ts';
import { type BudgetPolicy, reserve, singleCredential } from '../src/github/budget.ts';
import { credentialOf } from '../src/github/credential.ts';
import { releaseReservation } from '../src/github/ledger.ts';
import { dueSourcesQuery } from '../src/ingestion/runner.ts';
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
 * and a month of request ledger. Each query is timed over RUNS calls, and every statement
 * it sends is EXPLAINed: a sequential scan on a big table fails the whole bench.
 */

const SCALE = Number(process.env.BENCH_SCALE ?? 1_000_000);
const SOURCES = 10_000;
const LEDGER_ROWS = Number(process.env.BENCH_LEDGER_ROWS ?? 1_000_000);
const RUNS = Number(process.env.BENCH_RUNS ?? 1000);
const P99_TARGET_MS = 5;

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
  // A month of history at a steady rate, plus a busy last hour (3,000 of a 5,000 quota).
  await sql`
    INSERT INTO github_requests (credential, purpose, method, path, outcome, status, counted,
      reserved_at, sent_at, finished_at, duration_ms)
    SELECT ${credential}, CASE WHEN g % 3 = 0 THEN 'poll' ELSE 'enrich' END, 'GET',
      '/users/user-' || g, 'completed', 200, true, t, t, t, 40
    FROM generate_series(1, ${rows}::int) g,
      LATERAL (SELECT CASE WHEN g <= 3000
        THEN ${now}::timestamptz - (g * 1.2) * interval '1 second'
        ELSE ${now}::timestamptz - interval '1 hour' - (g::float8 / ${rows}) * interval '30 days' END AS t) x`.execute(
    db,
  );
}

interface HotQuery {
  name: string;
  run: (db: Db) => Promise<unknown>;
}

/**
 * Reserve + release on a budget policy: what every request pays before it is sent
 * (src/github/budget.ts), and what a runner told no by the fair share pays to give it back
 * (src/github/ledger.ts). With a pool, the choice of credential is part of it.
 */
function reserveRelease(name: string, policy: BudgetPolicy): HotQuery {
  return {
    name,
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

function hotQueries(policy: BudgetPolicy, pools: BudgetPolicy[]): HotQuery[] {
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
    reserveRelease('reserve + release (enrich)', policy),
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
  // The token-configured credential: a 5,000/h quota, of which enrichment may take 2/3.
  const policy: BudgetPolicy = singleCredential(credentialOf('live', BENCH_TOKEN));
  // Pools as GITHUB_TOKENS and an App would make them (issue 13): the same token, plus
  // installations whose last hour is as busy, with a shorter history each.
  // Up to a pool of 16 (issue 19): the reservation must not grow with the pool.
  const installations = Array.from({ length: 15 }, (_, i) => i + 1).map(
    (id) => singleCredential(`installation:${id}`).credentials[0]!,
  );
  const pools: BudgetPolicy[] = [2, 4, 16].map((n) => ({
    credentials: [policy.credentials[0]!, ...installations.slice(0, n - 1)],
    share: policy.share,
  }));

  const t0 = performance.now();
  for (const cls of ENTITY_CLASSES) await seedEntities(db, cls, now);
  await seedSources(db, now);
  await seedLedger(db, policy.credentials[0]!.label, now);
  for (const c of installations) await seedLedger(db, c.label, now, LEDGER_ROWS / 30);
  // VACUUM as well as ANALYZE: a table that has lived a while has a visibility map, which
  // is what lets the planner answer from an index alone.
  await sql`VACUUM (ANALYZE)`.execute(db);
  results.record({
    bench: 'hot',
    metric: 'seed time',
    value: secondsSince(t0),
    unit: 's',
    detail: { actors: SCALE, repositories: SCALE, sources: SOURCES, ledger: LEDGER_ROWS },
  });

  for (const q of hotQueries(policy, pools)) {
    const timing = await timeRuns(RUNS, () => q.run(db));
    results.record({
      bench: 'hot',
      metric: `${q.name} p50`,
      value: timing.p50,
      unit: 'ms',
      detail: { runs: timing.runs, mean: timing.mean, max: timing.max },
    });
    results.record({
      bench: 'hot',
      metric: `${q.name} p99`,
      value: timing.p99,
      unit: 'ms',
      target: { op: '<', value: P99_TARGET_MS },
      detail: { runs: timing.runs, mean: timing.mean, max: timing.max },
    });

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
  return failures;
}
