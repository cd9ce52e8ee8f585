import type { PgBoss } from 'pg-boss';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { Scheduler } from '../../src/jobs/scheduler.ts';
import { BackgroundService, sleep, stopSignal } from '../../src/platform/service.ts';
import { captureLogger } from '../recovery/helpers.ts';

/**
 * The one service shape: config refused at construction, start()/stop() idempotent, a stop
 * that reaches a pass in flight through its signal, and no timer left behind.
 */

class Waiter extends BackgroundService {
  starts = 0;
  stops = 0;
  readonly #waitMs: number;

  constructor(waitMs: number) {
    super();
    if (!(waitMs > 0)) throw new RangeError(`waitMs must be > 0 (got ${waitMs})`);
    this.#waitMs = waitMs;
  }

  protected onStart(): void {
    this.starts += 1;
  }

  protected onStop(): void {
    this.stops += 1;
  }

  /** One pass: a long wait, as a pass between two polls would. */
  async runOnce(signal: AbortSignal = this.signal): Promise<'waited' | 'stopped'> {
    return (await sleep(this.#waitMs, signal)) ? 'waited' : 'stopped';
  }
}

describe('a background service', () => {
  it('refuses a bad config when it is built, not when it first runs', () => {
    expect(() => new Waiter(0)).toThrow(RangeError);
    expect(() => new Scheduler({ boss: {} as PgBoss, logger: quiet(), tickSeconds: 0 })).toThrow(
      /tickSeconds/,
    );
  });

  // The timers are counted on a fake clock that sees only this test's: Node's count of the
  // process's timers also holds vitest's own, which come and go under load (one expired
  // during a 20 ms pass on a busy CI machine and failed the count).
  afterEach(() => {
    vi.useRealTimers();
  });

  it('stop() aborts the waits of a pass in flight at once', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const service = new Waiter(3_600_000);
    await service.start();
    const started = performance.now();
    const pass = service.runOnce();
    expect(vi.getTimerCount()).toBe(1);
    await service.stop();
    expect(await pass).toBe('stopped');
    expect(performance.now() - started).toBeLessThan(1_000);
    expect(service.state).toBe('stopped');
    expect(service.signal.aborted).toBe(true);
    // The hour-long wait's timer went with the stop.
    expect(vi.getTimerCount()).toBe(0);
    // A pass begun after the stop does not wait at all.
    expect(await service.runOnce()).toBe('stopped');
  });

  it('start() and stop() are idempotent, and a stopped service does not start again', async () => {
    const service = new Waiter(10);
    const first = service.start();
    expect(service.start()).toBe(first);
    await first;
    expect(service.state).toBe('running');
    const stopping = service.stop();
    expect(service.stop()).toBe(stopping);
    await Promise.all([stopping, service.stop()]);
    expect([service.starts, service.stops]).toEqual([1, 1]);
    await expect(service.start()).rejects.toThrow(/does not start again/);
  });

  it('a stop during start waits for the start to settle, then releases', async () => {
    const service = new Waiter(10);
    const starting = service.start();
    const stopping = service.stop();
    await Promise.all([starting, stopping]);
    expect(service.state).toBe('stopped');
    expect([service.starts, service.stops]).toEqual([1, 1]);
  });

  it('a pass without a stop waits its time, and leaves no timer', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const service = new Waiter(20);
    let outcome: string | undefined;
    const pass = service.runOnce().then((o) => {
      outcome = o;
      return o;
    });
    expect(vi.getTimerCount()).toBe(1);
    await vi.advanceTimersByTimeAsync(19);
    expect(outcome).toBeUndefined();
    await vi.advanceTimersByTimeAsync(1);
    expect(await pass).toBe('waited');
    expect(vi.getTimerCount()).toBe(0);
    await service.stop();
  });
});

describe('stopSignal', () => {
  // Its deadline's timer is unref'd, so Node's count of live resources does not see it: the
  // fake clock counts every pending timer.
  afterEach(() => {
    vi.useRealTimers();
  });

  it('aborts when any part does, says whether its deadline did, and leaves no timer', () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'Date'] });
    const worker = new AbortController();
    const byStop = stopSignal([worker.signal, undefined], Date.now() + 3_600_000);
    expect(vi.getTimerCount()).toBe(1);
    worker.abort();
    expect(byStop.signal.aborted).toBe(true);
    expect(byStop.timedOut()).toBe(false);
    byStop.dispose();
    expect(vi.getTimerCount()).toBe(0);

    const job = new AbortController();
    const byTime = stopSignal([job.signal], Date.now() + 20);
    vi.advanceTimersByTime(19);
    expect(byTime.signal.aborted).toBe(false);
    vi.advanceTimersByTime(1);
    expect(byTime.signal.aborted).toBe(true);
    expect(byTime.timedOut()).toBe(true);
    // A part aborting after the deadline does not change why it ended.
    job.abort();
    expect(byTime.timedOut()).toBe(true);
    byTime.dispose();
    expect(vi.getTimerCount()).toBe(0);

    // Already past its deadline, or a part already aborted: aborted at once, no timer.
    expect(stopSignal([], Date.now() - 1).timedOut()).toBe(true);
    const aborted = new AbortController();
    aborted.abort();
    const late = stopSignal([aborted.signal], Date.now() + 60_000);
    expect([late.signal.aborted, late.timedOut()]).toEqual([true, false]);
    expect(vi.getTimerCount()).toBe(0);
  });
});

describe('the scheduler, as a service', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('start() twice runs one clock; stop() stops it, twice over, with no timer left', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval'] });
    const scheduler = new Scheduler({ boss: {} as PgBoss, logger: quiet(), tickSeconds: 3600 });
    await scheduler.start();
    const ticking = vi.getTimerCount();
    expect(ticking).toBeGreaterThan(0);
    await scheduler.start();
    expect(scheduler.running).toBe(true);
    expect(vi.getTimerCount()).toBe(ticking);
    await Promise.all([scheduler.stop(), scheduler.stop()]);
    expect(scheduler.running).toBe(false);
    expect(scheduler.state).toBe('stopped');
    expect(vi.getTimerCount()).toBe(0);
  });
});

function quiet() {
  return captureLogger('silent').logger;
}
