import os from 'node:os';
import { startFakeGitHub } from '../test/support/fake-github.ts';
import type { BenchDatabase } from './lib/database.ts';
import type { ResultLog } from './lib/results.ts';
import { benchTokens, setUpForWorkers, type WorkerRound, workerRound } from './lib/worker-round.ts';

/**
 * What a user gets. A conditional round (every source due, every
 * answer a 304) through `bin/worker` with the DEFAULT configuration, for 1, 8 and 16 tokens,
 * against a fake that answers in 5 ms (an in-process fake that answers at once hides the cost
 * of a poll's wait) and enforces GitHub's 900 requests a minute per endpoint and credential.
 *
 * Figures: polls/s against what that limit allows (credentials × 15/s), 403s, the width the
 * worker polled at, and the next poll after the round (X-Poll-Interval 60 s; goal ≤ 120 s).
 *
 * On a loaded machine the ratio to the limit falls with the machine, so the same run also
 * measures a fully serial worker (one poll at a time: DATABASE_POOL_MAX=7 leaves it the least
 * a worker needs) on 16 tokens, where the pacing never waits: its polls/s is what one poll in
 * flight costs on this machine right now, and `× serial` says how much of the width turned
 * into polls.
 */

const LATENCY_MS = 5;
const RATE_PER_MINUTE = 900;
const POLL_INTERVAL_SECONDS = 60;
const ROUND = Number(process.env.BENCH_WORKER_ROUND ?? 2_000);
/** The 1-token round and the serial one: at 15/s a round of 2,000 would take over 2 minutes. */
const SMALL_ROUND = Number(process.env.BENCH_WORKER_SMALL_ROUND ?? 300);
/**
 * GitHub answers in 100–300 ms, not 5: at that latency what bounds a worker is how many
 * requests it keeps in flight, not its CPU. One more round, 16 tokens against a fake that
 * answers in this many ms (0 skips it). Its limit is the same 240/s; 16 requests in flight
 * (one a gate) carry 16 × 1000 / latency of it.
 */
const GITHUB_LATENCY_MS = Number(process.env.BENCH_WORKER_GITHUB_LATENCY_MS ?? 150);
const TOKEN_COUNTS = (process.env.BENCH_WORKER_TOKENS ?? '1,8,16').split(',').map(Number);

