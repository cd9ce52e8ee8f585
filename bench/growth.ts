import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, mkdtempSync, rmSync, statfsSync, writeFileSync } from 'node:fs';
import os, { tmpdir } from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { sql } from 'kysely';
import type pg from 'pg';
import { hourlyCoverage } from '../src/status/coverage.ts';
import { monthsBetween, upkeepAfterBulkWrite } from '../src/store/push-upkeep.ts';
import { generateHourFile } from './lib/archive-gen.ts';
import { backfillFile, binEnv, ROOT, runBin } from './lib/bin.ts';
import { type BenchDatabase, resetBusinessTables } from './lib/database.ts';
import { type CopySource, copyHour, takeCopySource } from './lib/growth-copy.ts';
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
 * `--fill copies`: only the first three and the last three hours are imported by
 * `bin/backfill` (timed as above; the import-rate target compares these); every hour in
 * between is a copy, made in SQL, of one of the first three as bin/backfill stored it
 * (bench/lib/growth-copy.ts: shifted to its own hour, new event ids and shas, the same
 * actors and repositories, through the normal INSERTs in the writers' row order, then the
 * upkeep bin/backfill does after a file: src/store/push-upkeep.ts), because
 * a hundred imports of 100,000 pushes are more than two hours of wall time here. After the
 * copies the fill is checked: the lists' entries (the push_commits view), the pushes and
 * the commits counted against the source, and `bin/export` of the last copied hour writes
 * as many pushes and commits as its source hour.
 *
 * Runs on the bench's database (DATABASE_URL: a throwaway one of your own); before
 * storing more than the disk holds (measured after the first hour: bytes a push ×
 * the pushes to come, ×1.3 for WAL and bloat) it stops. Empties the store at the end
 * unless `--keep` (a scratch database is then not dropped either). Writes
 * bench/results/growth.json and the chart (`--svg`, default docs/performance-growth.svg).
 */

const HOUR_MS = 3_600_000;
const FIRST_HOUR = Date.parse('2024-01-01T00:00:00Z');
const STATUS_RUNS = 5;
const COVERAGE_RUNS = 5;
const EXPORT_RUNS = 3;
/** `--fill copies`: hours imported by bin/backfill at each end of the run. */
const IMPORTED_EACH_END = 3;

interface Options {
  pushes: number;
  hourPushes: number;
  commits: number;
  svg: string;
  fill: 'backfill' | 'copies';
  keep: boolean;
}

