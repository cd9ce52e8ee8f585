import { performance } from 'node:perf_hooks';
import { sql } from 'kysely';
import { createGitHubClient } from '../src/budget/client.ts';
import { loadConfig } from '../src/platform/config/config.ts';
import { createDb, createPool } from '../src/platform/db/pool.ts';
import { createLogger } from '../src/platform/log.ts';
import { pollDueSources } from '../src/poll/poll-due.ts';
import type { RunSummary } from '../src/poll/run-summary.ts';
import { startFakeGitHub } from '../test/support/fake-github.ts';
import { pushEvent } from '../test/support/github-factories.ts';
import type { BenchDatabase } from './lib/database.ts';
import type { ResultLog } from './lib/results.ts';
import { secondsSince } from './lib/stats.ts';

/**
 * Benchmark "watch 10,000 repositories": BENCH_WATCH_SOURCES repo sources (10,000),
 * BENCH_WATCH_ROUND of them due (2,000; see ROUND), on a pool of 16 tokens against a zero-latency fake that enforces GitHub's secondary limit
 * (a credential's 901st request to one endpoint within 60 s is a 403). One worker polls a
 * conditional round (every source due, every answer a 304) as bin/worker's poll job does.
 *
 * Figures: the round's rate as a share of what the secondary limit allows (16 credentials ×
 * 900 a minute to /repos/{owner}/{repo}/events), 403s, committed transactions per 304 (from
 * pg_stat_database.xact_commit, every session of the database: pools, gates, all), the
 * process's CPU milliseconds per poll (worker and the in-process fake together), how stale
 * the oldest source got against what the limits allow, and — on BENCH_WATCH_PAGE_SOURCES
 * sources whose feed holds 99 new events — transactions per poll that stores one page.
 */

const SOURCES = Number(process.env.BENCH_WATCH_SOURCES ?? 10_000);
/**
 * How many of them are due in the measured round (the rest are due in an hour): the figures
 * are per poll, and a full round of 10,000 on this 2-core machine under load takes several
 * minutes. The oldest source's staleness over all SOURCES is extrapolated from the round's rate.
 */
const ROUND = Math.min(SOURCES, Number(process.env.BENCH_WATCH_ROUND ?? 2_000));
const PAGE_SOURCES = Number(process.env.BENCH_WATCH_PAGE_SOURCES ?? 300);
const CREDENTIALS = 16;
const RATE_PER_MINUTE = 900;
const POLL_INTERVAL_SECONDS = 60;
/**
 * Committed transactions a round makes once, whatever its size: the due-source pre-filter and
 * one more (rounds of 20, 200 and 2,000 polls committed 43, 402 and 4,002: 2 a poll plus 2-3).
 */
const ROUND_READS = 2;

async function committed(database: BenchDatabase): Promise<number> {
  const r = await sql<{ n: string }>`
    SELECT xact_commit AS n FROM pg_stat_database WHERE datname = current_database()`.execute(
    database.db,
  );
  return Number(r.rows[0]!.n);
}

/** Statistics of other sessions reach pg_stat_database when they end (or idle 10 s): end them. */
async function settledCommits(database: BenchDatabase): Promise<number> {
  await sql`SELECT pg_stat_force_next_flush()`.execute(database.db);
  await new Promise((r) => setTimeout(r, 1_500));
  return committed(database);
}

/** What settledCommits, the staleness read and settledCommits again commit with nothing between. */
async function measuringCommits(database: BenchDatabase): Promise<number> {
  const before = await settledCommits(database);
  await sql`SELECT max(last_polled_at) AS at FROM event_sources`.execute(database.db);
  return (await settledCommits(database)) - before;
}

interface Round {
  summaries: RunSummary[];
  seconds: number;
  cpuMs: number;
  transactions: number;
  /** The latest moment a source of the round was polled, minus when they all fell due. */
  stalestSeconds: number;
}

/** One worker (its own pool and client, as a process) polls every due source once. */
async function pollRound(
  database: BenchDatabase,
  apiUrl: string,
  tokens: string[],
): Promise<Round> {
  const config = loadConfig({
    DATABASE_URL: database.url,
    GITHUB_API_URL: apiUrl,
    GITHUB_TOKENS: tokens.join(','),
    GITHUB_ENDPOINT_RATE_PER_MINUTE: String(RATE_PER_MINUTE),
    LOG_LEVEL: 'silent',
  });
  const logger = createLogger('silent');
  const before = await settledCommits(database);
  const pool = createPool(database.url, { max: 7, applicationName: 'gpi-bench-watch' });
  const db = createDb(pool);
  const github = createGitHubClient({ config, db, databaseUrl: database.url, logger });
  const dueAt = Date.now();
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  let summaries: RunSummary[];
  try {
    summaries = await pollDueSources({ config, db, pool, github, logger, workerId: 'bench:watch' });
  } finally {
    await github.close();
    await db.destroy();
  }
  const seconds = secondsSince(t0);
  const cpu = process.cpuUsage(cpu0);
  const last = await sql<{ at: Date | null }>`
    SELECT max(last_polled_at) AS at FROM event_sources`.execute(database.db);
  const transactions = (await settledCommits(database)) - before;
  return {
    summaries,
    seconds,
    cpuMs: (cpu.user + cpu.system) / 1000,
    // Less what the measuring itself commits (the same reads around no round at all).
    transactions: transactions - (await measuringCommits(database)),
    stalestSeconds: ((last.rows[0]!.at?.getTime() ?? dueAt) - dueAt) / 1000,
  };
}

