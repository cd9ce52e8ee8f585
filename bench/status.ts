import { sql } from 'kysely';
import { startWebServer } from '../src/web/server.ts';
import { seedManySources } from '../test/support/many-sources.ts';
import type { BenchDatabase } from './lib/database.ts';
import { benchConfig, benchDeps } from './lib/github.ts';
import type { ResultLog } from './lib/results.ts';
import { type Timing, timeRuns } from './lib/stats.ts';

/**
 * GET /status (JSON) and GET / (HTML) against sources × days of run history: p99 and size at each point of the grid, so the figures say whether the
 * report grows with the source count (it should not: summaries, 30 highlighted sources and
 * one page of 50) or with the history (it should not: the last 24 hours come from the hourly
 * rollups, ADR 0150). Each source has BENCH_STATUS_RUNS_PER_DAY runs a day (default 24: an
 * hourly poll; 10,000 sources × 30 days is then 7.2 million runs).
 *
 * BENCH_STATUS_SOURCES (default 100,10000) × BENCH_STATUS_DAYS (default 1,30).
 */

const list = (raw: string | undefined, fallback: number[]) =>
  raw ? raw.split(',').map((s) => Number(s.trim())) : fallback;
const SOURCES = list(process.env.BENCH_STATUS_SOURCES, [100, 10_000]);
const DAYS = list(process.env.BENCH_STATUS_DAYS, [1, 30]);
const RUNS_PER_DAY = Number(process.env.BENCH_STATUS_RUNS_PER_DAY ?? 24);
const REQUESTS = Number(process.env.BENCH_STATUS_REQUESTS ?? 50);
const P99_TARGET_MS = 250;
const JSON_BYTES_TARGET = 200_000;
const HTML_BYTES_TARGET = 300_000;

interface Measured {
  timing: Timing;
  bytes: number;
}

async function measure(url: string): Promise<Measured> {
  let bytes = 0;
  const timing = await timeRuns(
    REQUESTS,
    async () => {
      const res = await fetch(url);
      if (res.status !== 200) throw new Error(`${url} answered ${res.status}`);
      bytes = (await res.arrayBuffer()).byteLength;
    },
    3,
  );
  return { timing, bytes };
}

/**
 * `n` sources with `days` of runs. The runs are written with the rollup triggers off, then
 * the rollups rebuilt in one statement (the migration's own function): the same rows the
 * triggers would have left, minutes faster than 7 million row triggers.
 */
async function seed(database: BenchDatabase, n: number, days: number): Promise<number> {
  const db = database.db;
  await sql`TRUNCATE event_sources, ingestion_runs RESTART IDENTITY CASCADE`.execute(db);
  const now = new Date();
  await seedManySources(db, n, now, 0);
  const runs = days * RUNS_PER_DAY;
  const spacing = 86_400 / RUNS_PER_DAY;
  await db.transaction().execute(async (trx) => {
    await sql`ALTER TABLE ingestion_runs DISABLE TRIGGER ingestion_run_rollups_insert`.execute(trx);
    await sql`
      INSERT INTO ingestion_runs (source_id, status, started_at, finished_at, pages_fetched,
        events_seen, events_created, gap_detected, error)
      SELECT s.id,
        CASE WHEN s.consecutive_failures > 0 AND r = 0 THEN 'failed'
             WHEN r % 5 = 0 THEN 'completed' ELSE 'not_modified' END,
        s.last_polled_at - r * make_interval(secs => ${spacing}),
        s.last_polled_at - r * make_interval(secs => ${spacing}) + interval '200 milliseconds',
        1, r % 3, CASE WHEN r % 5 = 0 THEN r % 3 ELSE 0 END, r % 97 = 11,
        CASE WHEN s.consecutive_failures > 0 AND r = 0 THEN s.last_error END
      FROM event_sources s, generate_series(0, ${runs - 1}::int) r
      WHERE s.last_polled_at IS NOT NULL`.execute(trx);
    await sql`ALTER TABLE ingestion_runs ENABLE TRIGGER ingestion_run_rollups_insert`.execute(trx);
  });
  await sql`SELECT ingestion_run_rollups_rebuild()`.execute(db);
  await sql`ANALYZE event_sources, ingestion_runs, ingestion_run_hours, ingestion_run_totals`.execute(
    db,
  );
  const r = await sql<{ n: string }>`SELECT count(*) AS n FROM ingestion_runs`.execute(db);
  return Number(r.rows[0]!.n);
}

