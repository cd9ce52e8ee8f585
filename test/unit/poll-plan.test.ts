import { describe, expect, it } from 'vitest';
import { fixedClock } from '../../src/platform/clock.ts';
import {
  expectedRequests,
  fillLevel,
  fillSums,
  nextPollCost,
  planNextPoll,
} from '../../src/poll/schedule.ts';

/**
 * The planner knows a 304 is free. Pure, so the fleet is an array and the
 * clock a fixedClock; the database statement computing the same sums is tested in
 * test/integration/poll-plan.test.ts.
 */

const QUOTA = 5000; // a token's hourly quota
const POLL_SHARE = 1 / 3; // what ENRICH_SHARE's default 2/3 leaves to polls
const RATE = 900; // GITHUB_ENDPOINT_RATE_PER_MINUTE's default

interface Fleet {
  costs: number[];
  x: number; // X-Poll-Interval of every feed
  credentials: number;
  rate?: number;
}

const quotaBudget = (credentials: number) =>
  (credentials * (QUOTA - Math.floor(QUOTA * (1 - POLL_SHARE)))) / 3600;
const requestBudget = (f: Fleet) => (f.credentials * (f.rate ?? RATE)) / 60;

/** Every source's next interval, planned from the fleet as it stands. */
function intervals(f: Fleet): number[] {
  const qLevel = fillLevel(
    fillSums(
      quotaBudget(f.credentials),
      f.costs.map((c) => c / f.x),
    ),
  );
  const rLevel = fillLevel(
    fillSums(
      requestBudget(f),
      f.costs.map((c) => expectedRequests(c) / f.x),
    ),
  );
  const now = new Date(0);
  return f.costs.map(
    (cost) =>
      planNextPoll(
        { pollIntervalSeconds: f.x, cost, quotaLevel: qLevel, requestLevel: rLevel },
        now,
      ).seconds,
  );
}

/** Counted requests an hour and requests a minute if every source polls at its interval. */
function spend(f: Fleet, t: number[]) {
  return {
    countedPerHour: f.costs.reduce((n, c, i) => n + (3600 * c) / t[i]!, 0),
    requestsPerMinute: f.costs.reduce((n, c, i) => n + (60 * expectedRequests(c)) / t[i]!, 0),
  };
}

function fleet(busy: number, idle: number, credentials: number, rate?: number): Fleet {
  return {
    costs: [...Array(busy).fill(1), ...Array(idle).fill(0)],
    x: 60,
    credentials,
    ...(rate ? { rate } : {}),
  };
}

describe('poll_cost', () => {
  it('is a weighted mean of counted requests: 304s decay it, a change raises it', () => {
    let c = 1;
    for (let i = 0; i < 8; i++) c = nextPollCost(c, 0);
    expect(c).toBeCloseTo(0.5 ** 8, 10);
    expect(nextPollCost(0, 3)).toBe(1.5);
    expect(nextPollCost(1e-7, 0)).toBe(0);
    expect(nextPollCost(100, 1000)).toBe(100);
    expect(nextPollCost(0.5, -4)).toBe(0.25);
  });
});

describe('planNextPoll over a fleet', () => {
  it('all idle, 2,000 sources on 8 tokens: every next poll at X-Poll-Interval', () => {
    const f = fleet(0, 2000, 8);
    const t = intervals(f);
    expect(new Set(t)).toEqual(new Set([60]));
    expect(spend(f, t).requestsPerMinute).toBeLessThanOrEqual(requestBudget(f) * 60);
  });

  it('all idle on one token: the secondary limit spreads them, never beyond 900 a minute', () => {
    const f = fleet(0, 2000, 1);
    const t = intervals(f);
    expect(t[0]).toBe(Math.ceil((60 * 2000) / 900));
    expect(spend(f, t).requestsPerMinute).toBeLessThanOrEqual(900);
  });

  it('all busy: the poll share decides, and is never overspent (pools of 1 and 16)', () => {
    for (const credentials of [1, 16]) {
      const f = fleet(2000, 0, credentials);
      const t = intervals(f);
      const s = spend(f, t);
      expect(s.countedPerHour).toBeLessThanOrEqual(quotaBudget(credentials) * 3600 + 1e-6);
      // And uses it: within a second's rounding of the allowance.
      expect(s.countedPerHour).toBeGreaterThan(quotaBudget(credentials) * 3600 * 0.99);
      expect(Math.min(...t)).toBeGreaterThan(60);
    }
  });

  it('mixed: idle feeds at X-Poll-Interval, busy ones share what is left (pools of 1 and 16)', () => {
    for (const credentials of [1, 16]) {
      const f = fleet(300, 9700, credentials);
      const t = intervals(f);
      const s = spend(f, t);
      expect(s.countedPerHour).toBeLessThanOrEqual(quotaBudget(credentials) * 3600 + 1e-6);
      expect(s.requestsPerMinute).toBeLessThanOrEqual(requestBudget(f) * 60 + 1e-6);
      const busy = t.slice(0, 300);
      const idle = t.slice(300);
      // Busy sources get the whole poll share, not 1/10,000th of it each: faster than the
      // old uniform floor 3600 × sources / allowance.
      const oldFloor = Math.ceil((3600 * 10_000) / (quotaBudget(credentials) * 3600));
      expect(Math.max(...busy)).toBeLessThan(oldFloor);
      if (credentials === 16) expect(new Set(idle)).toEqual(new Set([60]));
      else expect(new Set(idle)).toEqual(new Set([Math.ceil((60 * 10_000) / 900)]));
    }
  });

  it('never plans below X-Poll-Interval, however much budget is free', () => {
    for (const x of [1, 60, 300, 3600]) {
      const f: Fleet = { costs: [0, 0.01, 1, 3], x, credentials: 16 };
      for (const s of intervals(f)) expect(s).toBeGreaterThanOrEqual(x);
    }
  });

  it('a fleet whose sources all fit at their interval has no quota level', () => {
    expect(fillLevel(fillSums(1, [0.1, 0.2]))).toBe(Number.POSITIVE_INFINITY);
    expect(fillLevel({ budget: 1, n: 0, lowRate: 0, lowN: 0 })).toBe(Number.POSITIVE_INFINITY);
    // Water-filling: the low source keeps its 0.1, the other two share the remaining 0.9.
    expect(fillLevel(fillSums(1, [0.1, 5, 5]))).toBeCloseTo(0.45, 10);
  });
});

