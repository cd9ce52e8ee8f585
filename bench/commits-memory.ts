import { type ChildProcess, spawn } from 'node:child_process';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { sql } from 'kysely';
import { ANSWER_MAX_BYTES, byteSize } from '../src/github/answer-limits.ts';
import { ROOT } from '../test/recovery/world.ts';
import { chain, insertPushes, insertRepository } from '../test/support/commit-world.ts';
import { type FakeGitHub, startFakeGitHub } from '../test/support/fake-github.ts';
import type { BenchDatabase } from './lib/database.ts';
import { BENCH_TOKEN } from './lib/github.ts';
import type { ResultLog } from './lib/results.ts';
import { secondsSince } from './lib/stats.ts';

/**
 * `node bench/run.ts commits-memory`: the worker's memory while it fetches commits by
 * GraphQL with answers at the GraphQL answer cap (ADR 0182). The real bin/worker, as a child
 * with the soak's sampler preloaded (bin/*'s memory defaults), fetches BENCH_MEMORY_PUSHES
 * pending one-commit pushes (default 200) from a fake GitHub twice: once with answers as
 * GitHub sends them (a few KB), once with every answer padded by a hostile proxy to just under
 * the cap (an `extensions` string nothing reads). The figure of record is the peak RSS of the
 * process over its whole life (getrusage's high-water mark, not only what a sample saw),
 * against the documented 150 MB; the pushes must all be stored either way.
 */

const PUSHES = Number(process.env.BENCH_MEMORY_PUSHES ?? 200);
const RSS_LIMIT_MB = 150;
const MB = 1024 * 1024;
const DEADLINE_MS = 300_000;

interface Sample {
  event: string;
  rss: number;
  maxRss: number;
  heapUsed: number;
  external: number;
}

function waitForExit(child: ChildProcess): Promise<number | null> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(child.exitCode);
  return new Promise((resolve) => child.once('exit', (code) => resolve(code)));
}

/** Fresh pending pushes, one commit each, on PUSHES repositories (ids from `first`). */
async function seed(database: BenchDatabase, fake: FakeGitHub, first: number): Promise<void> {
  await sql`TRUNCATE push_events, stored_commits, commit_fetch_turns, repositories, actors`.execute(
    database.db,
  );
  const pushes = [];
  for (let i = 0; i < PUSHES; i++) {
    const id = first + i;
    const name = `memory-bench/r${id}`;
    await insertRepository(database.db, id, name);
    const line = chain(fake, name, 2, null, { branch: 'main' });
    pushes.push({ repositoryId: id, before: line[0]!, head: line[1]! });
  }
  await insertPushes(database.db, pushes);
}

async function pending(database: BenchDatabase): Promise<number> {
  const r = await sql<{ n: number }>`
    SELECT count(*)::int AS n FROM push_events WHERE commits_state = 'pending'`.execute(
    database.db,
  );
  return r.rows[0]!.n;
}

