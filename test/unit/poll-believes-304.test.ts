import { describe, expect, it } from 'vitest';
import { allowanceFor } from '../../src/budget/window.ts';
import { fixedClock } from '../../src/platform/clock.ts';
import {
  endpointBudgetPerSecond,
  expectedRequests,
  type FleetNow,
  fillSums,
  learnPollCost,
  POLL_COST_SAMPLES_MAX,
  planFromFleet,
} from '../../src/poll/schedule.ts';

/**
 * ADR 0141: A schedule that believes a 304. Pure: the fleet is arrays, the
 * clock a fixedClock stepped a tick at a time, and every round plans as pollDueSources does —
 * the fleet's sums read once at the round's start, each poll moving only its own term
 * (planFromFleet, the function planSourcePoll calls). No sleeps, nothing timed.
 */

const QUOTA = 5_000;
const SHARE = 2 / 3; // ENRICH_SHARE's default
const RATE = 900; // GITHUB_ENDPOINT_RATE_PER_MINUTE's default
const X = 60; // X-Poll-Interval
const TICK_MS = 60_000; // TICK_SECONDS's default: a round of the due sources a minute

const pollShare = (credentials: number) => (credentials * allowanceFor(QUOTA, SHARE).poll) / 3600; // counted requests a second

interface Source {
  cost: number;
  samples: number;
  etag: boolean;
  next: number;
  /** What polling it spends now: counted requests per poll (0: it answers 304). */
  counted: number;
  lastPoll: number | null;
}

function fleetNow(sources: Source[], credentials: number): FleetNow {
  return {
    quota: fillSums(
      pollShare(credentials),
      sources.map((s) => s.cost / X),
    ),
    requests: fillSums(
      endpointBudgetPerSecond(credentials, RATE),
      sources.map((s) => expectedRequests(s.cost) / X),
    ),
  };
}

/**
 * Rounds on the clock until `until`: each tick polls every due source (its answer: `counted`
 * if it sent an ETag, else a 200 of one page) and plans it. Counts what reached GitHub.
 */
function run(
  sources: Source[],
  credentials: number,
  clock: ReturnType<typeof fixedClock>,
  until: number,
  onTick?: (now: number) => void,
) {
  const countedByHour = new Map<number, number>();
  const start = clock.now().getTime();
  const gaps: number[][] = sources.map(() => []);
  for (let now = clock.now().getTime(); now < until; now += TICK_MS) {
    clock.set(new Date(now));
    onTick?.(now);
    const round = fleetNow(sources, credentials);
    sources.forEach((s, i) => {
      if (s.next > now) return;
      const counted = s.etag ? s.counted : 1;
      const hour = Math.floor((now - start) / 3_600_000);
      countedByHour.set(hour, (countedByHour.get(hour) ?? 0) + counted);
      const plan = planFromFleet(
        round,
        { poll_cost: s.cost, poll_cost_samples: s.samples, poll_interval_seconds: X },
        { requestsSpent: counted, pollIntervalSeconds: X, conditional: s.etag },
        clock.now(),
      );
      expect(plan.seconds).toBeGreaterThanOrEqual(X);
      if (s.lastPoll !== null) gaps[i]!.push(now - s.lastPoll);
      Object.assign(s, {
        cost: plan.cost,
        samples: plan.samples,
        etag: true,
        next: plan.nextPollAt.getTime(),
        lastPoll: now,
      });
    });
  }
  return { countedByHour, gaps };
}

function imported(n: number, at: number, etag: boolean): Source[] {
  return Array.from({ length: n }, () => ({
    cost: 1,
    samples: 0,
    etag,
    next: at,
    counted: 0,
    lastPoll: null,
  }));
}

describe('learnPollCost', () => {
  it('believes the first conditional answer, then moves by halves; an unconditional poll is no evidence', () => {
    const prior = { cost: 1, samples: 0 };
    expect(learnPollCost(prior, { counted: 1, conditional: false })).toEqual(prior);
    expect(learnPollCost(prior, { counted: 0, conditional: true })).toEqual({
      cost: 0,
      samples: 1,
    });
    expect(learnPollCost(prior, { counted: 3, conditional: true })).toEqual({
      cost: 3,
      samples: 1,
    });
    // A feed that turns busy after it was believed idle: its own answers, half at a time.
    expect(learnPollCost({ cost: 0, samples: 1 }, { counted: 1, conditional: true })).toEqual({
      cost: 0.5,
      samples: 2,
    });
    expect(learnPollCost({ cost: 0.5, samples: 2 }, { counted: 0, conditional: true })).toEqual({
      cost: 0.25,
      samples: 3,
    });
    expect(
      learnPollCost({ cost: 0, samples: POLL_COST_SAMPLES_MAX }, { counted: 0, conditional: true })
        .samples,
    ).toBe(POLL_COST_SAMPLES_MAX);
    // Bounded as the column is.
    expect(learnPollCost(prior, { counted: 1_000, conditional: true }).cost).toBe(100);
  });
});