describe('a simulated hour on an injected clock', () => {
  /**
   * Each source polls when its next poll comes; busy ones always change (1 counted request),
   * idle ones always answer 304. Costs start at 1 (unknown = busy) and learn. Counts what
   * would reach GitHub per clock hour and per clock minute.
   */
  function simulate(busy: number, idle: number, credentials: number, rate: number) {
    const n = busy + idle;
    const clock = fixedClock('2026-12-01T00:00:00Z');
    const start = clock.now().getTime();
    const costs: number[] = Array(n).fill(1);
    // Sources added over the first minute, as an import followed by ticks would have them.
    const next = costs.map((_, i) => start + Math.floor((i * 60_000) / n));
    const f: Fleet = { costs, x: 60, credentials, rate };
    const countedByHour = new Map<number, number>();
    const requestsByMinute = new Map<number, number>();
    const lastPoll: number[] = Array(n).fill(start);
    let worstStaleness = 0;
    const end = start + 3 * 3600_000;
    for (;;) {
      let i = 0;
      for (let j = 1; j < n; j++) if (next[j]! < next[i]!) i = j;
      if (next[i]! >= end) break;
      clock.set(new Date(next[i]!));
      const now = clock.now();
      const counted = i < busy ? 1 : 0;
      const minute = Math.floor((now.getTime() - start) / 60_000);
      const hour = Math.floor(minute / 60);
      countedByHour.set(hour, (countedByHour.get(hour) ?? 0) + counted);
      requestsByMinute.set(minute, (requestsByMinute.get(minute) ?? 0) + 1);
      if (hour >= 1) worstStaleness = Math.max(worstStaleness, now.getTime() - lastPoll[i]!);
      lastPoll[i] = now.getTime();
      costs[i] = nextPollCost(costs[i]!, counted);
      const qLevel = fillLevel(quotaSums(f));
      const rLevel = fillLevel(
        fillSums(
          requestBudget(f),
          costs.map((c) => expectedRequests(c) / f.x),
        ),
      );
      const plan = planNextPoll(
        { pollIntervalSeconds: f.x, cost: costs[i]!, quotaLevel: qLevel, requestLevel: rLevel },
        now,
      );
      expect(plan.nextPollAt.getTime()).toBeGreaterThanOrEqual(now.getTime() + 60_000);
      next[i] = plan.nextPollAt.getTime();
    }
    return { countedByHour, requestsByMinute, worstStaleness, costs };
  }
  const quotaSums = (f: Fleet) =>
    fillSums(
      quotaBudget(f.credentials),
      f.costs.map((c) => c / f.x),
    );

  it('mixed fleet on one token: the learned schedule stays within the allowance and the endpoint rate', () => {
    // 300 sources, 40 busy; a 120-a-minute endpoint limit so the secondary limit matters too.
    const r = simulate(40, 260, 1, 120);
    const allowance = quotaBudget(1) * 3600;
    for (const [hour, counted] of r.countedByHour) {
      // Hour 0 learns from a cost of 1 for everyone: it spends less, never more.
      expect(counted, `hour ${hour}`).toBeLessThanOrEqual(Math.ceil(allowance));
    }
    // The planner bounds rates, not bursts (the request gate paces those): over an hour of
    // learned costs every source polls at most once per interval, one more at the edge.
    for (const hour of [1, 2]) {
      let requests = 0;
      for (const [minute, n] of r.requestsByMinute) {
        if (Math.floor(minute / 60) === hour) requests += n;
      }
      expect(requests, `hour ${hour}`).toBeLessThanOrEqual(60 * 120 + 300);
      expect(requests, `hour ${hour}`).toBeGreaterThan(60 * 120 * 0.9);
    }
    // Idle sources learned they are idle; the busy ones kept a cost of 1.
    expect(Math.max(...r.costs.slice(40))).toBeLessThan(0.01);
    expect(Math.min(...r.costs.slice(0, 40))).toBe(1);
  });

  it('all idle on 16 tokens: after learning, every source is polled every X-Poll-Interval', () => {
    const r = simulate(0, 200, 16, 900);
    expect(r.worstStaleness).toBe(60_000);
    expect(r.countedByHour.get(2)).toBe(0);
  });
});
