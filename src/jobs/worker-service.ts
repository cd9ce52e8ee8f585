import type { PgBoss } from 'pg-boss';
import type { FillRunner } from '../backfill/fill-run.ts';
import { deploymentCommits } from '../commits/deployment.ts';
import type { Config } from '../platform/config/config.ts';
import type { Logger } from '../platform/log.ts';
import { BackgroundService } from '../platform/service.ts';
import { commitsOffReason } from '../store/commits-targets.ts';
import type { Deps } from '../work/deps.ts';
import { type BossHost, createBoss } from './boss.ts';
import { type JobContext, type JobLimits, registerHandlers } from './handlers.ts';
import { JobLiveness } from './liveness.ts';
import { QUEUES } from './queue-names.ts';
import { type ReconcileReport, reconcile, sweepOrphanedJobs } from './reconciler.ts';
import { Scheduler } from './scheduler.ts';

/** What a worker runs on: the domain's deps and what pg-boss needs (an App is one). */
export type WorkerHost = Deps & BossHost;

/**
 * The worker: croner scheduler + pg-boss handlers on one App. start() opens its liveness
 * session, reconciles once before taking jobs (whatever a dead predecessor left —
 * its orphaned jobs first — is found at once, not a tick later), then polls at once rather
 * than at the next tick; stop() is the graceful shutdown (running jobs get 20 s: one GitHub
 * attempt's connect and response, shutdownTimeoutMs).
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

/** What the worker talks to: "live mode" for github.com, else the API's URL (a fake, a GHES). */
export function talksTo(mode: Config['github']['mode'], apiUrl: string): string {
  if (mode !== 'live') return `${mode} mode`;
  return new URL(apiUrl).hostname === 'api.github.com'
    ? 'live mode'
    : `live, GitHub API at ${apiUrl}`;
}

/**
 * Without a GitHub credential the pushes a worker stores wait for one: a warning
 * when no process of the deployment has used one in the last hour either (commits are off
 * everywhere until one is set), a note when another process has one; nothing with one.
 */
export async function sayIfNoCredential(
  app: Pick<Deps, 'config' | 'db'>,
  log: Logger,
  now = new Date(),
): Promise<void> {
  if (commitsOffReason(app.config.github) === null) return;
  const elsewhere = (await deploymentCommits(app.db, now)).credentialInUse;
  const fields = { event: 'worker.no_credential', elsewhere };
  if (elsewhere) {
    log.info(
      fields,
      'this worker has no GitHub credential; another process of the deployment has one: the pushes this worker stores wait for it',
    );
  } else {
    log.warn(
      fields,
      'no GitHub credential here or in any process of the deployment: pushes are stored without their commits, which wait for one (set GITHUB_TOKEN, GITHUB_TOKENS or GITHUB_APP_ID)',
    );
  }
}

export interface WorkerServiceOptions {
  /** A boss to use instead of creating one (tests); the service stops it either way. */
  boss?: PgBoss;
  /** Run the croner scheduler (default true). */
  schedule?: boolean;
  limits?: Partial<JobLimits>;
  pollingIntervalSeconds?: number;
  shutdownTimeoutMs?: number;
  /** How gap fills run (default inline; bin/worker and npm start: childFill). */
  fill?: FillRunner;
}

export class WorkerService extends BackgroundService {
  readonly boss: PgBoss;
  readonly scheduler: Scheduler;
  readonly liveness: JobLiveness;
  readonly #app: WorkerHost;
  readonly #log: Logger;
  readonly #opts: WorkerServiceOptions;
  #recheck: NodeJS.Timeout | undefined;

  constructor(app: WorkerHost, opts: WorkerServiceOptions = {}) {
    super();
    const timeout = opts.shutdownTimeoutMs;
    if (timeout !== undefined && !(Number.isFinite(timeout) && timeout >= 0))
      throw new RangeError(`shutdownTimeoutMs must be a number of ms >= 0 (got ${timeout})`);
    this.#app = app;
    this.#opts = opts;
    this.#log = app.logger.child({ component: 'worker' });
    this.boss =
      opts.boss ??
      createBoss(app.databaseUrl, app.config, app.logger, { role: 'worker', migrate: false });
    this.liveness = new JobLiveness(app.databaseUrl, app.logger);
    this.scheduler = new Scheduler({
      boss: this.boss,
      logger: app.logger,
      tickSeconds: app.config.tickSeconds,
      beforeTick: () => this.#sweep(),
    });
  }

