import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, mkdtempSync, rmSync, statfsSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { sql } from 'kysely';
import { hourlyCoverage } from '../src/status/coverage.ts';
import { generateHourFile } from './lib/archive-gen.ts';
import { backfillFile, binEnv, ROOT, runBin } from './lib/bin.ts';
import type { BenchDatabase } from './lib/database.ts';
import { RESULTS_DIR, type ResultLog } from './lib/results.ts';
import { secondsSince } from './lib/stats.ts';
import { storeSizes, totalBytes } from './lib/store-size.ts';
import { lineChart } from './lib/svg.ts';

/**
 * Benchmark: does the store stay as fast at ten million pushes as it was at one hour?
 * Generated GH Archive hours (bench/lib/archive-gen.ts: `--hour-pushes` pushes each, about
 * `--commits` commits inline, actors and repositories drawn from pools of millions) are
 * imported one after another, consecutive hours from 2024-01-01-0, into ONE store by the
 * real `bin/backfill FILE`, until it holds `--pushes` (default 10,000,000). Each hour's
 * import is timed from the process's start to its exit (the file is written beforehand).
 *
 * At checkpoints — the store holding only the first hour (the fixed hour the export reads:
 * the smallest store that has it), then every tenth of the way — are timed: GET /status of
 * a real `bin/web` over HTTP, the coverage rows `bin/status --coverage` reads
 * (hourlyCoverage: the last 48 hours as of now, empty in a store of 2024's history, and
 * the 48 hours up to the fixed hour's end), and the real `bin/export HOUR` of the fixed
 * hour. Each is the median of several runs and is reported as a ratio to the first
 * checkpoint. Targets: the last hours' import rate ≥ 0.9× the first's (medians of three
 * hours each end, one hour's rate alone moves with the shared machine's load); status,
 * coverage and export ≤ 1.2× the first checkpoint's.
 *
 * Runs on the bench's database (DATABASE_URL: a throwaway one of your own); before
 * storing more than the disk holds (measured after the first hour: bytes a push ×
 * the pushes to come, ×1.3 for WAL and bloat) it stops. Writes bench/results/growth.json
 * and the chart (`--svg`, default docs/performance-growth.svg).
 */

const HOUR_MS = 3_600_000;
const FIRST_HOUR = Date.parse('2024-01-01T00:00:00Z');
const STATUS_RUNS = 5;
const COVERAGE_RUNS = 5;
const EXPORT_RUNS = 3;

interface Options {
  pushes: number;
  hourPushes: number;
  commits: number;
  svg: string;
}

