import { performance } from 'node:perf_hooks';
import { sql } from 'kysely';
import { type CycleSummary, enrichCycle } from '../src/enrichment/cycle.ts';
import type { Db } from '../src/platform/db/pool.ts';
import { ENTITY_CLASSES } from '../src/work/entity.ts';
import { type FakeGitHub, startFakeGitHub } from '../test/support/fake-github.ts';
import { appKeys } from '../test/support/github-app-keys.ts';
import { repoProfile, userProfile } from '../test/support/github-factories.ts';
import type { BenchDatabase } from './lib/database.ts';
import { type BenchDeps, benchConfig, benchDeps } from './lib/github.ts';
import type { ResultLog } from './lib/results.ts';
import { secondsSince } from './lib/stats.ts';

/**
 * Benchmark 3: enrichment. ENTITIES pending entities (half actors, half repositories)
 * against a zero-latency fake. Every request passes the request gate, one at a time per
 * credential, so the ceiling is the gate-serialized request rate, measured alone first.
 * Then 1, 2 and 4 concurrent runners (each with its own client and gate session, as
 * separate processes would have) run enrichment cycles for RUN_SECONDS each: entities/s,
 * its share of the ceiling, and duplicate requests (a path fetched twice: must be 0).
 * Then, with the quota as the limit (a small hourly quota), the share of enrichment's
 * allowance actually spent before the runners stop (target ≥ 95%).
 * Last, a GitHub App with one installation against two: 6 runners with GitHub's
 * round trip simulated (APP_LATENCY_MS per profile), where one credential's gate is the
 * bound, and with a small quota per installation, where its allowance is.
 */

const ENTITIES = Number(process.env.BENCH_ENTITIES ?? 10_000);
const RUN_SECONDS = Number(process.env.BENCH_ENRICH_SECONDS ?? 20);
const CONCURRENCY = [1, 2, 4];
/** The quota-limited phase: enrichment's allowance is floor(QUOTA × 2/3) = 200. */
const QUOTA = 300;
/** Simulated GitHub latency per profile request in the installation comparison. */
const APP_LATENCY_MS = Number(process.env.BENCH_APP_LATENCY_MS ?? 50);
const APP_ID = 990;
/** Runners in the installation comparison: three per installation at most, as 3 workers would run. */
const APP_RUNNERS = 6;
const ACTOR_BASE = 4_000_000;
const REPO_BASE = 8_000_000;

function seedProfiles(fake: FakeGitHub): void {
  for (let i = 0; i < ENTITIES / 2; i++) {
    fake.setUser(userProfile({ id: ACTOR_BASE + i, login: `enr-${i}` }));
    fake.setRepo(repoProfile({ id: REPO_BASE + i, full_name: `enr-org/repo-${i}` }));
  }
}

async function seed(db: Db, fake: FakeGitHub): Promise<void> {
  const half = ENTITIES / 2;
  seedProfiles(fake);
  await sql`
    INSERT INTO actors (id, login) SELECT ${ACTOR_BASE}::bigint + g, 'enr-' || g
    FROM generate_series(0, ${half - 1}::int) g`.execute(db);
  await sql`
    INSERT INTO repositories (id, full_name) SELECT ${REPO_BASE}::bigint + g, 'enr-org/repo-' || g
    FROM generate_series(0, ${half - 1}::int) g`.execute(db);
}

/** Every entity pending and never fetched again; the ledger and attempts emptied. */
async function resetWork(db: Db): Promise<void> {
  for (const table of ['actors', 'repositories'] as const) {
    await sql`
      UPDATE ${sql.table(table)} SET enrichment_state = 'pending', enriched_at = NULL, etag = NULL,
        attempts = 0, claimed_until = NULL, claimed_by = NULL, last_error = NULL, profile = NULL,
        next_attempt_at = now() - interval '1 minute'
      WHERE enrichment_state <> 'pending' OR claimed_until IS NOT NULL OR next_attempt_at > now() - interval '1 minute'`.execute(
      db,
    );
  }
  await sql`TRUNCATE enrichment_attempts, github_requests, github_rate_limits`.execute(db);
  await sql`VACUUM ANALYZE actors, repositories`.execute(db);
}

