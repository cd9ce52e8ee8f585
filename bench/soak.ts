import { type ChildProcess, spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { sql } from 'kysely';
import { startFakeGitHub } from '../test/support/fake-github.ts';
import { pushEvent, repoProfile, userProfile } from '../test/support/github-factories.ts';
import { openBenchDatabase } from './lib/database.ts';
import { BENCH_TOKEN } from './lib/github.ts';
import { RESULTS_DIR, ResultLog } from './lib/results.ts';
import { lineChart } from './lib/svg.ts';

/**
 * `npm run bench:soak` (not in CI, not in `npm run bench`): the real worker (bin/worker as
 * a child, TICK_SECONDS=1) against a busy fake GitHub for SOAK_SECONDS (default 600).
 * A feeder adds EVENTS_PER_SECOND pushes a second to the public feed (filed under the repo
 * feeds too), with new actors and repositories among them, so polling, storing and
 * enrichment all run the whole time. The worker is started with bench/lib/sampler.ts
 * preloaded, which reports RSS and event-loop delay every second. Written to
 * bench/results/soak.csv, drawn in bench/results/soak.svg, summarised in soak.json.
 * Targets: RSS under 150 MB, and flat (linear fit over the second half < 1 MB/min).
 */

const ROOT = path.resolve(import.meta.dirname, '..');
const SOAK_SECONDS = Number(process.env.SOAK_SECONDS ?? 600);
const EVENTS_PER_SECOND = Number(process.env.SOAK_EVENTS_PER_SECOND ?? 30);
const REPO_SOURCES = 20;
const RSS_LIMIT_MB = 150;
const SLOPE_LIMIT_MB_PER_MIN = 1;
const MB = 1024 * 1024;

interface Sample {
  t: number;
  rssMb: number;
  heapTotalMb: number;
  heapMb: number;
  externalMb: number;
  lagP50: number;
  lagP99: number;
  lagMax: number;
}

function waitForExit(child: ChildProcess): Promise<number | null> {
  if (child.exitCode !== null) return Promise.resolve(child.exitCode);
  return new Promise((resolve) => child.once('exit', (code) => resolve(code)));
}

/** Least-squares slope of y over x. */
function slope(points: [number, number][]): number {
  const n = points.length;
  if (n < 2) return 0;
  const mx = points.reduce((a, p) => a + p[0], 0) / n;
  const my = points.reduce((a, p) => a + p[1], 0) / n;
  let num = 0;
  let den = 0;
  for (const [x, y] of points) {
    num += (x - mx) * (y - my);
    den += (x - mx) ** 2;
  }
  return den === 0 ? 0 : num / den;
}

async function main(): Promise<number> {
  const results = new ResultLog(path.join(RESULTS_DIR, 'soak.json'));
  const database = await openBenchDatabase();
  // A token's bucket far above what the run needs, and a 1 s X-Poll-Interval: every
  // source is due every tick.
  const fake = await startFakeGitHub({ tokenLimit: 10_000_000, pollInterval: 1 });
  const repos = Array.from({ length: REPO_SOURCES }, (_, i) => ({
    id: 9_100_000 + i,
    name: `soak-org/repo-${i + 1}`,
  }));
  for (const r of repos) fake.setRepo(repoProfile({ id: r.id, full_name: r.name }));
  const env = {
    ...process.env,
    DATABASE_URL: database.url,
    GITHUB_API_URL: fake.url,
    GITHUB_TOKEN: BENCH_TOKEN,
    TICK_SECONDS: '1',
    LOG_LEVEL: 'info',
    SOURCES: ['public', ...repos.map((r) => `repo:${r.name}`)].join(','),
  };

  let worker: ChildProcess | undefined;
  let feeder: NodeJS.Timeout | undefined;
  const samples: Sample[] = [];
  const events = new Map<string, number>();
  let errors = 0;
  const stderrTail: string[] = [];
  let fed = 0;
  try {
    const setup = spawn(process.execPath, ['bin/setup'], {
      cwd: ROOT,
      env: { ...env, LOG_LEVEL: 'warn' },
      stdio: 'inherit',
    });
    if ((await waitForExit(setup)) !== 0) throw new Error('bin/setup failed');

    // The feeder: a busy public timeline. ~30% of pushes come from a new actor and ~20% go
    // to a repository never seen before, so enrichment always has work.
    let nextActor = 5_000_000;
    let nextRepo = 9_200_000;
    const actors: number[] = [];
    feeder = setInterval(() => {
      const batch = [];
      for (let i = 0; i < EVENTS_PER_SECOND; i++) {
        let actorId: number;
        if (actors.length === 0 || Math.random() < 0.3) {
          actorId = nextActor++;
          actors.push(actorId);
          fake.setUser(userProfile({ id: actorId, login: `soak-${actorId}` }));
        } else actorId = actors[Math.floor(Math.random() * actors.length)]!;
        let repo = repos[Math.floor(Math.random() * repos.length)]!;
        if (Math.random() < 0.2) {
          repo = { id: nextRepo, name: `soak-other/repo-${nextRepo++}` };
          fake.setRepo(repoProfile({ id: repo.id, full_name: repo.name }));
        }
        batch.push(pushEvent({ repo, actor: { id: actorId, login: `soak-${actorId}` } }));
      }
      fake.addEvents('public', batch);
      fed += batch.length;
    }, 1000);

    const sampler = path.join(ROOT, 'bench/lib/sampler.ts');
    // SOAK_NODE_OPTIONS: V8 flags for the worker only (e.g. --max-semi-space-size=8), to
    // compare memory settings without touching bin/worker.
    const workerEnv = process.env.SOAK_NODE_OPTIONS
      ? { ...env, NODE_OPTIONS: process.env.SOAK_NODE_OPTIONS }
      : env;
    worker = spawn(process.execPath, ['--import', sampler, 'bin/worker'], {
      cwd: ROOT,
      env: workerEnv,
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let startedAt: number | undefined;
    createInterface({ input: worker.stderr! }).on('line', (line) => {
      if (line.startsWith('{"event":"process.sample"')) {
        const s = JSON.parse(line) as Record<string, number>;
        startedAt ??= s.at!;
        samples.push({
          t: (s.at! - startedAt) / 1000,
          rssMb: s.rss! / MB,
          heapTotalMb: s.heapTotal! / MB,
          heapMb: s.heapUsed! / MB,
          externalMb: s.external! / MB,
          lagP50: s.lagP50Ms!,
          lagP99: s.lagP99Ms!,
          lagMax: s.lagMaxMs!,
        });
      } else {
        // The worker's pino log (stderr, like every command's logs).
        const m = /"event":"([^"]+)"/.exec(line);
        if (m) events.set(m[1]!, (events.get(m[1]!) ?? 0) + 1);
        if (/"level":"(error|fatal)"/.test(line)) errors++;
        stderrTail.push(line);
        if (stderrTail.length > 20) stderrTail.shift();
      }
    });

    console.log(`soak: worker pid ${worker.pid} for ${SOAK_SECONDS} s against ${fake.url}`);
    const exited = waitForExit(worker);
    const deadline = Date.now() + SOAK_SECONDS * 1000;
    let lastReport = 0;
    while (Date.now() < deadline) {
      const early = await Promise.race([
        exited,
        new Promise((r) => setTimeout(() => r('tick'), 1000)),
      ]);
      if (early !== 'tick') {
        throw new Error(`the worker exited early (code ${early}):\n${stderrTail.join('\n')}`);
      }
      const last = samples[samples.length - 1];
      if (last && last.t - lastReport >= 30) {
        lastReport = last.t;
        console.log(
          `  t=${last.t.toFixed(0)} s  rss ${last.rssMb.toFixed(1)} MB  heap ${last.heapMb.toFixed(1)} MB  ` +
            `lag p99 ${last.lagP99.toFixed(1)} ms  runs ${events.get('ingestion.run_completed') ?? 0}  ` +
            `enriched ${events.get('enrichment.completed') ?? 0}`,
        );
      }
    }
    clearInterval(feeder);
    feeder = undefined;
    worker.kill('SIGTERM');
    const timeout = setTimeout(() => worker?.kill('SIGKILL'), 40_000);
    const code = await exited;
    clearTimeout(timeout);

    const stored = await sql<{ n: string }>`SELECT count(*) AS n FROM push_events`.execute(
      database.db,
    );
    const pending = await sql<{ n: string }>`
      SELECT (SELECT count(*) FROM actors WHERE enrichment_state = 'pending')
           + (SELECT count(*) FROM repositories WHERE enrichment_state = 'pending') AS n`.execute(
      database.db,
    );

    writeFileSync(
      path.join(RESULTS_DIR, 'soak.csv'),
      `seconds,rss_mb,heap_total_mb,heap_used_mb,external_mb,lag_p50_ms,lag_p99_ms,lag_max_ms\n${samples
        .map((s) =>
          [s.t, s.rssMb, s.heapTotalMb, s.heapMb, s.externalMb, s.lagP50, s.lagP99, s.lagMax]
            .map((v) => v.toFixed(2))
            .join(','),
        )
        .join('\n')}\n`,
    );
    writeFileSync(
      path.join(RESULTS_DIR, 'soak.svg'),
      lineChart({
        title: `bin/worker soak, TICK_SECONDS=1, ${EVENTS_PER_SECOND} pushes/s, ${Math.round(SOAK_SECONDS / 60)} min`,
        left: {
          label: 'RSS',
          unit: 'MB',
          color: '#1f5fbf',
          points: samples.map((s) => [s.t, s.rssMb]),
        },
        right: {
          label: 'event-loop delay p99',
          unit: 'ms',
          color: '#d98c00',
          points: samples.map((s) => [s.t, s.lagP99]),
        },
        leftLimit: { value: RSS_LIMIT_MB, label: `target: under ${RSS_LIMIT_MB} MB` },
      }),
    );

    const secondHalf = samples.filter((s) => s.t >= samples[samples.length - 1]!.t / 2);
    const rssSlope = slope(secondHalf.map((s) => [s.t / 60, s.rssMb]));
    const lagP99s = samples.map((s) => s.lagP99).sort((a, b) => a - b);
    const detail = {
      seconds: SOAK_SECONDS,
      workerNodeOptions: process.env.SOAK_NODE_OPTIONS ?? null,
      samples: samples.length,
      workerExit: code,
      pushesFed: fed,
      pushesStored: Number(stored.rows[0]!.n),
      entitiesPendingAtEnd: Number(pending.rows[0]!.n),
      runsCompleted: events.get('ingestion.run_completed') ?? 0,
      runsFailed: events.get('ingestion.run_failed') ?? 0,
      enrichmentsCompleted: events.get('enrichment.completed') ?? 0,
      errorLines: errors,
    };
    results.record({
      bench: 'soak',
      metric: 'RSS max',
      value: Math.max(...samples.map((s) => s.rssMb)),
      unit: 'MB',
      target: { op: '<', value: RSS_LIMIT_MB },
      detail,
    });
    results.record({
      bench: 'soak',
      metric: 'RSS slope over the second half',
      value: rssSlope,
      unit: 'MB/min',
      target: { op: '<', value: SLOPE_LIMIT_MB_PER_MIN },
      detail: { samples: secondHalf.length },
    });
    results.record({
      bench: 'soak',
      metric: 'event-loop delay p99 (median second)',
      value: lagP99s[Math.floor(lagP99s.length / 2)] ?? Number.NaN,
      unit: 'ms',
    });
    results.record({
      bench: 'soak',
      metric: 'event-loop delay max',
      value: Math.max(...samples.map((s) => s.lagMax)),
      unit: 'ms',
    });
    results.record({
      bench: 'soak',
      metric: 'pushes stored / fed',
      value: detail.pushesStored / Math.max(1, fed),
      unit: '×',
      detail,
    });
    results.record({
      bench: 'soak',
      metric: 'error log lines',
      value: errors,
      unit: 'lines',
      detail,
    });
    console.log(`soak: ${JSON.stringify(detail)}`);
    console.log(`soak: ${path.join(RESULTS_DIR, 'soak.csv')}, soak.svg, soak.json`);
    return 0;
  } finally {
    if (feeder) clearInterval(feeder);
    if (worker && worker.exitCode === null && worker.signalCode === null) {
      worker.kill('SIGKILL');
      await waitForExit(worker);
    }
    await fake.close();
    await database.close();
  }
}

process.exitCode = await main();
