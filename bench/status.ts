import { sql } from 'kysely';
import { startWebServer } from '../src/web/server.ts';
import { seedManySources } from '../test/support/many-sources.ts';
import type { BenchDatabase } from './lib/database.ts';
import { benchConfig, benchDeps } from './lib/github.ts';
import type { ResultLog } from './lib/results.ts';
import { type Timing, timeRuns } from './lib/stats.ts';

/**
 * Issue 19 item 4: GET /status (JSON) and GET / (HTML) at 10,000 sources — latency and
 * size — against the same at 100 sources, so the ratio says whether the report grows with
 * the source count (it should not: summaries, 20 highlighted sources and one page of 50).
 * Each source has RUNS_PER_SOURCE runs in the last 24 hours (the page reads their counts).
 */

const SOURCES = 10_000;
const SMALL = 100;
const RUNS_PER_SOURCE = Number(process.env.BENCH_STATUS_RUNS ?? 24);
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

async function seed(database: BenchDatabase, n: number): Promise<void> {
  await sql`TRUNCATE event_sources, ingestion_runs RESTART IDENTITY CASCADE`.execute(database.db);
  await seedManySources(database.db, n, new Date(), RUNS_PER_SOURCE);
}

export async function benchStatus(database: BenchDatabase, results: ResultLog): Promise<string[]> {
  const config = benchConfig(database, 'http://127.0.0.1:9', { GITHUB_MODE: 'fixture' });
  const deps = benchDeps(database, config, 'bench:status');
  const server = await startWebServer(deps, { host: '127.0.0.1', port: 0 });
  try {
    const at: Record<number, { json: Measured; html: Measured }> = {};
    for (const n of [SMALL, SOURCES]) {
      await seed(database, n);
      at[n] = {
        json: await measure(`${server.url}/status`),
        html: await measure(`${server.url}/`),
      };
    }
    const big = at[SOURCES]!;
    const small = at[SMALL]!;
    const detail = { sources: SOURCES, runsPerSource: RUNS_PER_SOURCE, requests: REQUESTS };
    for (const [kind, m, s, bytesTarget] of [
      ['JSON', big.json, small.json, JSON_BYTES_TARGET],
      ['HTML', big.html, small.html, HTML_BYTES_TARGET],
    ] as const) {
      const path = kind === 'JSON' ? 'GET /status' : 'GET /';
      results.record({
        bench: 'status',
        metric: `${path} p50 at 10,000 sources`,
        value: m.timing.p50,
        unit: 'ms',
        detail,
      });
      results.record({
        bench: 'status',
        metric: `${path} p99 at 10,000 sources`,
        value: m.timing.p99,
        unit: 'ms',
        target: { op: '<=', value: P99_TARGET_MS },
        detail: { ...detail, max: m.timing.max },
      });
      results.record({
        bench: 'status',
        metric: `${path} p50, 10,000 vs 100 sources`,
        value: m.timing.p50 / s.timing.p50,
        unit: 'x',
        detail: { smallP50: s.timing.p50, bigP50: m.timing.p50 },
      });
      results.record({
        bench: 'status',
        metric: `${path} size at 10,000 sources`,
        value: m.bytes,
        unit: 'bytes',
        target: { op: '<=', value: bytesTarget },
        detail: { at100: s.bytes },
      });
    }
  } finally {
    await server.close();
    await deps.github.close();
  }
  return [];
}
