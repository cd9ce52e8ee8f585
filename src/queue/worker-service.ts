import type { PgBoss } from 'pg-boss';
import type { App } from '../app.ts';
import type { Config } from '../config.ts';
import type { Logger } from '../log.ts';
import { reconcile } from '../reconcile/reconciler.ts';
import { Scheduler } from '../scheduler/scheduler.ts';
import { createBoss } from './boss.ts';
import { type JobContext, type JobLimits, registerHandlers } from './handlers.ts';

/**
 * The worker: croner scheduler + pg-boss handlers on one App. start() reconciles once
 * before taking jobs (whatever a dead predecessor left is found at once, not a tick later);
 * stop() is the graceful shutdown of ADR 0007.
 */

/**
 * How long a stopping worker lets running jobs finish. A cycle stops between entities, so
 * at most one GitHub attempt per job is in flight; once it holds the request gate it runs at
 * most connect (5 s) + response (15 s) = 20 s. An attempt still waiting for the gate has not
 * sent anything: cutting it off loses nothing that its lease and reservation timeouts do not
 * already recover.
 */
export function shutdownTimeoutMs(config: Config): number {
  return config.github.connectTimeoutMs + config.github.responseTimeoutMs;
}

export interface WorkerServiceOptions {
  /** A boss to use instead of creating one (tests); the service stops it either way. */
  boss?: PgBoss;
  /** Run the croner scheduler (default true). */
  schedule?: boolean;
  limits?: Partial<JobLimits>;
  pollingIntervalSeconds?: number;
  shutdownTimeoutMs?: number;
}

type State = 'new' | 'starting' | 'running' | 'stopping' | 'stopped';

export class WorkerService {
  readonly boss: PgBoss;
  readonly scheduler: Scheduler;
  readonly #app: App;
  readonly #log: Logger;
  readonly #opts: WorkerServiceOptions;
  #state: State = 'new';
  #stopped: Promise<void> | undefined;

  constructor(app: App, opts: WorkerServiceOptions = {}) {
    this.#app = app;
    this.#opts = opts;
    this.#log = app.logger.child({ component: 'worker' });
    this.boss =
      opts.boss ??
      createBoss(app.databaseUrl, app.config, app.logger, { role: 'worker', migrate: false });
    this.scheduler = new Scheduler({
      boss: this.boss,
      logger: app.logger,
      tickSeconds: app.config.tickSeconds,
    });
  }

  get state(): State {
    return this.#state;
  }

  /** The context handlers run with; tests use it to call handlers directly. */
  get jobContext(): JobContext {
    return {
      deps: this.#app,
      boss: this.boss,
      isStopping: () => this.#state === 'stopping' || this.#state === 'stopped',
      limits: this.#opts.limits,
    };
  }

  async start(): Promise<void> {
    if (this.#state !== 'new') throw new Error(`worker already ${this.#state}`);
    this.#state = 'starting';
    await this.boss.start();
    await this.runReconcile();
    if (this.#state !== 'starting') return; // stopped while starting
    await registerHandlers(this.boss, this.jobContext, {
      pollingIntervalSeconds: this.#opts.pollingIntervalSeconds,
    });
    if (this.#opts.schedule ?? true) this.scheduler.start();
    this.#state = 'running';
    this.#log.info(
      { event: 'worker.started', worker: this.#app.workerId, mode: this.#app.config.github.mode },
      `worker ${this.#app.workerId} started (${this.#app.config.github.mode} mode)`,
    );
  }

  /** One reconcile pass outside any job (worker start, bin/reconcile). */
  runReconcile() {
    return reconcile({
      ...this.#app,
      logger: this.#app.logger.child({ component: 'reconcile' }),
      boss: this.boss,
    });
  }

  /**
   * Stops the scheduler, stops fetching jobs, lets running ones finish within the
   * shutdown timeout (cycles stop between entities), then stops pg-boss and its pool. The
   * App's own pool is the caller's to close. Idempotent.
   */
  stop(): Promise<void> {
    this.#stopped ??= this.#stop();
    return this.#stopped;
  }

  async #stop(): Promise<void> {
    const timeout = this.#opts.shutdownTimeoutMs ?? shutdownTimeoutMs(this.#app.config);
    const started = Date.now();
    this.#state = 'stopping';
    this.scheduler.stop();
    this.#log.info(
      { event: 'worker.stopping', timeout_ms: timeout },
      `worker stopping: no new jobs; running jobs have ${timeout / 1000}s to finish`,
    );
    // graceful: pg-boss stops fetching, waits up to `timeout` for running handlers, then
    // fails whatever is still active (no retry) and aborts its signal.
    await this.boss.stop({ graceful: true, timeout, close: true });
    this.#state = 'stopped';
    this.#log.info(
      { event: 'worker.stopped', duration_ms: Date.now() - started },
      'worker stopped',
    );
  }
}
