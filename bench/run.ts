import os from 'node:os';
import { performance } from 'node:perf_hooks';
import { benchHotQueries } from './hot-queries.ts';
import { type BenchDatabase, openBenchDatabase, resetBusinessTables } from './lib/database.ts';
import { ResultLog } from './lib/results.ts';
import { secondsSince } from './lib/stats.ts';

/**
 * `npm run bench` [names…]: the benchmarks, in one process, against one
 * database (see bench/lib/database.ts). Figures are printed and written to
 * bench/results/latest.json; targets are reported as PASS/MISS, never asserted. The one
 * hard failure: a hot query planned as a sequential scan on a big table (exit 1).
 *
 * Names: hot, ingest, enrich, backfill, backfill-commits, status, watch, worker, commits, commits-graphql, commits-memory, commits-worker, export, storage, growth (default: all but
 * growth, which runs for an hour or more). The soak is separate: `npm run bench:soak`.
 * Flags after the one name go to that benchmark (`npm run bench -- growth --pushes 1000000`).
 */

type Bench = (database: BenchDatabase, results: ResultLog, args: string[]) => Promise<string[]>;

const BENCHES: Record<string, () => Promise<Bench>> = {
  ingest: async () => (await import('./ingest.ts')).benchIngest,
  enrich: async () => (await import('./enrich.ts')).benchEnrich,
  hot: async () => benchHotQueries,
  backfill: async () => (await import('./backfill.ts')).benchBackfill,
  'backfill-commits': async () => (await import('./backfill-commits.ts')).benchBackfillCommits,
  status: async () => (await import('./status.ts')).benchStatus,
  watch: async () => (await import('./watch.ts')).benchWatch,
  worker: async () => (await import('./watch-worker.ts')).benchWatchWorker,
  commits: async () => (await import('./commits.ts')).benchCommits,
  'commits-graphql': async () => (await import('./commits-graphql.ts')).benchCommitsGraphQL,
  'commits-memory': async () => (await import('./commits-memory.ts')).benchCommitsMemory,
  'commits-worker': async () => (await import('./commits-worker.ts')).benchCommitsWorker,
  export: async () => (await import('./export.ts')).benchExport,
  storage: async () => (await import('./storage.ts')).benchStorage,
  growth: async () => (await import('./growth.ts')).benchGrowth,
};

/** Left out of a run that names no benchmark: it stores ten million pushes. */
const NOT_BY_DEFAULT = new Set(['growth']);

async function main(): Promise<number> {
  const argv = process.argv.slice(2);
  const flagAt = argv.findIndex((a) => a.startsWith('--'));
  const names = flagAt < 0 ? argv : argv.slice(0, flagAt);
  const flags = flagAt < 0 ? [] : argv.slice(flagAt);
  if (flags.length && names.length !== 1) {
    console.error('bench: flags go to one benchmark: name it alone (bench growth --pushes N)');
    return 2;
  }
  for (const n of names) {
    if (!(n in BENCHES)) {
      console.error(
        `bench: unknown benchmark "${n}" (expected ${Object.keys(BENCHES).join(', ')})`,
      );
      return 2;
    }
  }
  const selected = names.length
    ? names
    : Object.keys(BENCHES).filter((n) => !NOT_BY_DEFAULT.has(n));
  const t0 = performance.now();
  const results = new ResultLog();
  const database = await openBenchDatabase();
  const failures: string[] = [];
  try {
    results.record({
      bench: 'machine',
      metric: 'environment',
      value: os.availableParallelism(),
      unit: 'cpus',
      detail: {
        memoryGiB: Math.round(os.totalmem() / 2 ** 30),
        cpuModel: os.cpus()[0]?.model,
        node: process.version,
        postgres: database.serverVersion,
        database: database.origin,
        loadAverage: os.loadavg(),
      },
    });
    console.log(
      `# ${os.availableParallelism()} CPUs, ${Math.round(os.totalmem() / 2 ** 30)} GiB, Node ${process.version}, ` +
        `Postgres ${database.serverVersion} (${database.origin})`,
    );
    for (const name of selected) {
      // Other work on the machine moves every figure: say how busy it was.
      console.log(
        `\n## ${name} (load average ${os
          .loadavg()
          .map((l) => l.toFixed(2))
          .join(' ')})`,
      );
      await resetBusinessTables(database.db);
      const bench = await BENCHES[name]!();
      failures.push(...(await bench(database, results, flags)));
    }
  } finally {
    await database.close();
  }
  const misses = results.results.filter((r) => r.status === 'MISS');
  console.log(
    `\n${results.results.filter((r) => r.status === 'PASS').length} PASS, ${misses.length} MISS` +
      ` in ${secondsSince(t0).toFixed(0)} s; results in ${results.file}`,
  );
  for (const m of misses) console.log(`  MISS: ${m.bench} ${m.metric}`);
  if (failures.length) {
    console.error(
      '\nBENCHMARK FAILED: a hot query is planned as a sequential scan on a big table:',
    );
    for (const f of failures) console.error(`  - ${f}`);
    return 1;
  }
  return 0;
}

process.exitCode = await main();
