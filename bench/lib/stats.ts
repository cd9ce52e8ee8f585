import { performance } from 'node:perf_hooks';

export interface Timing {
  runs: number;
  p50: number;
  p99: number;
  max: number;
  mean: number;
}

/** The q-quantile (0..1) of sorted samples, nearest-rank. */
export function quantile(sorted: number[], q: number): number {
  if (sorted.length === 0) return Number.NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[i]!;
}

/**
 * Runs `fn` `runs` times one after the other (after `warmup` untimed runs) and returns
 * wall-clock milliseconds per call: what the caller waits, round trip included.
 */
export async function timeRuns(
  runs: number,
  fn: (i: number) => Promise<unknown>,
  warmup = 20,
): Promise<Timing> {
  for (let i = 0; i < warmup; i++) await fn(i);
  const samples: number[] = [];
  for (let i = 0; i < runs; i++) {
    const t0 = performance.now();
    await fn(i);
    samples.push(performance.now() - t0);
  }
  samples.sort((a, b) => a - b);
  return {
    runs,
    p50: quantile(samples, 0.5),
    p99: quantile(samples, 0.99),
    max: samples[samples.length - 1]!,
    mean: samples.reduce((a, b) => a + b, 0) / samples.length,
  };
}

/** Seconds since `t0` (a performance.now() reading). */
export function secondsSince(t0: number): number {
  return (performance.now() - t0) / 1000;
}