function options(args: string[]): Options {
  const { values } = parseArgs({
    args,
    options: {
      pushes: { type: 'string' },
      'hour-pushes': { type: 'string' },
      commits: { type: 'string' },
      svg: { type: 'string' },
    },
    strict: true,
  });
  const int = (raw: string | undefined, fallback: number, name: string) => {
    const n = raw === undefined ? fallback : Number(raw);
    if (!Number.isFinite(n) || n < 0) throw new Error(`growth: --${name} must be a number`);
    return n;
  };
  return {
    pushes: int(values.pushes, 10_000_000, 'pushes'),
    hourPushes: int(values['hour-pushes'], 100_000, 'hour-pushes'),
    commits: int(values.commits, 2, 'commits'),
    svg: path.resolve(ROOT, values.svg ?? 'docs/performance-growth.svg'),
  };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const fmt = (n: number) => Math.round(n).toLocaleString('en-US');

/** The real bin/web on the store, until `stop()`; its URL from its `web.listening` line. */
async function startWeb(
  url: string,
  dataDir: string,
): Promise<{ url: string; stop(): Promise<void> }> {
  const child: ChildProcess = spawn(process.execPath, [path.join(ROOT, 'bin/web')], {
    cwd: ROOT,
    env: binEnv(url, {
      HTTP_HOST: '127.0.0.1',
      HTTP_PORT: '0',
      DATA_DIR: dataDir,
      LOG_FORMAT: 'json',
      LOG_LEVEL: 'info',
    }),
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  const listening = await new Promise<string>((resolve, reject) => {
    let pending = '';
    child.once('exit', (code) => reject(new Error(`bin/web exited ${code}: ${pending}`)));
    child.stderr!.on('data', (c: Buffer) => {
      pending += c.toString();
      const m = /"event":"web\.listening","url":"([^"]+)"/.exec(pending);
      if (m) resolve(m[1]!);
      if (pending.length > 100_000) pending = pending.slice(-10_000);
    });
  });
  return {
    url: listening,
    async stop() {
      if (child.exitCode !== null) return;
      child.kill('SIGTERM');
      await once(child, 'exit');
    },
  };
}

async function timedMedian(runs: number, fn: () => Promise<unknown>): Promise<number> {
  await fn();
  const ms: number[] = [];
  for (let i = 0; i < runs; i++) {
    const t0 = performance.now();
    await fn();
    ms.push(performance.now() - t0);
  }
  return median(ms);
}

interface Checkpoint {
  pushes: number;
  hour: number;
  statusMs: number;
  coverageNowMs: number;
  coverageHourMs: number;
  exportSeconds: number;
  storeBytes: number;
}

interface HourRow {
  hour: number;
  name: string;
  pushes: number;
  created: number;
  seconds: number;
  rate: number;
}

/** Bytes free where Postgres keeps its data, or null when this process cannot see it. */
async function freeBytes(database: BenchDatabase): Promise<number | null> {
  try {
    const r = await sql<{ d: string }>`SELECT current_setting('data_directory') AS d`.execute(
      database.db,
    );
    const s = statfsSync(r.rows[0]!.d);
    return s.bavail * s.bsize;
  } catch {
    return null;
  }
}

export async function benchGrowth(
  database: BenchDatabase,
  results: ResultLog,
  args: string[],
): Promise<string[]> {
  const o = options(args);
  const dir = mkdtempSync(path.join(tmpdir(), 'gpi-bench-growth-'));
  const out = path.join(dir, 'export');
  mkdirSync(out);
  await runBin('setup', [], database.url, { SOURCES: 'public' });
  const web = await startWeb(database.url, path.join(dir, 'data'));
  const hourName = (i: number) => {
    const d = new Date(FIRST_HOUR + i * HOUR_MS);
    return `${d.toISOString().slice(0, 10)}-${d.getUTCHours()}`;
  };
  const fixed = hourName(0);
  const hours: HourRow[] = [];
  const checkpoints: Checkpoint[] = [];
  let stored = 0;

  const checkpoint = async (hour: number) => {
    const statusMs = await timedMedian(STATUS_RUNS, async () => {
      const res = await fetch(`${web.url}/status`);
      if (res.status !== 200) throw new Error(`GET /status answered ${res.status}`);
      await res.arrayBuffer();
    });
    const coverageNowMs = await timedMedian(COVERAGE_RUNS, () =>
      hourlyCoverage(database.db, new Date()),
    );
    const coverageHourMs = await timedMedian(COVERAGE_RUNS, () =>
      hourlyCoverage(database.db, new Date(FIRST_HOUR)),
    );
    const exports: number[] = [];
    for (let i = 0; i < EXPORT_RUNS; i++) {
      exports.push((await runBin('export', [fixed, '--out', out, '--json'], database.url)).seconds);
    }
    const c: Checkpoint = {
      pushes: stored,
      hour,
      statusMs,
      coverageNowMs,
      coverageHourMs,
      exportSeconds: median(exports),
      storeBytes: totalBytes(await storeSizes(database.url)),
    };
    checkpoints.push(c);
    const b = checkpoints[0]!;
    results.note(
      `  checkpoint at ${fmt(stored)} pushes: GET /status ${c.statusMs.toFixed(1)} ms (${(c.statusMs / b.statusMs).toFixed(2)}×), ` +
        `coverage now ${c.coverageNowMs.toFixed(1)} ms (${(c.coverageNowMs / b.coverageNowMs).toFixed(2)}×), ` +
        `coverage of ${fixed} ${c.coverageHourMs.toFixed(1)} ms (${(c.coverageHourMs / b.coverageHourMs).toFixed(2)}×), ` +
        `bin/export ${fixed} ${c.exportSeconds.toFixed(2)} s (${(c.exportSeconds / b.exportSeconds).toFixed(2)}×); ` +
        `store ${(c.storeBytes / 1e9).toFixed(2)} GB, ${fmt(c.storeBytes / stored)} B/push`,
    );
  };

  const t0 = performance.now();
  try {
    results.note(
      `  growth: to ${fmt(o.pushes)} pushes in hours of ${fmt(o.hourPushes)} pushes (~${o.commits} commits each inline), one store, bin/backfill FILE per hour`,
    );
    // Tenths counted in integers: 0.1 + 0.1 + 0.1 is not 0.3, and a checkpoint was missed.
    let nextTenth = 1;
    for (let i = 0; stored < o.pushes; i++) {
      const name = hourName(i);
      const file = path.join(dir, `${name}.json.gz`);
      await generateHourFile(file, {
        events: o.hourPushes * 2,
        hourStart: new Date(FIRST_HOUR + i * HOUR_MS),
        firstEventId: 40_000_000_000 + i * o.hourPushes * 2,
        firstPushId: 20_000_000_000 + i * o.hourPushes,
        actorPool: 2_000_000,
        repoPool: 3_000_000,
        seed: 1000 + i,
        level: 1,
        ...(o.commits > 0 ? { commits: o.commits } : {}),
      });
      const run = await backfillFile(file, database.url);
      rmSync(file);
      stored += run.created;
      const row: HourRow = {
        hour: i + 1,
        name,
        pushes: stored,
        created: run.created,
        seconds: run.seconds,
        rate: run.created / run.seconds,
      };
      hours.push(row);
      results.note(
        `  hour ${String(row.hour).padStart(3)} ${name.padEnd(13)} ${fmt(stored).padStart(11)} pushes in store  ${row.seconds.toFixed(1).padStart(6)} s  ${fmt(row.rate).padStart(6)} pushes/s  ${(row.rate / hours[0]!.rate).toFixed(2)}× the first hour`,
      );
      if (i === 0) {
        await checkpoint(1);
        // The disk, measured: what a push takes here, times the pushes still to come.
        const free = await freeBytes(database);
        const need = (checkpoints[0]!.storeBytes / stored) * (o.pushes - stored) * 1.3;
        results.note(
          `  disk: ${free === null ? 'free space not visible from here' : `${(free / 1e9).toFixed(1)} GB free`}, ~${(need / 1e9).toFixed(1)} GB still to be written`,
        );
        if (free !== null && free < need) {
          throw new Error(
            `growth: ${(need / 1e9).toFixed(1)} GB needed for ${fmt(o.pushes)} pushes, ${(free / 1e9).toFixed(1)} GB free`,
          );
        }
      } else if (stored * 10 >= nextTenth * o.pushes || stored >= o.pushes) {
        await checkpoint(i + 1);
        while (nextTenth * o.pushes <= stored * 10) nextTenth++;
      }
    }
  } finally {
    await web.stop();
    rmSync(dir, { recursive: true, force: true });
  }

  // Three hours each end, fewer when the run is short: the two ends never share an hour.
  const k = Math.max(1, Math.min(3, Math.floor(hours.length / 2)));
  const first = hours.slice(0, k);
  const last = hours.slice(-k);
  const rateRatio = median(last.map((h) => h.rate)) / median(first.map((h) => h.rate));
  const base = checkpoints[0]!;
  const end = checkpoints[checkpoints.length - 1]!;
  const detail = { hours: hours.length, pushes: stored, minutes: secondsSince(t0) / 60 };
  results.record({
    bench: 'growth',
    metric: `import rate, last ${k} hour(s) / first ${k} (${fmt(stored)} pushes)`,
    value: rateRatio,
    unit: '×',
    target: { op: '>=', value: 0.9 },
    detail: {
      ...detail,
      firstRates: first.map((h) => h.rate),
      lastRates: last.map((h) => h.rate),
      lastHourAlone: hours[hours.length - 1]!.rate / hours[0]!.rate,
    },
  });
  for (const [metric, a, b] of [
    ['GET /status (bin/web)', end.statusMs, base.statusMs],
    ['coverage, last 48 h as of now', end.coverageNowMs, base.coverageNowMs],
    [`coverage, the 48 h to ${fixed}`, end.coverageHourMs, base.coverageHourMs],
    [`bin/export ${fixed}`, end.exportSeconds, base.exportSeconds],
  ] as const) {
    results.record({
      bench: 'growth',
      metric: `${metric} at ${fmt(end.pushes)} / at ${fmt(base.pushes)} pushes`,
      value: a / b,
      unit: '×',
      target: { op: '<=', value: 1.2 },
      detail: { ...detail, at: a, empty: b },
    });
  }
  results.record({
    bench: 'growth',
    metric: `store bytes a push at ${fmt(end.pushes)} pushes`,
    value: end.storeBytes / end.pushes,
    unit: 'B/push',
    detail: { ...detail, bytes: end.storeBytes },
  });
  results.note(`  ${hours.length} hours in ${(secondsSince(t0) / 60).toFixed(1)} min`);

  writeFileSync(
    path.join(RESULTS_DIR, 'growth.json'),
    `${JSON.stringify({ options: o, hours, checkpoints }, null, 1)}\n`,
  );
  const M = 1e6;
  const ratio = (f: (c: Checkpoint) => number) =>
    checkpoints.map((c) => [c.pushes / M, f(c) / f(base)] as [number, number]);
  writeFileSync(
    o.svg,
    lineChart({
      title: `bin/backfill hour by hour into one store, to ${fmt(stored)} pushes`,
      xLabel: 'pushes in the store (millions)',
      left: {
        label: 'import rate of each hour',
        unit: 'pushes/s',
        color: '#1f77b4',
        points: hours.map((h) => [h.pushes / M, h.rate]),
      },
      right: {
        label: 'GET /status, × the one-hour store',
        unit: '×',
        color: '#d62728',
        points: ratio((c) => c.statusMs),
      },
      rightMore: [
        {
          label: 'coverage (48 h to the fixed hour), ×',
          unit: '×',
          color: '#2ca02c',
          points: ratio((c) => c.coverageHourMs),
        },
        {
          label: 'bin/export of the fixed hour, ×',
          unit: '×',
          color: '#9467bd',
          points: ratio((c) => c.exportSeconds),
        },
      ],
    }),
  );
  results.note(`  chart: ${path.relative(ROOT, o.svg)}; figures: bench/results/growth.json`);
  return [];
}