function options(args: string[]): Options {
  const { values } = parseArgs({
    args,
    options: {
      pushes: { type: 'string' },
      'hour-pushes': { type: 'string' },
      commits: { type: 'string' },
      svg: { type: 'string' },
      fill: { type: 'string' },
      keep: { type: 'boolean' },
    },
    strict: true,
  });
  const int = (raw: string | undefined, fallback: number, name: string) => {
    const n = raw === undefined ? fallback : Number(raw);
    if (!Number.isFinite(n) || n < 0) throw new Error(`growth: --${name} must be a number`);
    return n;
  };
  const fill = values.fill ?? 'backfill';
  if (fill !== 'backfill' && fill !== 'copies') {
    throw new Error('growth: --fill must be backfill (every hour) or copies');
  }
  return {
    fill,
    keep: values.keep ?? false,
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
  /** The 1-minute load average after the checkpoint's timings. */
  load: number;
}

interface HourRow {
  hour: number;
  name: string;
  /** Imported by bin/backfill, or (`--fill copies`) copied in SQL from hour `copyOf`. */
  how: 'bin/backfill' | 'copy';
  copyOf?: number;
  pushes: number;
  created: number;
  /** The import's process, start to exit; a copy's SQL statements. */
  seconds: number;
  rate: number;
  /** The machine's 1-minute load average when the hour ended (the machine is shared). */
  load: number;
}

/**
 * After the copies: the pushes, the lists' entries (the push_commits view) and the commits
 * are what the imported hours and the copies of their source add up to, and bin/export of
 * the last copied hour writes as many pushes and commits as of its source hour.
 */
async function checkFill(
  database: BenchDatabase,
  client: pg.ClientBase,
  source: CopySource,
  hours: HourRow[],
  stored: number,
  out: string,
): Promise<string> {
  const copiesOf = (t: Map<number, number>) =>
    hours.filter((h) => h.how === 'copy').reduce((n, h) => n + (t.get(h.copyOf! - 1) ?? 0), 0);
  const sourceTotal = (t: Map<number, number>) => [...t.values()].reduce((a, b) => a + b, 0);
  const count = async (relation: string) =>
    Number((await client.query<{ n: string }>(`SELECT count(*) AS n FROM ${relation}`)).rows[0]!.n);
  // Only the source hours were imported before the copies (hours after them come later).
  const want = {
    push_events: stored,
    push_commits: sourceTotal(source.listEntries) + copiesOf(source.listEntries),
    commits: source.commitsBefore + copiesOf(source.rows.stored_commits!),
  };
  const bad: string[] = [];
  const seen: string[] = [];
  for (const [relation, n] of Object.entries(want)) {
    const got = await count(relation);
    seen.push(`${relation} ${fmt(got)}`);
    if (got !== n) bad.push(`${relation}: ${got} rows, ${n} expected`);
  }
  const last = hours[hours.length - 1]!;
  const exported = async (hour: string) => {
    const run = await runBin('export', [hour, '--out', out, '--json'], database.url);
    const f = (JSON.parse(run.stdout) as { files: { pushes: number; commits: number }[] })
      .files[0]!;
    return { pushes: f.pushes, commits: f.commits };
  };
  const copy = await exported(last.name);
  const original = await exported(hours[last.copyOf! - 1]!.name);
  if (copy.pushes !== original.pushes || copy.commits !== original.commits) {
    bad.push(
      `bin/export ${last.name}: ${copy.pushes} pushes, ${copy.commits} commits; ` +
        `its source ${hours[last.copyOf! - 1]!.name}: ${original.pushes}, ${original.commits}`,
    );
  }
  if (bad.length) throw new Error(`growth: the copies do not add up:\n  ${bad.join('\n  ')}`);
  return (
    `${seen.join(', ')} rows, as the source and its copies add up to; bin/export ${last.name} (a copy) ` +
    `${fmt(copy.pushes)} pushes, ${fmt(copy.commits)} commits, as its source ${hours[last.copyOf! - 1]!.name}`
  );
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
      load: os.loadavg()[0]!,
    };
    checkpoints.push(c);
    const b = checkpoints[0]!;
    results.note(
      `  checkpoint at ${fmt(stored)} pushes: GET /status ${c.statusMs.toFixed(1)} ms (${(c.statusMs / b.statusMs).toFixed(2)}×), ` +
        `coverage now ${c.coverageNowMs.toFixed(1)} ms (${(c.coverageNowMs / b.coverageNowMs).toFixed(2)}×), ` +
        `coverage of ${fixed} ${c.coverageHourMs.toFixed(1)} ms (${(c.coverageHourMs / b.coverageHourMs).toFixed(2)}×), ` +
        `bin/export ${fixed} ${c.exportSeconds.toFixed(2)} s (${(c.exportSeconds / b.exportSeconds).toFixed(2)}×); ` +
        `store ${(c.storeBytes / 1e9).toFixed(2)} GB, ${fmt(c.storeBytes / stored)} B/push (load ${c.load.toFixed(2)})`,
    );
  };

  const t0 = performance.now();
  // --fill copies: which hours bin/backfill imports (the first and last three), the rest
  // copied in SQL from the first three as stored (bench/lib/growth-copy.ts).
  const plannedHours = Math.ceil(o.pushes / o.hourPushes);
  const copied = (i: number) =>
    o.fill === 'copies' && i >= IMPORTED_EACH_END && i < plannedHours - IMPORTED_EACH_END;
  const copies = Math.max(0, plannedHours - 2 * IMPORTED_EACH_END);
  let client: pg.PoolClient | undefined;
  let source: CopySource | undefined;
  let fillStarted = 0;
  const fill = { sourceSeconds: 0, copySeconds: 0, wallSeconds: 0, checkSeconds: 0 };
  try {
    results.note(
      `  growth: to ${fmt(o.pushes)} pushes in hours of ${fmt(o.hourPushes)} pushes (~${o.commits} commits each inline), one store, ` +
        (o.fill === 'copies' && copies > 0
          ? `hours 1–${IMPORTED_EACH_END} and ${plannedHours - IMPORTED_EACH_END + 1}–${plannedHours} imported by bin/backfill FILE; ` +
            `hours ${IMPORTED_EACH_END + 1}–${plannedHours - IMPORTED_EACH_END} (${copies}) COPIED IN SQL from hours 1–${IMPORTED_EACH_END} as stored ` +
            '(shifted to their hour, new event ids and shas, same actors and repositories), because importing every hour takes hours of wall time'
          : 'bin/backfill FILE per hour'),
    );
    // Tenths counted in integers: 0.1 + 0.1 + 0.1 is not 0.3, and a checkpoint was missed.
    let nextTenth = 1;
    for (let i = 0; stored < o.pushes; i++) {
      const name = hourName(i);
      let row: HourRow;
      if (copied(i)) {
        if (!source) throw new Error('growth: a copy before its source was taken');
        const from = i % IMPORTED_EACH_END;
        const tc = performance.now();
        const counts = await copyHour(client!, source, {
          source: from,
          target: i,
          eventsPerHour: o.hourPushes * 2,
          pushesPerHour: o.hourPushes,
          sourceName: `${hourName(from)}.json.gz`,
          targetName: `${name}.json.gz`,
        });
        // What bin/backfill does after a file, so a copied hour is summarized and analysed
        // like an imported one.
        const at = new Date(FIRST_HOUR + i * HOUR_MS);
        const upkeep = await upkeepAfterBulkWrite(client!, monthsBetween(at, at));
        if (upkeep.failed.length > 0) throw upkeep.failed[0]!.error;
        const seconds = secondsSince(tc);
        fill.copySeconds += seconds;
        const created = counts.push_events ?? 0;
        stored += created;
        row = {
          hour: i + 1,
          name,
          how: 'copy',
          copyOf: from + 1,
          pushes: stored,
          created,
          seconds,
          rate: created / seconds,
          load: os.loadavg()[0]!,
        };
      } else {
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
        row = {
          hour: i + 1,
          name,
          how: 'bin/backfill',
          pushes: stored,
          created: run.created,
          seconds: run.seconds,
          rate: run.created / run.seconds,
          load: os.loadavg()[0]!,
        };
      }
      hours.push(row);
      results.note(
        `  hour ${String(row.hour).padStart(3)} ${name.padEnd(13)} ${fmt(stored).padStart(11)} pushes in store  ${row.seconds.toFixed(1).padStart(6)} s  ${fmt(row.rate).padStart(6)} pushes/s  ` +
          (row.how === 'copy'
            ? `SQL copy of hour ${row.copyOf} (not an import)`
            : `bin/backfill, ${(row.rate / hours[0]!.rate).toFixed(2)}× the first hour`) +
          `  (load ${row.load.toFixed(2)})`,
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
      if (copied(i + 1) && !source) {
        // The source: what bin/backfill stored for the first hours, the store holding only them.
        const ts = performance.now();
        fillStarted = ts;
        client = await database.pool.connect();
        source = await takeCopySource(client, new Date(FIRST_HOUR), IMPORTED_EACH_END);
        fill.sourceSeconds = secondsSince(ts);
        results.note(
          `  copy source taken (hours 1–${IMPORTED_EACH_END} as stored) in ${fill.sourceSeconds.toFixed(1)} s`,
        );
      }
      if (source && copied(i) && !copied(i + 1)) {
        fill.wallSeconds = secondsSince(fillStarted);
        const tc = performance.now();
        const checked = await checkFill(database, client!, source, hours, stored, out);
        fill.checkSeconds = secondsSince(tc);
        results.note(`  fill checked: ${checked}`);
        results.note(
          `  fill: ${copies} hours copied in SQL, ${(fill.copySeconds / 60).toFixed(1)} min of copy statements ` +
            `(${(fill.copySeconds / copies).toFixed(1)} s an hour), ${(fill.wallSeconds / 60).toFixed(1)} min of wall time with the source and the checkpoints; ` +
            `checked in ${fill.checkSeconds.toFixed(0)} s (load ${os.loadavg()[0]!.toFixed(2)})`,
        );
      }
    }
  } finally {
    client?.release();
    await web.stop();
    rmSync(dir, { recursive: true, force: true });
  }

  // Three hours each end, fewer when the run is short: the two ends never share an hour.
  // Only hours bin/backfill imported are rates of an import (a copy's is SQL's).
  const imported = hours.filter((h) => h.how === 'bin/backfill');
  const k = Math.max(1, Math.min(3, Math.floor(imported.length / 2)));
  const first = imported.slice(0, k);
  const last = imported.slice(-k);
  const rateRatio = median(last.map((h) => h.rate)) / median(first.map((h) => h.rate));
  const base = checkpoints[0]!;
  const end = checkpoints[checkpoints.length - 1]!;
  const copiedHours = hours.filter((h) => h.how === 'copy');
  const detail = {
    hours: hours.length,
    copiedHours: copiedHours.length,
    pushes: stored,
    minutes: secondsSince(t0) / 60,
  };
  const filled = copiedHours.length
    ? `, ${copiedHours.length} of ${hours.length} hours copied in SQL`
    : '';
  results.record({
    bench: 'growth',
    metric: `import rate, last ${k} bin/backfill hour(s) / first ${k} (${fmt(stored)} pushes${filled})`,
    value: rateRatio,
    unit: '×',
    target: { op: '>=', value: 0.9 },
    detail: {
      ...detail,
      firstRates: first.map((h) => h.rate),
      lastRates: last.map((h) => h.rate),
      lastHourAlone: imported[imported.length - 1]!.rate / imported[0]!.rate,
      fill,
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
      metric: `${metric} at ${fmt(end.pushes)} / at ${fmt(base.pushes)} pushes${filled}`,
      value: a / b,
      unit: '×',
      target: { op: '<=', value: 1.2 },
      detail: { ...detail, at: a, empty: b },
    });
  }
  results.record({
    bench: 'growth',
    metric: `store bytes a push at ${fmt(end.pushes)} pushes${filled}`,
    value: end.storeBytes / end.pushes,
    unit: 'B/push',
    detail: { ...detail, bytes: end.storeBytes },
  });
  results.note(
    `  ${hours.length} hours in ${(secondsSince(t0) / 60).toFixed(1)} min` +
      (copiedHours.length
        ? ` (${imported.length} imported by bin/backfill: hours ${imported.map((h) => h.hour).join(', ')}; ` +
          `${copiedHours.length} copied in SQL in ${(fill.copySeconds / 60).toFixed(1)} min of statements)`
        : ''),
  );

  writeFileSync(
    path.join(RESULTS_DIR, 'growth.json'),
    `${JSON.stringify({ options: o, fill, hours, checkpoints }, null, 1)}\n`,
  );
  const M = 1e6;
  const ratio = (f: (c: Checkpoint) => number) =>
    checkpoints.map((c) => [c.pushes / M, f(c) / f(base)] as [number, number]);
  writeFileSync(
    o.svg,
    lineChart({
      title: copiedHours.length
        ? `one store to ${fmt(stored)} pushes: hours ${imported.map((h) => h.hour).join(', ')} by bin/backfill, ${copiedHours.length} hours copied in SQL`
        : `bin/backfill hour by hour into one store, to ${fmt(stored)} pushes`,
      xLabel: 'pushes in the store (millions)',
      left: {
        label: copiedHours.length
          ? 'import rate of each bin/backfill hour'
          : 'import rate of each hour',
        unit: 'pushes/s',
        color: '#1f77b4',
        points: imported.map((h) => [h.pushes / M, h.rate]),
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
  if (o.keep) {
    database.keep();
    results.note(
      `  --keep: the store is left as it is (${new URL(database.url).pathname.slice(1)})`,
    );
  } else {
    // Ten million pushes are tens of GB: given back, and the database can run a bench again.
    await resetBusinessTables(database.db);
  }
  return [];
}
