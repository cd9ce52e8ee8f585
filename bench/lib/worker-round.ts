import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { sql } from 'kysely';
import type { FakeGitHub } from '../../test/support/fake-github.ts';
import type { BenchDatabase } from './database.ts';

/**
 * A conditional round through the real worker path: `bin/worker`, as the README starts it,
 * with nothing set but the database, the API URL and the tokens (the DEFAULT configuration:
 * its pool, its polls in flight and its pacing are what a user gets), against a fake GitHub in
 * this process. Every source is due and holds the fake's ETag, so every answer is a 304.
 */

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const run = promisify(execFile);

export interface WorkerRound {
  credentials: number;
  sources: number;
  polls: number;
  notModified: number;
  /** From the round's first run started to its last finished (the worker's start is not in it). */
  seconds: number;
  pollsPerSecond: number;
  /** The longest next poll of the round, counted from its own poll. */
  nextPollMaxSeconds: number;
  nextPollMinSeconds: number;
  secondaryLimitHits: number;
  /** Most runs open at once (from the runs' own start and finish): the width it polled at. */
  widest: number;
  /** The worker's app-pool sessions open when the round ended (application_name gpi-worker). */
  poolSessions: number;
  loadAverage: number[];
  env: Record<string, string>;
  /** Committed transactions in the bench's database over the round, per poll (pg-boss's too). */
  commitsPerPoll: number;
  /**
   * CPU milliseconds per poll: the worker process, the Postgres backends serving it (read from
   * /proc while they live; null when the server is not on this machine), and this process
   * (the fake). The machine's CPU ceiling is cores × 1000 / their sum, in polls a second.
   */
  cpuMsPerPoll: { worker: number; postgres: number | null; fake: number };
  cpuCeilingPollsPerSecond: number | null;
}

const TICKS_PER_SECOND = 100; // USER_HZ on Linux

/** utime + stime of a process in ms, or null when /proc does not have it. */
function cpuMsOf(pid: number): number | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / TICKS_PER_SECOND;
  } catch {
    return null;
  }
}

/**
 * CPU of the sessions the worker opened (while they live): those named gpi-* that began after `since` (the
 * server's clock before the spawn). The bench's own sessions, and an earlier bench's gate
 * sessions still open in this process, began before it and are not the worker's.
 */
async function backendsCpuMs(database: BenchDatabase, since: Date): Promise<number | null> {
  const r = await sql<{ pid: number }>`
    SELECT pid FROM pg_stat_activity
    WHERE datname = current_database() AND application_name LIKE 'gpi-%'
      AND backend_start >= ${since}`.execute(database.db);
  let total = 0;
  for (const { pid } of r.rows) {
    const ms = cpuMsOf(pid);
    if (ms === null) return null;
    total += ms;
  }
  return total;
}

async function serverNow(database: BenchDatabase): Promise<Date> {
  const r = await sql<{ t: Date }>`SELECT clock_timestamp() AS t`.execute(database.db);
  return r.rows[0]!.t;
}

async function commits(database: BenchDatabase): Promise<number> {
  await sql`SELECT pg_stat_force_next_flush()`.execute(database.db);
  const r = await sql<{ n: string }>`
    SELECT xact_commit AS n FROM pg_stat_database WHERE datname = current_database()`.execute(
    database.db,
  );
  return Number(r.rows[0]!.n);
}

/** Tokens the fake knows by name only (any Authorization header is a token there). */
export function benchTokens(n: number, tag = 'round'): string[] {
  return Array.from({ length: n }, (_, i) => `bench-${tag}-${i}-not-a-secret`);
}

function childEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  return {
    PATH: `${path.dirname(process.execPath)}:${process.env.PATH ?? ''}`,
    HOME: process.env.HOME ?? '/tmp',
    // e.g. `--cpu-prof --cpu-prof-dir=/tmp/prof`: where the worker's CPU goes.
    ...(process.env.BENCH_WORKER_NODE_OPTIONS
      ? { NODE_OPTIONS: process.env.BENCH_WORKER_NODE_OPTIONS }
      : {}),
    ...extra,
  };
}