export async function benchWatch(database: BenchDatabase, results: ResultLog): Promise<string[]> {
  const fake = await startFakeGitHub({
    tokenLimit: 10_000_000,
    endpointRatePerMinute: RATE_PER_MINUTE,
    pollInterval: POLL_INTERVAL_SECONDS,
  });
  const tokens = Array.from({ length: CREDENTIALS }, (_, i) => `bench-watch-${i}-not-a-secret`);
  try {
    // Every feed is empty, so every source holds the same ETag: ask the fake for it once.
    const probe = await fetch(`${fake.url}/repos/watch/probe/events?per_page=100&page=1`, {
      headers: { authorization: `token ${tokens[0]}`, 'x-github-api-version': '2022-11-28' },
    });
    await probe.arrayBuffer();
    const etag = probe.headers.get('etag');
    fake.reset();
    await sql`
      INSERT INTO event_sources (kind, target, mode, commits_enabled, etag, poll_interval_seconds,
        next_poll_at, last_polled_at)
      SELECT 'repo', 'watch-org/repo-' || g, 'live', true, ${etag}, ${POLL_INTERVAL_SECONDS},
        CASE WHEN g <= ${ROUND}::int THEN now() - interval '1 minute' ELSE now() + interval '1 hour' END,
        now() - interval '1 minute'
      FROM generate_series(1, ${SOURCES}::int) g`.execute(database.db);

    const round = await pollRound(database, fake.url, tokens);
    const polls = round.summaries.length;
    const notModified = round.summaries.filter((s) => s.outcome === 'not_modified').length;
    const allowedPerSecond = (CREDENTIALS * RATE_PER_MINUTE) / 60;
    const ratePerSecond = polls / round.seconds;
    const limitSeconds = SOURCES / allowedPerSecond;
    // The oldest source of a full round waits for every other: SOURCES at the round's rate.
    const stalestSeconds = (round.stalestSeconds * SOURCES) / polls;
    const detail = {
      sources: SOURCES,
      round: ROUND,
      credentials: CREDENTIALS,
      polls,
      notModified,
      seconds: round.seconds,
      requests: fake.requests.length,
      allowedPerSecond,
    };
    if (notModified !== ROUND) {
      const other = round.summaries.find((s) => s.outcome !== 'not_modified');
      throw new Error(
        `watch bench: expected ${ROUND} 304s, got ${notModified} (${other?.outcome}: ${other?.error?.message ?? other?.reason ?? ''})`,
      );
    }
    results.record({
      bench: 'watch',
      metric: 'conditional round: polls/s',
      value: ratePerSecond,
      unit: 'polls/s',
      detail,
    });
    results.record({
      bench: 'watch',
      metric: 'conditional round: share of the secondary limit',
      value: ratePerSecond / allowedPerSecond,
      unit: '×',
      target: { op: '>=', value: 0.8 },
      detail,
    });
    results.record({
      bench: 'watch',
      metric: 'secondary-limit 403s',
      value: fake.secondaryLimitHits,
      unit: '403s',
      target: { op: '==', value: 0 },
    });
    // What a round commits once (ROUND_READS) is the round's, not a 304's.
    results.record({
      bench: 'watch',
      metric: 'committed transactions per 304',
      value: (round.transactions - ROUND_READS) / polls,
      unit: 'xacts',
      target: { op: '<=', value: 2 },
      detail: { transactions: round.transactions, roundReads: ROUND_READS, polls },
    });
    results.record({
      bench: 'watch',
      metric: 'CPU per poll (worker and fake, one process)',
      value: round.cpuMs / polls,
      unit: 'ms',
      detail: { cpuMs: round.cpuMs },
    });
    results.record({
      bench: 'watch',
      metric: 'oldest source stale / what the limits allow',
      value: stalestSeconds / Math.max(limitSeconds, POLL_INTERVAL_SECONDS),
      unit: '×',
      target: { op: '<=', value: 2 },
      detail: {
        stalestSeconds,
        roundStalestSeconds: round.stalestSeconds,
        secondaryLimitRoundSeconds: limitSeconds,
        pollIntervalSeconds: POLL_INTERVAL_SECONDS,
      },
    });

    // Polls that store a page: 99 new events each (one page, the feed ends there).
    await sql`TRUNCATE event_sources, ingestion_runs, github_requests, github_endpoint_pace CASCADE`.execute(
      database.db,
    );
    fake.reset();
    for (let s = 1; s <= PAGE_SOURCES; s++) {
      const repo = { id: 8_000_000 + s, name: `watch-org/page-${s}` };
      fake.addEvents(
        `repo:${repo.name}`,
        Array.from({ length: 99 }, () => pushEvent({ repo })),
      );
    }
    await sql`
      INSERT INTO event_sources (kind, target, mode, commits_enabled, next_poll_at)
      SELECT 'repo', 'watch-org/page-' || g, 'live', true, now() - interval '1 minute'
      FROM generate_series(1, ${PAGE_SOURCES}::int) g`.execute(database.db);
    const paged = await pollRound(database, fake.url, tokens);
    const pages = paged.summaries.reduce((n, s) => n + s.pagesFetched, 0);
    results.record({
      bench: 'watch',
      metric: 'committed transactions per poll of one page',
      value: paged.transactions / pages,
      unit: 'xacts',
      detail: { transactions: paged.transactions, pages, seconds: paged.seconds },
    });
    return [];
  } finally {
    await fake.close();
  }
}