describe('a schedule that believes a 304', () => {
  it('2,000 sources on 8 tokens: after an all-304 round every next poll is at X-Poll-Interval', () => {
    const clock = fixedClock('2026-12-01T00:00:00Z');
    const t0 = clock.now().getTime();
    // As an import with known ETags leaves them: the prior cost 1, all due now.
    const sources = imported(2_000, t0, true);
    const seen: number[] = [];
    run(sources, 8, clock, t0 + TICK_MS);
    for (const s of sources) seen.push((s.next - t0) / 1000);
    expect(Math.max(...seen)).toBeLessThanOrEqual(120);
    expect(new Set(seen)).toEqual(new Set([X]));
    // And it stays so: an hour of all-304 rounds polls every source every minute, free.
    const hour = run(sources, 8, clock, t0 + 3_600_000);
    expect(hour.countedByHour.get(0)).toBe(0);
    for (const g of hour.gaps) expect(new Set(g)).toEqual(new Set([X * 1000]));
  });

  it('an import without ETags: its first (unconditional) round plans as busy, the first 304 round believes', () => {
    const clock = fixedClock('2026-12-01T00:00:00Z');
    const t0 = clock.now().getTime();
    const sources = imported(2_000, t0, false);
    run(sources, 8, clock, t0 + TICK_MS);
    // 2,000 unknown feeds, each assumed to spend one counted request a poll, share 3.7 a second.
    const first = sources.map((s) => (s.next - t0) / 1000);
    expect(Math.min(...first)).toBeGreaterThanOrEqual(Math.floor(2_000 / pollShare(8)));
    expect(sources.every((s) => s.samples === 0 && s.cost === 1)).toBe(true);
    const second = Math.max(...sources.map((s) => s.next));
    run(sources, 8, clock, second + 1);
    const after = sources.map((s) => (s.next - second) / 1000);
    expect(Math.max(...after)).toBeLessThanOrEqual(X);
  });

  it('feeds that turn busy are re-planned from their own answers: within the poll share, none starved', () => {
    const clock = fixedClock('2026-12-01T00:00:00Z');
    const t0 = clock.now().getTime();
    const sources = imported(2_000, t0, true);
    run(sources, 8, clock, t0 + 10 * TICK_MS);
    // 300 of them start changing on every poll (a counted page each) ten minutes in.
    const busy = sources.slice(0, 300);
    for (const s of busy) s.counted = 1;
    const from = clock.now().getTime() + TICK_MS;
    const r = run(sources, 8, clock, from + 4 * 3_600_000);
    const allowance = pollShare(8) * 3600;
    // Within the share from the first hour on: the idle feeds leave theirs to the busy ones,
    // and what a busy feed spent before its answers said so fits in what the idle ones left.
    for (const h of [0, 1, 2, 3]) expect(r.countedByHour.get(h)!).toBeLessThanOrEqual(allowance);
    // No starvation: a busy feed waits its equal part of the share (300 feeds on 3.7 counted
    // requests a second: 82 s), rounded up to the next tick (120 s) — and never longer.
    const fair = Math.ceil(Math.ceil(busy.length / pollShare(8)) / 60) * TICK_MS;
    for (const g of r.gaps.slice(0, 300)) {
      expect(Math.max(...g.slice(5))).toBeLessThanOrEqual(fair);
    }
    // …so the share the idle feeds leave is used as often as the tick allows.
    expect(r.countedByHour.get(3)!).toBe((busy.length * 3_600_000) / fair);
    // The idle feeds kept their X-Poll-Interval throughout.
    for (const g of r.gaps.slice(300)) expect(Math.max(...g)).toBe(X * 1000);
  });

  it('every feed turns busy: the fleet no longer fits, and the share binds once they said so', () => {
    const clock = fixedClock('2026-12-01T00:00:00Z');
    const t0 = clock.now().getTime();
    const sources = imported(2_000, t0, true);
    run(sources, 8, clock, t0 + 5 * TICK_MS);
    for (const s of sources) s.counted = 1;
    const from = clock.now().getTime() + TICK_MS;
    const r = run(sources, 8, clock, from + 4 * 3_600_000);
    const allowance = pollShare(8) * 3600;
    // Believing the 304s costs, per feed, what its estimate lags behind its answers: 1 + ½ +
    // ¼ … = at most 2 counted polls beyond its share, once, in the hour it turned.
    expect(r.countedByHour.get(0)!).toBeLessThanOrEqual(allowance + 2 * sources.length);
    // After that, the share binds: 2,000 feeds polled in waves every 540 s put 6 or 7 waves
    // in a clock hour, so the bound holds over the hours together, within one wave.
    const later = [1, 2, 3].reduce((n, h) => n + r.countedByHour.get(h)!, 0);
    expect(later).toBeLessThanOrEqual(3 * allowance + sources.length);
    // Each polls as often as its equal part of the share allows (540 s).
    const fair = Math.ceil(Math.ceil(sources.length / pollShare(8)) / 60) * TICK_MS;
    for (const g of r.gaps) expect(Math.max(...g.slice(-5))).toBeLessThanOrEqual(fair);
  });
});