/** bin/setup once on the bench's database: the pg-boss schema bin/worker needs. */
export async function setUpForWorkers(database: BenchDatabase): Promise<void> {
  await run(path.join(ROOT, 'bin', 'setup'), [], {
    cwd: ROOT,
    env: childEnv({ DATABASE_URL: database.url, SOURCES: 'public', LOG_LEVEL: 'warn' }),
  });
}

/** The fake's ETag of an empty feed (every feed of the round is empty: they all share it). */
async function emptyFeedEtag(fake: FakeGitHub, token: string): Promise<string> {
  const probe = await fetch(`${fake.url}/repos/round/probe/events?per_page=100&page=1`, {
    // The fake, like GitHub's contract in docs, refuses a request without the API version.
    headers: { authorization: `token ${token}`, 'x-github-api-version': '2022-11-28' },
  });
  await probe.arrayBuffer();
  const etag = probe.headers.get('etag');
  if (!etag) throw new Error(`the fake answered ${probe.status} without an ETag`);
  return etag;
}

async function seed(database: BenchDatabase, sources: number, etag: string, interval: number) {
  await sql`TRUNCATE event_sources, ingestion_runs, github_requests, github_request_minutes,
    github_rate_limits, github_endpoint_pace RESTART IDENTITY CASCADE`.execute(database.db);
  // As an import leaves them: poll_cost at its default (unknown is assumed busy), ETags known.
  await sql`
    INSERT INTO event_sources (kind, target, mode, commits_enabled, etag, poll_interval_seconds,
      next_poll_at, last_polled_at)
    SELECT 'repo', 'round-org/repo-' || g, 'live', false, ${etag}, ${interval},
      now() - interval '1 minute', now() - interval '1 minute'
    FROM generate_series(1, ${sources}::int) g`.execute(database.db);
}

async function finishedRuns(database: BenchDatabase): Promise<number> {
  const r = await sql<{ n: string }>`
    SELECT count(*) AS n FROM ingestion_runs WHERE finished_at IS NOT NULL`.execute(database.db);
  return Number(r.rows[0]!.n);
}

function stop(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    child.once('exit', () => resolve());
    child.kill('SIGTERM');
    setTimeout(() => child.kill('SIGKILL'), 30_000).unref();
  });
}

/**
 * One round: seed `sources`, start one bin/worker with `tokens` (and `env`), wait until every
 * source has one finished run, stop the worker, read the figures from the database.
 */
