import { describe, expect, it } from 'vitest';
import type { GitHubClient } from '../../src/budget/client-types.ts';
import { inFlightPlan } from '../../src/budget/concurrency.ts';
import { oneEntityReport, runFetchCycle, type StepReport } from '../../src/work/cycle.ts';
import { fetchLanes } from '../../src/work/lanes.ts';

/**
 * The one fetch loop (src/work/cycle.ts): lanes step at once, the cap is never overshot,
 * the first stop keeps every lane from starting another step (those in flight finish), and
 * the result sums every lane. Concurrency is proven by steps that wait on each other (a
 * barrier), never by timing.
 */

/** Resolves `wait()` for everyone once `n` callers wait: only reachable if n run at once. */
function barrier(n: number) {
  let arrived = 0;
  let open!: () => void;
  const opened = new Promise<void>((r) => {
    open = r;
  });
  return {
    wait(): Promise<void> {
      arrived += 1;
      if (arrived >= n) open();
      return opened;
    },
  };
}

/** A promise and its resolver. */
function deferred<T = void>() {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

describe('runFetchCycle', () => {
  it('runs `lanes` steps at once: three steps meet at a barrier no single lane could pass', async () => {
    const meet = barrier(3);
    let left = 9;
    const r = await runFetchCycle({
      lanes: 3,
      step: async () => {
        if (left <= 0) return { taken: 0, stop: 'idle' };
        left -= 1;
        // The first three steps (one a lane) wait for each other; later ones pass at once.
        await meet.wait();
        return { taken: 1 };
      },
    });
    expect(r).toMatchObject({ processed: 9, stoppedBy: 'idle', maxInFlight: 3 });
    // Nine steps that worked, plus the idle one of each lane that ended it... at least one.
    expect(r.steps).toBeGreaterThanOrEqual(10);
    expect(r.steps).toBeLessThanOrEqual(12);
  });

  it('one lane: one step at a time, as a plain loop', async () => {
    let inFlight = 0;
    let most = 0;
    let left = 5;
    const r = await runFetchCycle({
      lanes: 1,
      step: async () => {
        inFlight += 1;
        most = Math.max(most, inFlight);
        await Promise.resolve();
        inFlight -= 1;
        if (left <= 0) return { taken: 0, stop: 'idle' };
        left -= 1;
        return { taken: 1 };
      },
    });
    expect(most).toBe(1);
    expect(r).toEqual({ processed: 5, stoppedBy: 'idle', steps: 6, maxInFlight: 1 });
  });

  it('never overshoots the cap: a ticket is taken before each step', async () => {
    const started: number[] = [];
    const r = await runFetchCycle({
      lanes: 4,
      cap: 6,
      step: async (room) => {
        started.push(room);
        await Promise.resolve();
        return { taken: 1 };
      },
    });
    expect(r).toMatchObject({ processed: 6, stoppedBy: 'cap', steps: 6 });
    expect(started).toEqual([1, 1, 1, 1, 1, 1]);
  });

  it('batches take their room against the cap and give back what they did not use', async () => {
    const rooms: number[] = [];
    // A batch of up to 150 under a cap of 200: 150, then 50; the first claims only 120, so
    // its 30 unused tickets go back and a later step may use them.
    const claims = [120, 50, 30];
    const r = await runFetchCycle({
      lanes: 2,
      cap: 200,
      stepMax: 150,
      step: async (room) => {
        rooms.push(room);
        await Promise.resolve();
        return { taken: Math.min(room, claims.shift() ?? 0) };
      },
    });
    expect(rooms.slice(0, 2)).toEqual([150, 50]);
    expect(r.processed).toBe(200);
    expect(r.stoppedBy).toBe('cap');
  });

  it('a cap of 0 starts nothing', async () => {
    const r = await runFetchCycle({
      lanes: 3,
      cap: 0,
      step: async () => {
        throw new Error('no step may start');
      },
    });
    expect(r).toEqual({ processed: 0, stoppedBy: 'cap', steps: 0, maxInFlight: 0 });
  });

  it('the first stop keeps the other lanes from starting a step; steps in flight finish and count', async () => {
    const slow = deferred();
    let calls = 0;
    const r = await runFetchCycle({
      lanes: 3,
      step: async (): Promise<StepReport> => {
        calls += 1;
        const mine = calls;
        if (mine === 1) {
          // In flight while another lane sees idle: it must still finish and be counted.
          await slow.promise;
          return { taken: 1 };
        }
        if (mine === 2) {
          const idle: StepReport = { taken: 0, stop: 'idle' };
          queueMicrotask(() => slow.resolve());
          return idle;
        }
        await slow.promise;
        return { taken: 1 };
      },
    });
    // Steps 1 and 3 were in flight when step 2 said idle; nobody started a fourth.
    expect(calls).toBe(3);
    expect(r).toMatchObject({ processed: 2, stoppedBy: 'idle', steps: 3, maxInFlight: 3 });
  });

  it('a rate limit seen by a step still in flight replaces an earlier stop: its retryAt is what to wait for', async () => {
    const release = deferred();
    const at = new Date('2026-12-02T05:00:00Z');
    let calls = 0;
    const r = await runFetchCycle({
      lanes: 2,
      step: async (): Promise<StepReport> => {
        calls += 1;
        if (calls === 1) {
          await release.promise;
          return { taken: 1, stop: 'rate_limited', retryAt: at };
        }
        release.resolve();
        return { taken: 0, stop: 'budget_exhausted' };
      },
    });
    expect(r).toMatchObject({ processed: 1, stoppedBy: 'rate_limited', retryAt: at, steps: 2 });
  });

  it('shouldStop and an aborted signal stop between steps, never during one', async () => {
    let n = 0;
    const stopped = await runFetchCycle({
      lanes: 2,
      shouldStop: () => n >= 4,
      step: async () => {
        n += 1;
        await Promise.resolve();
        return { taken: 1 };
      },
    });
    expect(stopped.stoppedBy).toBe('stopped');
    expect(stopped.processed).toBe(n);
    expect(n).toBeGreaterThanOrEqual(4);
    expect(n).toBeLessThanOrEqual(5);

    const ac = new AbortController();
    ac.abort();
    const aborted = await runFetchCycle({
      lanes: 2,
      signal: ac.signal,
      step: async () => ({ taken: 1 }),
    });
    expect(aborted).toEqual({ processed: 0, stoppedBy: 'stopped', steps: 0, maxInFlight: 0 });
  });

  it('an error stops new steps; those in flight finish; then it is thrown', async () => {
    const finish = deferred();
    let finished = 0;
    let calls = 0;
    const run = runFetchCycle({
      lanes: 3,
      step: async () => {
        calls += 1;
        if (calls === 2) {
          queueMicrotask(() => finish.resolve());
          throw new Error('a bug');
        }
        await finish.promise;
        finished += 1;
        return { taken: 1 };
      },
    });
    await expect(run).rejects.toThrow('a bug');
    expect(calls).toBe(3);
    expect(finished).toBe(2);
  });

  it('oneEntityReport: idle and budget_exhausted took nothing; rate_limited took its entity', () => {
    const at = new Date();
    expect(oneEntityReport('idle')).toEqual({ taken: 0, stop: 'idle', retryAt: undefined });
    expect(oneEntityReport('budget_exhausted', at)).toEqual({
      taken: 0,
      stop: 'budget_exhausted',
      retryAt: at,
    });
    expect(oneEntityReport('rate_limited', at)).toEqual({
      taken: 1,
      stop: 'rate_limited',
      retryAt: at,
    });
    expect(oneEntityReport('enriched', at)).toEqual({ taken: 1 });
  });
});

describe('fetchLanes', () => {
  const client = (credentials: string[]) => ({ credentials }) as unknown as GitHubClient;

  it('the process plan when there is one', () => {
    const four = ['token:a', 'token:b', 'token:c', 'token:d'];
    const inFlight = inFlightPlan({ credentials: four, role: 'worker' });
    expect(fetchLanes({ github: client(['x']), inFlight }, 'graphql', 'commits')).toBe(4);
    expect(fetchLanes({ github: client(['x']), inFlight }, 'rest', 'commits')).toBe(4);
    // A worker runs both enrichment classes at once: each takes half the REST fetchers.
    expect(fetchLanes({ github: client(['x']), inFlight }, 'rest', 'enrich')).toBe(2);
    const one = inFlightPlan({ credentials: ['token:a'], role: 'worker' });
    expect(fetchLanes({ github: client(['x']), inFlight: one }, 'rest', 'enrich')).toBe(1);
    // bin/enrich's plan: one class at a time, every REST fetcher.
    const enrich = inFlightPlan({ credentials: four, role: 'enrich' });
    expect(fetchLanes({ github: client(['x']), inFlight: enrich }, 'rest', 'enrich')).toBe(4);
  });

  it("without one, the client's credentials: one lane for one credential or anonymous", () => {
    expect(fetchLanes({ github: client(['anonymous']) }, 'rest', 'enrich')).toBe(1);
    expect(fetchLanes({ github: client(['anonymous']) }, 'graphql', 'commits')).toBe(1);
    expect(fetchLanes({ github: client(['token:a']) }, 'rest', 'enrich')).toBe(1);
    const three = client(['token:a', 'token:b', 'token:c', 'token:a#graphql']);
    expect(fetchLanes({ github: three }, 'rest', 'enrich')).toBe(3);
    expect(fetchLanes({ github: three }, 'graphql', 'commits')).toBe(3);
  });

  it('a plan with no fetchers of that budget still runs one lane', () => {
    const ingest = inFlightPlan({ credentials: ['token:a', 'token:b'], role: 'ingest' });
    expect(fetchLanes({ github: client([]), inFlight: ingest }, 'rest', 'enrich')).toBe(1);
  });
});