/** How many times each profile path was requested since `from` (paths asked twice are duplicates). */
function duplicates(fake: FakeGitHub, from: number): number {
  const seen = new Map<string, number>();
  for (const r of fake.requests.slice(from)) {
    if (/^\/(users|repos)\//.test(r.path)) seen.set(r.path, (seen.get(r.path) ?? 0) + 1);
  }
  return [...seen.values()].filter((n) => n > 1).length;
}

interface RunnerTotals {
  processed: number;
  stops: CycleSummary['stoppedBy'][];
}

/**
 * One runner, as a worker runs it: a cycle of each class in turn, until both are idle or
 * told no, or until `until` (performance.now()) passes.
 */
async function runner(deps: BenchDeps, until: number, cap = 50): Promise<RunnerTotals> {
  const totals: RunnerTotals = { processed: 0, stops: [] };
  for (;;) {
    let active = false;
    for (const cls of ENTITY_CLASSES) {
      const s = await enrichCycle(deps, cls, {
        maxEntities: cap,
        signal: AbortSignal.timeout(Math.max(0, until - performance.now())),
      });
      totals.processed += s.processed;
      totals.stops.push(s.stoppedBy);
      if (s.stoppedBy === 'cap') active = true;
    }
    if (!active || performance.now() >= until) return totals;
  }
}

export async function benchEnrich(database: BenchDatabase, results: ResultLog): Promise<string[]> {
  const { db } = database;
  const fake = await startFakeGitHub({ tokenLimit: 10_000_000 });
  const config = benchConfig(database, fake.url);
  const clients: BenchDeps[] = CONCURRENCY.at(-1)
    ? Array.from({ length: Math.max(...CONCURRENCY) }, (_, i) =>
        benchDeps(database, config, `bench:enrich-${i + 1}`),
      )
    : [];
  try {
    await seed(db, fake);

    // The ceiling: requests through the gate and the ledger, one after another, nothing else.
    await resetWork(db);
    const ceilingRequests = Math.min(ENTITIES / 2, 1000);
    let t0 = performance.now();
    for (let i = 0; i < ceilingRequests; i++) {
      await clients[0]!.github.request({ purpose: 'enrich', path: `/users/enr-${i}` });
    }
    const ceiling = ceilingRequests / secondsSince(t0);
    results.record({
      bench: 'enrich',
      metric: 'gate-serialized request rate (ceiling)',
      value: ceiling,
      unit: 'req/s',
      detail: { requests: ceilingRequests },
    });

    for (const n of CONCURRENCY) {
      await resetWork(db);
      const from = fake.requests.length;
      const hitsBefore = fake.secondaryLimitHits;
      t0 = performance.now();
      const until = t0 + RUN_SECONDS * 1000;
      const totals = await Promise.all(clients.slice(0, n).map((d) => runner(d, until)));
      const seconds = secondsSince(t0);
      const processed = totals.reduce((a, t) => a + t.processed, 0);
      const enriched = await sql<{ n: string }>`
        SELECT (SELECT count(*) FROM actors WHERE enrichment_state = 'enriched')
             + (SELECT count(*) FROM repositories WHERE enrichment_state = 'enriched') AS n`.execute(
        db,
      );
      const rate = processed / seconds;
      const detail = {
        runners: n,
        seconds,
        processed,
        enriched: Number(enriched.rows[0]!.n),
        requests: fake.requests.length - from,
        secondaryLimitHits: fake.secondaryLimitHits - hitsBefore,
        shareOfCeiling: rate / ceiling,
      };
      results.record({
        bench: 'enrich',
        metric: `${n} runner${n > 1 ? 's' : ''}: entities/s`,
        value: rate,
        unit: 'entities/s',
        detail,
      });
      results.record({
        bench: 'enrich',
        metric: `${n} runner${n > 1 ? 's' : ''}: share of the gate ceiling`,
        value: (rate / ceiling) * 100,
        unit: '%',
        detail,
      });
      results.record({
        bench: 'enrich',
        metric: `${n} runner${n > 1 ? 's' : ''}: duplicate requests`,
        value: duplicates(fake, from),
        unit: 'paths',
        target: { op: '==', value: 0 },
        detail,
      });
      if (detail.secondaryLimitHits > 0) {
        results.note(
          `  !!! ${detail.secondaryLimitHits} requests overlapped in flight (gate breach)`,
        );
      }
    }

    // Quota as the limit: a small hourly quota, more due work than it allows.
    await resetWork(db);
    fake.setRateLimit({ limit: QUOTA, remaining: QUOTA, resetAt: new Date(Date.now() + 3600_000) });
    const from = fake.requests.length;
    t0 = performance.now();
    const totals = await Promise.all(
      clients.slice(0, 2).map((d) => runner(d, performance.now() + 120_000, 1_000_000)),
    );
    const budget = await clients[0]!.github.budget();
    const served = fake.requests.slice(from).filter((r) => r.counted).length;
    const refused = fake.requests.slice(from).filter((r) => r.status === 403).length;
    const share = (budget.spent.enrich / budget.allowance.enrich) * 100;
    results.record({
      bench: 'enrich',
      metric: 'quota-limited: share of enrich allowance spent',
      value: share,
      unit: '%',
      target: { op: '>=', value: 95 },
      detail: {
        quota: budget.quota,
        allowance: budget.allowance.enrich,
        spentPerLedger: budget.spent.enrich,
        servedByFake: served,
        refusedByFake: refused,
        processed: totals.reduce((a, t) => a + t.processed, 0),
        stops: [...new Set(totals.flatMap((t) => t.stops))],
        seconds: secondsSince(t0),
      },
    });
    await benchInstallations(database, results);
    return [];
  } finally {
    for (const c of clients) await c.github.close();
    await fake.close();
  }
}

const enrichedCount = async (db: Db) =>
  Number(
    (
      await sql<{ n: string }>`
        SELECT (SELECT count(*) FROM actors WHERE enrichment_state = 'enriched')
             + (SELECT count(*) FROM repositories WHERE enrichment_state = 'enriched') AS n`.execute(
        db,
      )
    ).rows[0]!.n,
  );

/**
 * One installation against two, each level with 6 runners as separate processes
 * would be (own clients, gates and installation tokens): first bound by the gate (one
 * request in flight per credential, APP_LATENCY_MS per answer), then by the quota (QUOTA an
 * hour per installation, 2/3 of it for enrichment). Fresh installations per level, so no
 * bucket carries spend from the previous one.
 */
async function benchInstallations(database: BenchDatabase, results: ResultLog): Promise<void> {
  const { db } = database;
  const keys = appKeys();
  const fake = await startFakeGitHub({ tokenLimit: 10_000_000 });
  const levels = {
    gate: [[1], [2, 3]],
    quota: [[11], [12, 13]],
  };
  fake.addApp({
    id: APP_ID,
    publicKey: keys.publicKey,
    installations: [
      ...levels.gate.flat(),
      ...levels.quota.flat().map((id) => ({ id, limit: QUOTA })),
    ],
  });
  seedProfiles(fake);
  const deps = (installations: number[], tag: string) => {
    const config = benchConfig(database, fake.url, {
      GITHUB_TOKEN: '',
      GITHUB_APP_ID: String(APP_ID),
      GITHUB_APP_PRIVATE_KEY: keys.privateKey,
      GITHUB_APP_INSTALLATION_IDS: installations.join(','),
    });
    return Array.from({ length: APP_RUNNERS }, (_, i) =>
      benchDeps(database, config, `bench:${tag}-${i}`),
    );
  };
  /** One level: fresh work, the runners until `until`, and what the fake saw meanwhile. */
  const level = async (ids: number[], tag: string, until: () => number, cap?: number) => {
    const runners = deps(ids, `app-${tag}-${ids.length}`);
    try {
      await resetWork(db);
      const from = fake.requests.length;
      const t0 = performance.now();
      const end = until();
      const totals = await Promise.all(runners.map((d) => runner(d, end, cap)));
      const requests = fake.requests.slice(from);
      const perCredential: Record<string, number> = {};
      for (const r of requests) {
        if (r.method === 'GET')
          perCredential[r.credential] = (perCredential[r.credential] ?? 0) + 1;
      }
      return {
        processed: totals.reduce((a, t) => a + t.processed, 0),
        seconds: secondsSince(t0),
        detail: {
          perCredential,
          maxInFlightByCredential: { ...fake.maxInFlightByCredential },
          forbidden: requests.filter((r) => r.status === 403).length,
          duplicates: duplicates(fake, from),
          tokenRequests: requests.filter((r) => r.method === 'POST').length,
          stops: [...new Set(totals.flatMap((t) => t.stops))],
        },
      };
    } finally {
      for (const d of runners) await d.github.close();
    }
  };
  const installations = (ids: number[]) => `${ids.length} installation${ids.length > 1 ? 's' : ''}`;
  try {
    fake.fail({ path: /^\/(users|repos)\//, delayMs: APP_LATENCY_MS, times: Infinity });
    const rates: number[] = [];
    for (const ids of levels.gate) {
      const r = await level(ids, 'gate', () => performance.now() + RUN_SECONDS * 1000);
      rates.push(r.processed / r.seconds);
      results.record({
        bench: 'enrich',
        metric: `${installations(ids)}, ${APP_LATENCY_MS} ms per answer, ${APP_RUNNERS} runners: entities/s`,
        value: r.processed / r.seconds,
        unit: 'entities/s',
        detail: { seconds: r.seconds, processed: r.processed, ...r.detail },
      });
    }
    results.record({
      bench: 'enrich',
      metric: 'two installations / one: entity rate (gate-bound)',
      value: rates[1]! / rates[0]!,
      unit: '×',
      target: { op: '>=', value: 1.8 },
    });

    const enriched: number[] = [];
    for (const ids of levels.quota) {
      const r = await level(ids, 'quota', () => performance.now() + 120_000, 1_000_000);
      const n = await enrichedCount(db);
      enriched.push(n);
      results.record({
        bench: 'enrich',
        metric: `quota-limited, ${installations(ids)} of ${QUOTA}/h: entities enriched`,
        value: n,
        unit: 'entities',
        detail: {
          allowancePerInstallation: Math.floor((QUOTA * 2) / 3),
          seconds: r.seconds,
          ...r.detail,
        },
      });
    }
    results.record({
      bench: 'enrich',
      metric: 'two installations / one: entities enriched within the quota',
      value: enriched[1]! / enriched[0]!,
      unit: '×',
      target: { op: '>=', value: 1.95 },
    });
  } finally {
    await fake.close();
  }
}