export async function workerRound(
  database: BenchDatabase,
  fake: FakeGitHub,
  opts: {
    tokens: string[];
    sources: number;
    pollInterval: number;
    env?: Record<string, string>;
    timeoutMs?: number;
  },
): Promise<WorkerRound> {
  fake.reset();
  const etag = await emptyFeedEtag(fake, opts.tokens[0]!);
  fake.reset();
  await seed(database, opts.sources, etag, opts.pollInterval);
  const env = {
    DATABASE_URL: database.url,
    GITHUB_API_URL: fake.url,
    GITHUB_TOKENS: opts.tokens.join(','),
    LOG_LEVEL: 'warn',
    LOG_FORMAT: 'json',
    // The worker polls at start; no tick's second round (at 60 s) while a slow one runs.
    TICK_SECONDS: '3600',
    ...opts.env,
  };
  const loadBefore = os.loadavg();
  const commitsBefore = await commits(database);
  const fakeCpu0 = process.cpuUsage();
  const spawnedAfter = await serverNow(database);
  const child = spawn(path.join(ROOT, 'bin', 'worker'), [], {
    cwd: ROOT,
    env: childEnv(env),
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let buffered = '';
  const errors: string[] = [];
  child.stderr!.on('data', (chunk: Buffer) => {
    buffered += chunk.toString();
    const lines = buffered.split('\n');
    buffered = lines.pop() ?? '';
    for (const line of lines) {
      if (!line.includes('"level":50')) continue;
      try {
        errors.push(String((JSON.parse(line) as Record<string, unknown>).msg));
      } catch {
        // not a JSON line
      }
    }
  });
  const deadline = Date.now() + (opts.timeoutMs ?? 15 * 60_000);
  let poolSessions = 0;
  let workerCpu: number | null = null;
  let postgresCpu: number | null = null;
  let fakeCpu = 0;
  try {
    while ((await finishedRuns(database)) < opts.sources) {
      if (child.exitCode !== null) throw new Error(`bin/worker exited: ${errors.join('; ')}`);
      if (Date.now() > deadline) throw new Error(`round of ${opts.sources} did not finish`);
      await new Promise((r) => setTimeout(r, 250));
    }
    const s = await sql<{ n: string }>`
      SELECT count(*) AS n FROM pg_stat_activity
      WHERE datname = current_database() AND application_name = 'gpi-worker'`.execute(database.db);
    poolSessions = Number(s.rows[0]!.n);
    workerCpu = child.pid ? cpuMsOf(child.pid) : null;
    postgresCpu = await backendsCpuMs(database, spawnedAfter);
    const c = process.cpuUsage(fakeCpu0);
    fakeCpu = (c.user + c.system) / 1000;
  } finally {
    await stop(child);
  }
  // Sessions end with the worker; their statistics reach pg_stat_database as they do.
  await new Promise((r) => setTimeout(r, 1_000));
  const committed = (await commits(database)) - commitsBefore;
  const r = await sql<{
    polls: string;
    not_modified: string;
    first: Date;
    last: Date;
    next_max: number;
    next_min: number;
    widest: number;
  }>`
    SELECT count(*) AS polls,
           count(*) FILTER (WHERE r.status = 'not_modified') AS not_modified,
           min(r.started_at) AS first, max(r.finished_at) AS last,
           (SELECT max(extract(epoch FROM next_poll_at - last_polled_at)) FROM event_sources)::float8 AS next_max,
           (SELECT min(extract(epoch FROM next_poll_at - last_polled_at)) FROM event_sources)::float8 AS next_min,
           (SELECT max(open) FROM (
              SELECT sum(d) OVER (ORDER BY at, d) AS open FROM (
                SELECT started_at AS at, 1 AS d FROM ingestion_runs
                UNION ALL SELECT finished_at, -1 FROM ingestion_runs) e) o)::int AS widest
    FROM ingestion_runs r`.execute(database.db);
  const row = r.rows[0]!;
  const seconds = (row.last.getTime() - row.first.getTime()) / 1000;
  const polls = Number(row.polls);
  const loadAfter = os.loadavg();
  const cpu = {
    worker: (workerCpu ?? 0) / polls,
    postgres: postgresCpu === null ? null : postgresCpu / polls,
    fake: fakeCpu / polls,
  };
  return {
    credentials: opts.tokens.length,
    sources: opts.sources,
    polls,
    notModified: Number(row.not_modified),
    seconds,
    pollsPerSecond: polls / seconds,
    nextPollMaxSeconds: row.next_max,
    nextPollMinSeconds: row.next_min,
    secondaryLimitHits: fake.secondaryLimitHits,
    widest: row.widest,
    poolSessions,
    loadAverage: loadBefore.map((l, i) => Math.max(l, loadAfter[i]!)),
    env: opts.env ?? {},
    commitsPerPoll: committed / polls,
    cpuMsPerPoll: cpu,
    cpuCeilingPollsPerSecond:
      cpu.postgres === null || workerCpu === null
        ? null
        : (os.availableParallelism() * 1000) / (cpu.worker + cpu.postgres + cpu.fake),
  };
}
