import { Cron } from 'croner';
import type { PgBoss } from 'pg-boss';
import type { Logger } from '../platform/log.ts';
import { BackgroundService } from '../platform/service.ts';
import { QUEUES, type QueueName } from './queue-names.ts';

/**
 * The clock of the system: every TICK_SECONDS it enqueues `poll-sources` and `reconcile`
 * (and `backfill`, whose job looks for open gaps whose archive hours are published), and
 * once an hour `maintenance`. A tick is not a poll — the handlers decide under locks
 * what is due — so the scheduler holds no state and any number of workers may run one.
 *
 * Sends are throttled: pg-boss files each job in the epoch-aligned slot of its period and
 * a slot holds one job (a unique index), so N schedulers firing in the same slot make one
 * job, and the others' sends return null ("this tick is already queued").
 */

export const MAINTENANCE_SECONDS = 3600;

/**
 * A croner pattern that fires at the start of every `seconds` slot, so schedulers on
 * several machines fire together and their sends meet in the same throttle slot. Periods
 * that do not divide a minute/hour/day evenly fall back to croner's minimum interval.
 */
export function tickSchedule(seconds: number): { pattern: string; interval?: number } {
  if (seconds < 60 && 60 % seconds === 0) return { pattern: `*/${seconds} * * * * *` };
  if (seconds % 60 === 0 && seconds < 3600 && 3600 % seconds === 0)
    return { pattern: `0 */${seconds / 60} * * * *` };
  if (seconds % 3600 === 0 && 86_400 % seconds === 0)
    return { pattern: `0 0 */${seconds / 3600} * * *` };
  return { pattern: '* * * * * *', interval: seconds };
}

export interface TickResult {
  queue: QueueName;
  jobId: string | null;
  status: 'sent' | 'already_queued';
}

export interface SchedulerOptions {
  boss: PgBoss;
  logger: Logger;
  tickSeconds: number;
  /**
   * Runs at every tick before its jobs are sent, in the scheduler itself rather than in a
   * job: the worker's orphan sweep, which must not depend on a queue an orphan may hold.
   */
  beforeTick?: () => Promise<unknown>;
}

export class Scheduler extends BackgroundService {
  readonly #boss: PgBoss;
  readonly #log: Logger;
  readonly #tickSeconds: number;
  readonly #beforeTick: (() => Promise<unknown>) | undefined;
  #crons: Cron[] = [];

  constructor(opts: SchedulerOptions) {
    super();
    if (!Number.isInteger(opts.tickSeconds) || opts.tickSeconds < 1)
      throw new RangeError(`tickSeconds must be a positive integer (got ${opts.tickSeconds})`);
    this.#boss = opts.boss;
    this.#log = opts.logger.child({ component: 'scheduler' });
    this.#tickSeconds = opts.tickSeconds;
    this.#beforeTick = opts.beforeTick;
  }

  get running(): boolean {
    return this.#crons.length > 0;
  }

  protected onStart(): void {
    const onError = (err: unknown) =>
      this.#log.warn(
        { event: 'scheduler.tick_failed', err },
        'tick could not be enqueued; the next one will try again',
      );
    const tick = tickSchedule(this.#tickSeconds);
    const everyTick = (name: string, fire: () => Promise<unknown>) =>
      new Cron(
        tick.pattern,
        {
          name,
          protect: true,
          catch: onError,
          ...(tick.interval ? { interval: tick.interval } : {}),
        },
        async () => {
          await fire();
        },
      );
    this.#crons = [
      everyTick('tick', () => this.tick()),
      everyTick('backfill', () => this.backfillTick()),
      // Minute 7 rather than 0: away from everyone else's top-of-the-hour jobs.
      new Cron('0 7 * * * *', { name: 'maintenance', protect: true, catch: onError }, async () => {
        await this.maintenanceTick();
      }),
    ];
    this.#log.info(
      { event: 'scheduler.started', tick_seconds: this.#tickSeconds, pattern: tick.pattern },
      `scheduler started: poll-sources, reconcile and backfill every ${this.#tickSeconds}s, maintenance hourly`,
    );
  }

  /** Stops firing. Jobs already enqueued stay queued for whoever works them. */
  protected onStop(): void {
    for (const cron of this.#crons) cron.stop();
    this.#crons = [];
  }

  /** One tick, as the croner fires it (tests call it without starting the clock). */
  runOnce(): Promise<TickResult[]> {
    return this.tick();
  }

  /** One tick: poll-sources and reconcile, throttled to one job per slot across schedulers. */
  async tick(): Promise<TickResult[]> {
    if (this.#beforeTick) {
      await this.#beforeTick().catch((err: unknown) =>
        this.#log.warn(
          { event: 'scheduler.sweep_failed', err },
          'orphan sweep failed; the tick goes on and the next one sweeps again',
        ),
      );
    }
    const results = [
      await this.#send(QUEUES.pollSources, this.#tickSeconds),
      await this.#send(QUEUES.reconcile, this.#tickSeconds),
    ];
    this.#log.debug(
      { event: 'scheduler.tick', results },
      `tick: ${results.map((r) => `${r.queue} ${r.status}`).join(', ')}`,
    );
    return results;
  }

  /** backfill: a cheap probe of due gaps most ticks; stately, so one fill runs at a time. */
  async backfillTick(): Promise<TickResult> {
    const result = await this.#send(QUEUES.backfill, this.#tickSeconds);
    this.#log.debug({ event: 'scheduler.tick', results: [result] }, `backfill ${result.status}`);
    return result;
  }

  async maintenanceTick(): Promise<TickResult> {
    const result = await this.#send(QUEUES.maintenance, MAINTENANCE_SECONDS);
    this.#log.debug({ event: 'scheduler.tick', results: [result] }, `maintenance ${result.status}`);
    return result;
  }

  async #send(queue: QueueName, seconds: number): Promise<TickResult> {
    const jobId = await this.#boss.sendThrottled(queue, {}, null, seconds);
    return { queue, jobId, status: jobId ? 'sent' : 'already_queued' };
  }
}