export async function benchStatus(database: BenchDatabase, results: ResultLog): Promise<string[]> {
  const config = benchConfig(database, 'http://127.0.0.1:9', { GITHUB_MODE: 'fixture' });
  const deps = benchDeps(database, config, 'bench:status');
  const server = await startWebServer(deps, { host: '127.0.0.1', port: 0 });
  const grid: string[] = [];
  try {
    const at = new Map<string, { json: Measured; html: Measured; runs: number }>();
    for (const days of DAYS) {
      for (const n of SOURCES) {
        const runs = await seed(database, n, days);
        const json = await measure(`${server.url}/status`);
        const html = await measure(`${server.url}/`);
        at.set(`${n}x${days}`, { json, html, runs });
        grid.push(
          `  ${String(n).padStart(6)} sources × ${String(days).padStart(2)} days (${runs.toLocaleString('en-US')} runs): GET /status p99 ${json.timing.p99.toFixed(1)} ms, GET / p99 ${html.timing.p99.toFixed(1)} ms`,
        );
        for (const [path, m, bytesTarget] of [
          ['GET /status', json, JSON_BYTES_TARGET],
          ['GET /', html, HTML_BYTES_TARGET],
        ] as const) {
          const detail = { sources: n, days, runs, requests: REQUESTS, max: m.timing.max };
          results.record({
            bench: 'status',
            metric: `${path} p99 at ${n.toLocaleString('en-US')} sources × ${days} days`,
            value: m.timing.p99,
            unit: 'ms',
            target: { op: '<=', value: P99_TARGET_MS },
            detail: { ...detail, p50: m.timing.p50 },
          });
          results.record({
            bench: 'status',
            metric: `${path} size at ${n.toLocaleString('en-US')} sources × ${days} days`,
            value: m.bytes,
            unit: 'bytes',
            target: { op: '<=', value: bytesTarget },
            detail,
          });
        }
      }
    }
    // The two ratios: more sources at the longest history, more history at the most sources.
    const most = Math.max(...SOURCES);
    const fewest = Math.min(...SOURCES);
    const longest = Math.max(...DAYS);
    const shortest = Math.min(...DAYS);
    for (const path of ['GET /status', 'GET /'] as const) {
      const pick = (k: string) => (path === 'GET /status' ? at.get(k)!.json : at.get(k)!.html);
      if (most !== fewest) {
        const big = pick(`${most}x${longest}`);
        const small = pick(`${fewest}x${longest}`);
        results.record({
          bench: 'status',
          metric: `${path} p50, ${most.toLocaleString('en-US')} vs ${fewest} sources (${longest} days)`,
          value: big.timing.p50 / small.timing.p50,
          unit: 'x',
          detail: { smallP50: small.timing.p50, bigP50: big.timing.p50 },
        });
      }
      if (longest !== shortest) {
        const long = pick(`${most}x${longest}`);
        const short = pick(`${most}x${shortest}`);
        results.record({
          bench: 'status',
          metric: `${path} p50, ${longest} vs ${shortest} days (${most.toLocaleString('en-US')} sources)`,
          value: long.timing.p50 / short.timing.p50,
          unit: 'x',
          detail: { shortP50: short.timing.p50, longP50: long.timing.p50 },
        });
      }
    }
    console.log(`status: p99 by sources × days of runs\n${grid.join('\n')}`);
  } finally {
    await server.close();
    await deps.github.close();
  }
  return [];
}