  /** The context handlers run with; tests use it to call handlers directly. */
  get jobContext(): JobContext {
    return {
      deps: this.#app,
      boss: this.boss,
      signal: this.signal,
      limits: this.#opts.limits,
      fill: this.#opts.fill,
    };
  }

  protected async onStart(signal: AbortSignal): Promise<void> {
    // Before the first fetch: every job this worker runs must start after its session did.
    await this.liveness.start();
    await this.boss.start();
    const report = await this.runOnce();
    this.#scheduleRecheck(report.recheckAt);
    if (signal.aborted) return; // stopped while starting
    await registerHandlers(this.boss, this.jobContext, {
      pollingIntervalSeconds: this.#opts.pollingIntervalSeconds,
      liveness: this.liveness,
    });
    if (this.#opts.schedule ?? true) {
      await this.scheduler.start();
      // The first poll now, not at the next tick (up to TICK_SECONDS away). Unthrottled: a
      // stately queue keeps at most one waiting, so this never doubles a queued poll.
      await this.boss.send(QUEUES.pollSources, { reason: 'start' });
    }
    const { mode, apiUrl } = this.#app.config.github;
    this.#log.info(
      { event: 'worker.started', worker: this.#app.workerId, mode, api_url: apiUrl },
      `worker ${this.#app.workerId} started (${talksTo(mode, apiUrl)})`,
    );
    await sayIfNoCredential(this.#app, this.#log);
  }

  /** One reconcile pass outside any job (worker start, bin/reconcile). */
  runOnce(): Promise<ReconcileReport> {
    return reconcile({
      ...this.#app,
      logger: this.#app.logger.child({ component: 'reconcile' }),
      boss: this.boss,
    });
  }

  /** The orphan sweep alone, as every tick runs it (outside any job). */
  async #sweep(): Promise<void> {
    const sweep = await sweepOrphanedJobs({
      ...this.#app,
      logger: this.#app.logger.child({ component: 'reconcile' }),
      boss: this.boss,
    });
    this.#scheduleRecheck(sweep.recheckAt);
  }

  /**
   * A dead worker's job too young to judge when we looked (orphaned-jobs.ts): look again
   * the moment it can be judged, rather than a whole tick later.
   */
  #scheduleRecheck(at: Date | null): void {
    if (!at || this.#recheck || this.signal.aborted) return;
    const delay = Math.min(Math.max(0, at.getTime() - Date.now()) + 250, 60_000);
    this.#recheck = setTimeout(() => {
      this.#recheck = undefined;
      if (this.signal.aborted) return;
      this.#sweep().catch((err: unknown) =>
        this.#log.warn(
          { event: 'scheduler.sweep_failed', err },
          'orphan sweep failed; the next tick sweeps again',
        ),
      );
    }, delay);
    this.#recheck.unref();
  }

  /**
   * After stop() aborted the signal (running cycles stop between entities): stops the
   * scheduler, stops fetching jobs, lets running ones finish within the shutdown timeout,
   * then stops pg-boss and its pool. The App's own pool is the caller's to close.
   */
  protected async onStop(): Promise<void> {
    const timeout = this.#opts.shutdownTimeoutMs ?? shutdownTimeoutMs(this.#app.config);
    const started = Date.now();
    await this.scheduler.stop();
    clearTimeout(this.#recheck);
    this.#log.info(
      { event: 'worker.stopping', timeout_ms: timeout },
      `worker stopping: no new jobs; running jobs have ${timeout / 1000}s to finish`,
    );
    // graceful: pg-boss stops fetching, waits up to `timeout` for running handlers, then
    // fails whatever is still active (no retry) and aborts its signal.
    await this.boss.stop({ graceful: true, timeout, close: true });
    // Last: a job still running until boss.stop returned kept its lock until now.
    await this.liveness.stop();
    this.#log.info(
      { event: 'worker.stopped', duration_ms: Date.now() - started },
      'worker stopped',
    );
  }
}