/** bin/worker until no push is pending; its samples and how the pushes ended. */
async function workerRun(database: BenchDatabase, env: Record<string, string | undefined>) {
  const sampler = path.join(ROOT, 'bench/lib/sampler.ts');
  const worker = spawn(process.execPath, ['--import', sampler, 'bin/worker'], {
    cwd: ROOT,
    env: { ...env, SAMPLE_INTERVAL_MS: '100' },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  const samples: Sample[] = [];
  const tail: string[] = [];
  let buffered = '';
  worker.stderr!.on('data', (c: Buffer) => {
    buffered += c.toString();
    const lines = buffered.split('\n');
    buffered = lines.pop() ?? '';
    for (const line of lines) {
      if (line.includes('process.sample')) {
        try {
          samples.push(JSON.parse(line) as Sample);
        } catch {}
      } else if (line.trim()) {
        tail.push(line.slice(0, 300));
        if (tail.length > 20) tail.shift();
      }
    }
  });
  const t0 = performance.now();
  try {
    while ((await pending(database)) > 0) {
      if (worker.exitCode !== null) throw new Error(`bin/worker exited: ${tail.join('\n')}`);
      if (performance.now() - t0 > DEADLINE_MS) {
        throw new Error(`pushes still pending after ${DEADLINE_MS / 1000} s: ${tail.join('\n')}`);
      }
      await new Promise((r) => setTimeout(r, 250));
    }
    const seconds = secondsSince(t0);
    // A few more samples after the last push: what the worker holds once the answers are gone.
    const settled = samples.length + 10;
    while (samples.length < settled && worker.exitCode === null) {
      await new Promise((r) => setTimeout(r, 100));
    }
    return { seconds, samples };
  } finally {
    worker.kill('SIGTERM');
    await waitForExit(worker);
  }
}

async function states(database: BenchDatabase): Promise<Record<string, number>> {
  const r = await sql<{ s: string; n: number }>`
    SELECT commits_state AS s, count(*)::int AS n FROM push_events GROUP BY 1`.execute(database.db);
  return Object.fromEntries(r.rows.map((x) => [x.s, x.n]));
}

export async function benchCommitsMemory(
  database: BenchDatabase,
  results: ResultLog,
): Promise<string[]> {
  const failures: string[] = [];
  const fake = await startFakeGitHub({ tokenLimit: 10_000_000, graphqlLimit: 10_000_000 });
  const env = {
    ...process.env,
    DATABASE_URL: database.url,
    GITHUB_API_URL: fake.url,
    GITHUB_TOKEN: BENCH_TOKEN,
    TICK_SECONDS: '1',
    LOG_LEVEL: 'warn',
    // One repository source with an empty feed: the worker polls next to nothing.
    SOURCES: 'repo:memory-bench/idle',
  };
  try {
    const setup = spawn(process.execPath, ['bin/setup'], {
      cwd: ROOT,
      env: { ...env, LOG_LEVEL: 'warn' },
      stdio: 'inherit',
    });
    if ((await waitForExit(setup)) !== 0) throw new Error('bin/setup failed');
    const cap = ANSWER_MAX_BYTES.graphql;
    const padded = cap - 256 * 1024;
    const runs = [
      { name: "answers of GitHub's size", pad: 0, first: 7_100_000 },
      {
        name: `answers padded to ${byteSize(padded)} (cap ${byteSize(cap)})`,
        pad: padded,
        first: 7_200_000,
      },
    ];
    for (const run of runs) {
      fake.reset();
      fake.graphql.configure({ padAnswerTo: run.pad });
      await seed(database, fake, run.first);
      const { seconds, samples } = await workerRun(database, env);
      const peakMb = Math.max(...samples.map((s) => s.maxRss)) / MB;
      const sampledMb = Math.max(...samples.map((s) => s.rss)) / MB;
      const heapMb = Math.max(...samples.map((s) => s.heapUsed)) / MB;
      const externalMb = Math.max(...samples.map((s) => s.external)) / MB;
      const ended = await states(database);
      const queries = fake.graphql.queries.length;
      const compares = fake.requests.filter((r) => r.path.includes('/compare/')).length;
      results.record({
        bench: 'commits-memory',
        metric: `peak RSS of bin/worker, ${PUSHES} pushes by GraphQL, ${run.name}`,
        value: Math.round(peakMb * 10) / 10,
        unit: 'MB',
        target: { op: '<', value: RSS_LIMIT_MB },
        detail: { sampledMb, heapMb, externalMb, seconds, ended, queries, compares },
      });
      results.note(
        `  ${run.name}: peak RSS ${peakMb.toFixed(1)} MB (largest sample ${sampledMb.toFixed(1)} MB, heap ${heapMb.toFixed(1)} MB, external ${externalMb.toFixed(1)} MB); ${seconds.toFixed(1)} s, ${queries} GraphQL queries, ${compares} compares, pushes ${JSON.stringify(ended)}`,
      );
      if ((ended.complete ?? 0) !== PUSHES) {
        failures.push(
          `commits-memory (${run.name}): ${JSON.stringify(ended)}, not ${PUSHES} complete`,
        );
      }
    }
  } finally {
    await fake.close();
  }
  return failures;
}