export async function benchWatchWorker(
  database: BenchDatabase,
  results: ResultLog,
): Promise<string[]> {
  await setUpForWorkers(database);
  const fake = await startFakeGitHub({
    // GitHub's quota: the schedule plans the poll share from it (a 304 spends none of it).
    tokenLimit: 5_000,
    latencyMs: LATENCY_MS,
    endpointRatePerMinute: RATE_PER_MINUTE,
    pollInterval: POLL_INTERVAL_SECONDS,
  });
  const perCredential = RATE_PER_MINUTE / 60;
  const show = (r: WorkerRound) =>
    `load ${r.loadAverage.map((l) => l.toFixed(1)).join(' ')}, widest ${r.widest}, ` +
    `${r.poolSessions} pool sessions, ${r.polls} polls in ${r.seconds.toFixed(1)} s, ` +
    `${r.commitsPerPoll.toFixed(2)} commits a poll, CPU ms a poll: worker ` +
    `${r.cpuMsPerPoll.worker.toFixed(1)} + Postgres ${r.cpuMsPerPoll.postgres?.toFixed(1) ?? '?'} + fake ` +
    `${r.cpuMsPerPoll.fake.toFixed(1)} (ceiling ${r.cpuCeilingPollsPerSecond?.toFixed(0) ?? '?'} polls/s)`;
  try {
    const serial = await workerRound(database, fake, {
      tokens: benchTokens(16, 'serial'),
      sources: SMALL_ROUND,
      pollInterval: POLL_INTERVAL_SECONDS,
      env: { DATABASE_POOL_MAX: '7' },
    });
    results.record({
      bench: 'watch-worker',
      metric: 'serial baseline (one poll in flight, 16 tokens): polls/s',
      value: serial.pollsPerSecond,
      unit: 'polls/s',
      detail: { ...serial, note: show(serial) },
    });
    console.log(`    ${show(serial)}`);
    for (const n of TOKEN_COUNTS) {
      const r = await workerRound(database, fake, {
        tokens: benchTokens(n),
        sources: n === 1 ? SMALL_ROUND : ROUND,
        pollInterval: POLL_INTERVAL_SECONDS,
      });
      if (r.notModified !== r.sources || r.polls !== r.sources) {
        throw new Error(`watch-worker: ${n} tokens: ${r.notModified} 304s of ${r.sources} sources`);
      }
      const allowed = n * perCredential;
      const detail = { ...r, allowedPerSecond: allowed, note: show(r) };
      results.record({
        bench: 'watch-worker',
        metric: `${n} token(s), default config: polls/s`,
        value: r.pollsPerSecond,
        unit: 'polls/s',
        detail,
      });
      console.log(`    ${show(r)}`);
      if (r.cpuCeilingPollsPerSecond !== null) {
        // What this machine could carry were its CPUs the bench's alone: the ratio a quiet
        // machine's run can reach, if CPU is what bounds it.
        results.record({
          bench: 'watch-worker',
          metric: `${n} token(s): min(limit, CPU ceiling) / limit`,
          value: Math.min(allowed, r.cpuCeilingPollsPerSecond) / allowed,
          unit: '×',
          detail: {
            cpuCeilingPollsPerSecond: r.cpuCeilingPollsPerSecond,
            cpuMsPerPoll: r.cpuMsPerPoll,
          },
        });
      }
      results.record({
        bench: 'watch-worker',
        metric: `${n} token(s): share of the per-endpoint limit (${allowed}/s)`,
        value: r.pollsPerSecond / allowed,
        unit: '×',
        ...(n >= 8 ? { target: { op: '>=' as const, value: 0.8 } } : {}),
        detail: { note: show(r), loadAverage: os.loadavg() },
      });
      results.record({
        bench: 'watch-worker',
        metric: `${n} token(s): polls/s × the serial baseline`,
        value: r.pollsPerSecond / serial.pollsPerSecond,
        unit: '×',
        detail: {
          serialPollsPerSecond: serial.pollsPerSecond,
          // How many serial polls' worth of width the limit takes on this machine now.
          limitInSerialPolls: allowed / serial.pollsPerSecond,
        },
      });
      results.record({
        bench: 'watch-worker',
        metric: `${n} token(s): secondary-limit 403s`,
        value: r.secondaryLimitHits,
        unit: '403s',
        target: { op: '==', value: 0 },
      });
      results.record({
        bench: 'watch-worker',
        metric: `${n} token(s): next poll after the all-304 round, the latest`,
        value: r.nextPollMaxSeconds,
        unit: 's',
        ...(n === 8 ? { target: { op: '<=' as const, value: 120 } } : {}),
        detail: {
          earliest: r.nextPollMinSeconds,
          pollIntervalSeconds: POLL_INTERVAL_SECONDS,
          sources: r.sources,
        },
      });
    }
    await githubLatencyRound(database, results, show);
    return [];
  } finally {
    await fake.close();
  }
}

async function githubLatencyRound(
  database: BenchDatabase,
  results: ResultLog,
  show: (r: WorkerRound) => string,
): Promise<void> {
  if (GITHUB_LATENCY_MS <= 0) return;
  const slow = await startFakeGitHub({
    tokenLimit: 5_000,
    latencyMs: GITHUB_LATENCY_MS,
    endpointRatePerMinute: RATE_PER_MINUTE,
    pollInterval: POLL_INTERVAL_SECONDS,
  });
  try {
    const n = 16;
    const r = await workerRound(database, slow, {
      tokens: benchTokens(n, 'slow'),
      sources: ROUND,
      pollInterval: POLL_INTERVAL_SECONDS,
    });
    const allowed = n * (RATE_PER_MINUTE / 60);
    console.log(`    ${show(r)}`);
    results.record({
      bench: 'watch-worker',
      metric: `${n} tokens, ${GITHUB_LATENCY_MS} ms an answer: share of the per-endpoint limit (${allowed}/s)`,
      value: r.pollsPerSecond / allowed,
      unit: '×',
      detail: { pollsPerSecond: r.pollsPerSecond, widest: r.widest, note: show(r) },
    });
    // GitHub's rule, one request at a time a credential (the gate), bounds it first here.
    const serialBound = Math.min(allowed, (n * 1000) / GITHUB_LATENCY_MS);
    results.record({
      bench: 'watch-worker',
      metric: `${n} tokens, ${GITHUB_LATENCY_MS} ms an answer: polls/s ÷ one request in flight a credential (${serialBound.toFixed(0)}/s)`,
      value: r.pollsPerSecond / serialBound,
      unit: '×',
      detail: { pollsPerSecond: r.pollsPerSecond, serialBound },
    });
    results.record({
      bench: 'watch-worker',
      metric: `${n} tokens, ${GITHUB_LATENCY_MS} ms an answer: secondary-limit 403s`,
      value: r.secondaryLimitHits,
      unit: '403s',
      target: { op: '==', value: 0 },
    });
  } finally {
    await slow.close();
  }
}
