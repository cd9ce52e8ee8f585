import pg from 'pg';
import { int4Key, LockSpace } from '../db/locks.ts';
import type { Logger } from '../log.ts';

/**
 * Proof of life for the jobs a worker is running (ADR 0011). One dedicated connection per
 * worker process — its liveness session — holds a session advisory lock per running job
 * (LockSpace.job, int4Key(job id)) from the moment the handler starts until it ends. The
 * lock lives exactly as long as the process: a SIGKILL ends the session and Postgres drops
 * every lock it held, so an `active` job whose lock nobody holds has no worker, and the
 * orphan sweep (src/reconcile/orphaned-jobs.ts) fails it at once instead of letting it hold
 * its stately queue until pg-boss's heartbeat expiry.
 *
 * The session is opened before the worker fetches its first job, and it is named
 * LIVENESS_APPLICATION_NAME only once it holds the locks of every job it runs: the sweep
 * reads the oldest such session's backend_start as "every live worker started after this",
 * so a job that started before it belongs to nobody alive.
 */

export const LIVENESS_APPLICATION_NAME = 'gpi-job-liveness';

/**
 * A server-side keepalive for the liveness session: a worker lost without a FIN (a VM
 * pulled, a cable cut) is noticed by Postgres in about idle + interval × count seconds,
 * rather than the OS default of two hours, and its locks go with the session.
 */
const KEEPALIVE = { idle: 10, interval: 5, count: 3 } as const;

export function jobLockKey(jobId: string): number {
  return int4Key(jobId);
}

export class JobLiveness {
  readonly #databaseUrl: string;
  readonly #log: Logger;
  readonly #held = new Set<string>();
  #client: pg.Client | null = null;
  #connecting: Promise<pg.Client> | null = null;
  #reconnect: NodeJS.Timeout | undefined;
  #closed = false;

  constructor(databaseUrl: string, logger: Logger) {
    this.#databaseUrl = databaseUrl;
    this.#log = logger.child({ component: 'liveness' });
  }

  /** Opens the liveness session. Call before the worker can fetch a job. */
  async start(): Promise<void> {
    await this.#session();
  }

  /** Jobs this process holds a lock for right now (tests, logs). */
  get held(): ReadonlySet<string> {
    return this.#held;
  }

  /**
   * Marks a job as running here. Never fails the job: if the session is down (database
   * restart) the lock is taken again as soon as it is back, and meanwhile the worst a
   * sweep can do is fail a job that is still running — which the domain locks make
   * harmless (a second poll finds its sources busy; a second cycle claims other entities).
   */
  async hold(jobId: string): Promise<void> {
    this.#held.add(jobId);
    try {
      const client = await this.#session();
      // A try-lock: the only way it says no is another live job whose id hashes the same,
      // and then that job's lock keeps this one alive too until one of them ends.
      await client.query('SELECT pg_try_advisory_lock($1, $2)', [LockSpace.job, jobLockKey(jobId)]);
    } catch (err) {
      this.#log.warn(
        { event: 'worker.liveness_lost', job_id: jobId, err: brief(err) },
        'could not mark the job as running (liveness session down); it is marked again on reconnect',
      );
    }
  }

  async release(jobId: string): Promise<void> {
    if (!this.#held.delete(jobId)) return;
    const client = this.#client;
    if (!client) return;
    await client
      .query('SELECT pg_advisory_unlock($1, $2)', [LockSpace.job, jobLockKey(jobId)])
      .catch(() => {
        // The session is gone, and its locks with it.
      });
  }

  /** Ends the session (after the last job has ended): every lock it still held goes with it. */
  async stop(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#reconnect);
    const client = this.#client ?? (await this.#connecting?.catch(() => null));
    this.#client = null;
    await client?.end().catch(() => {});
  }

  #scheduleReconnect(delayMs: number): void {
    if (this.#reconnect || this.#closed) return;
    this.#reconnect = setTimeout(() => {
      this.#reconnect = undefined;
      if (this.#closed || this.#client || this.#held.size === 0) return;
      this.#session().catch(() => this.#scheduleReconnect(Math.min(delayMs * 2, 10_000)));
    }, delayMs);
    this.#reconnect.unref();
  }

  #session(): Promise<pg.Client> {
    if (this.#closed) return Promise.reject(new Error('liveness session closed'));
    if (this.#client) return Promise.resolve(this.#client);
    this.#connecting ??= this.#connect().finally(() => {
      this.#connecting = null;
    });
    return this.#connecting;
  }

  async #connect(): Promise<pg.Client> {
    // Named only after it holds the locks of the jobs already running (see the header).
    const client = new pg.Client({
      connectionString: this.#databaseUrl,
      application_name: `${LIVENESS_APPLICATION_NAME}-connecting`,
      keepAlive: true,
    });
    client.on('error', (err) => {
      if (!this.#closed) {
        this.#log.warn(
          { event: 'worker.liveness_lost', err: brief(err) },
          'liveness session lost; reconnecting',
        );
      }
    });
    client.on('end', () => {
      if (this.#client !== client) return;
      this.#client = null;
      // The running jobs' locks went with the session: take them again as soon as the
      // database answers, not at the next job start.
      if (!this.#closed && this.#held.size > 0) this.#scheduleReconnect(1000);
    });
    await client.connect();
    try {
      await client.query(
        `SELECT set_config('tcp_keepalives_idle', $1, false),
                set_config('tcp_keepalives_interval', $2, false),
                set_config('tcp_keepalives_count', $3, false)`,
        [String(KEEPALIVE.idle), String(KEEPALIVE.interval), String(KEEPALIVE.count)],
      );
      for (const jobId of this.#held) {
        await client.query('SELECT pg_try_advisory_lock($1, $2)', [
          LockSpace.job,
          jobLockKey(jobId),
        ]);
      }
      await client.query(`SELECT set_config('application_name', $1, false)`, [
        LIVENESS_APPLICATION_NAME,
      ]);
    } catch (err) {
      await client.end().catch(() => {});
      throw err;
    }
    if (this.#closed) {
      await client.end().catch(() => {});
      throw new Error('liveness session closed');
    }
    this.#client = client;
    return client;
  }
}

function brief(err: unknown) {
  const e = err as { message?: string; code?: string };
  return { message: e?.message ?? String(err), code: e?.code };
}
