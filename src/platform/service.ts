/**
 * The one shape of a background service, and the one way to tell work to stop.
 *
 * A service checks its configuration when it is constructed (a bad value throws there, not
 * at the first tick), and then has three verbs: start() and stop(), each idempotent, and
 * runOnce(), one pass of whatever it does, which a test may call without starting it. stop()
 * aborts the service's `signal`; everything a pass waits on (sleep below, a cycle between
 * its steps, a download) watches that signal, so a stop reaches a pass in flight at once
 * rather than at its next check. A service never polls a flag.
 *
 * What is not a service — a job's cycle, a fill, a prune — is told to stop the same way: it
 * takes an AbortSignal, and stopSignal joins the signals that may end it (the worker
 * stopping, pg-boss giving up on the job, the job's own time).
 */

export type ServiceState = 'new' | 'starting' | 'running' | 'stopping' | 'stopped';

export abstract class BackgroundService {
  readonly #stop = new AbortController();
  #state: ServiceState = 'new';
  #started: Promise<void> | undefined;
  #stopped: Promise<void> | undefined;

  get state(): ServiceState {
    return this.#state;
  }

  /** Aborted once stop() is called: what every wait of this service watches. */
  get signal(): AbortSignal {
    return this.#stop.signal;
  }

  /** Starts the service; a second call returns the first's promise. After stop(), it refuses. */
  start(): Promise<void> {
    if (this.#stopped) return Promise.reject(new Error('a stopped service does not start again'));
    if (this.#started) return this.#started;
    this.#state = 'starting';
    this.#started = (async () => {
      await this.onStart(this.#stop.signal);
      if (this.#state === 'starting') this.#state = 'running';
    })();
    return this.#started;
  }

  /**
   * Stops the service: its signal aborts first (a pass in flight stops waiting), then, once a
   * start in progress has settled, onStop releases what it holds. Idempotent: every call
   * returns the same promise.
   */
  stop(): Promise<void> {
    this.#stopped ??= (async () => {
      this.#state = 'stopping';
      this.#stop.abort();
      await this.#started?.catch(() => {});
      await this.onStop();
      this.#state = 'stopped';
    })();
    return this.#stopped;
  }

  /** One pass of the service's work, stopped early by `signal`. */
  abstract runOnce(signal?: AbortSignal): Promise<unknown>;

  /** What start() does. `signal` aborts when stop() is called meanwhile. */
  protected abstract onStart(signal: AbortSignal): Promise<void> | void;

  /** What stop() releases once the signal has aborted (timers, connections, children). */
  protected abstract onStop(): Promise<void> | void;
}

/**
 * Waits `ms`, or less when `signal` aborts first. True when the time passed, false when the
 * signal ended the wait; either way the timer and the listener are gone when it settles.
 */
export function sleep(ms: number, signal?: AbortSignal): Promise<boolean> {
  if (signal?.aborted) return Promise.resolve(false);
  return new Promise((resolve) => {
    const done = (elapsed: boolean) => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      resolve(elapsed);
    };
    const onAbort = () => done(false);
    const timer = setTimeout(() => done(true), Math.max(0, ms));
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** A signal that aborts when any of its parts does, or its deadline passes. */
export interface StopSignal {
  signal: AbortSignal;
  /** True when the deadline, not another part, ended it. */
  timedOut(): boolean;
  /** Drops the deadline's timer and the listeners (call when the work ends). */
  dispose(): void;
}

/**
 * One signal for work that several things may stop: `signals` (the service stopping, the
 * job given up) and, with `deadline`, the time it may run until. The deadline's timer is
 * unref'd (it never keeps a process alive) and cleared by dispose().
 */
export function stopSignal(
  signals: readonly (AbortSignal | undefined)[],
  deadline?: number,
): StopSignal {
  const controller = new AbortController();
  let timedOut = false;
  const parts = signals.filter((s): s is AbortSignal => s !== undefined);
  const onAbort = () => controller.abort();
  for (const s of parts) {
    if (s.aborted) controller.abort();
    else s.addEventListener('abort', onAbort, { once: true });
  }
  let timer: NodeJS.Timeout | undefined;
  if (deadline !== undefined && !controller.signal.aborted) {
    const fire = () => {
      if (!controller.signal.aborted) timedOut = true;
      controller.abort();
    };
    const ms = deadline - Date.now();
    if (ms <= 0) fire();
    else {
      timer = setTimeout(fire, ms);
      timer.unref();
    }
  }
  return {
    signal: controller.signal,
    timedOut: () => timedOut,
    dispose: () => {
      clearTimeout(timer);
      for (const s of parts) s.removeEventListener('abort', onAbort);
    },
  };
}
