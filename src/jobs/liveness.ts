import pg from 'pg';
import { int4Key, LockSpace } from '../platform/db/locks.ts';
import type { Logger } from '../platform/log.ts';

/**
 * Proof of life for the jobs a worker is running (ADR 0011). One dedicated connection per
 * worker process — its liveness session — holds a session advisory lock per running job
 * (LockSpace.job, int4Key(job id)) from the moment the handler starts until it ends. The
 * lock lives exactly as long as the process: a SIGKILL ends the session and Postgres drops
 * every lock it held, so an `active` job whose lock nobody holds has no worker, and the
 * orphan sweep (src/jobs/orphaned-jobs.ts) fails it at once instead of letting it hold
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

/**
 * How long opening the liveness session may take. A job's hold() waits on that connect, so
 * a server that accepts the socket and never answers must not hold it for the OS's own
 * timeout; the job runs unmarked instead and the reconnect keeps trying in the background.
 */
export const LIVENESS_CONNECT_TIMEOUT_MS = 5_000;

/** A connected liveness session and the jobs whose lock it has taken (once each). */
interface Session {
  client: pg.Client;
  locked: Set<string>;
  /** The last query sent: the next one waits for it (see query()). */
  tail: Promise<unknown>;
}

/**
 * A query on the session, after the ones before it. Jobs start and end concurrently, and one
 * pg.Client must not be handed a query while it is executing another (pg queues it today,
 * with a DeprecationWarning at every worker start, and pg 9 will not).
 */
function query<R extends pg.QueryResultRow>(
  session: Session,
  text: string,
  values: unknown[],
): Promise<pg.QueryResult<R>> {
  const next = session.tail.then(
    () => session.client.query<R>(text, values),
    () => session.client.query<R>(text, values),
  );
  session.tail = next.catch(() => {});
  return next;
}

export function jobLockKey(jobId: string): number {
  return int4Key(jobId);
}

export class JobLiveness {
  readonly #databaseUrl: string;
  readonly #log: Logger;
  readonly #held = new Set<string>();
  #session: Session | null = null;
  #connecting: Promise<Session> | null = null;
  #reconnect: NodeJS.Timeout | undefined;
  #closed = false;

  constructor(databaseUrl: string, logger: Logger) {
    this.#databaseUrl = databaseUrl;
    this.#log = logger.child({ component: 'liveness' });
  }

  /** Opens the liveness session. Call before the worker can fetch a job. */
  async start(): Promise<void> {
    await this.#open();
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
      // A session opened by this call has already locked the job (#connect locks all of
      // #held); #lock takes it only if this session has not.
      await this.#lock(await this.#open(), jobId);
    } catch (err) {
      // The job stays in #held: the reconnect takes its lock. Scheduled here too, since the
      // session may have dropped while no job ran (then its 'end' scheduled nothing).
      this.#scheduleReconnect(1000);
      this.#log.warn(
        { event: 'worker.liveness_lost', job_id: jobId, err: brief(err) },
        'could not mark the job as running (liveness session down); it is marked again on reconnect',
      );
    }
  }

  async release(jobId: string): Promise<void> {
    if (!this.#held.delete(jobId)) return;
    const session = this.#session;
    // No session, or this one never took the lock: nothing of this job's is held. (A
    // session still connecting unlocks what left #held once it is up.)
    if (!session) return;
    await unlock(session, jobId);
  }

  /** Ends the session (after the last job has ended): every lock it still held goes with it. */
  async stop(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#reconnect);
    const session = this.#session ?? (await this.#connecting?.catch(() => null));
    this.#session = null;
    await session?.client.end().catch(() => {});
  }

  #scheduleReconnect(delayMs: number): void {
    if (this.#reconnect || this.#closed) return;
    this.#reconnect = setTimeout(() => {
      this.#reconnect = undefined;
      if (this.#closed || this.#session || this.#held.size === 0) return;
      this.#open().catch(() => this.#scheduleReconnect(Math.min(delayMs * 2, 10_000)));
    }, delayMs);
    this.#reconnect.unref();
  }

  #open(): Promise<Session> {
    if (this.#closed) return Promise.reject(new Error('liveness session closed'));
    if (this.#session) return Promise.resolve(this.#session);
    this.#connecting ??= this.#connect().finally(() => {
      this.#connecting = null;
    });
    return this.#connecting;
  }

  /**
   * Takes a held job's lock on this session unless it already has. Advisory locks stack
   * within a session, so a second take would survive the job's one unlock.
   */
  async #lock(session: Session, jobId: string): Promise<void> {
    if (session.locked.has(jobId) || !this.#held.has(jobId)) return;
    // A try-lock: the only way it says no is another live job whose id hashes the same,
    // and then that job's lock keeps this one alive too until one of them ends.
    const r = await query<{ ok: boolean }>(session, 'SELECT pg_try_advisory_lock($1, $2) AS ok', [
      LockSpace.job,
      jobLockKey(jobId),
    ]);
    if (!r.rows[0]?.ok) return;
    session.locked.add(jobId);
    // Released while the lock was being taken: its release found nothing to unlock.
    if (!this.#held.has(jobId)) await unlock(session, jobId);
  }

  async #connect(): Promise<Session> {
    // Named only after it holds the locks of the jobs already running (see the header).
    const client = new pg.Client({
      connectionString: this.#databaseUrl,
      application_name: `${LIVENESS_APPLICATION_NAME}-connecting`,
      keepAlive: true,
      connectionTimeoutMillis: LIVENESS_CONNECT_TIMEOUT_MS,
    });
    const session: Session = { client, locked: new Set(), tail: Promise.resolve() };
    const lost = () => {
      if (this.#session !== session) return;
      this.#session = null;
      // The running jobs' locks went with the session: take them again as soon as the
      // database answers, not at the next job start.
      if (!this.#closed && this.#held.size > 0) this.#scheduleReconnect(1000);
    };
    // The session is gone at its 'error', not only at its 'end': pg refuses every query
    // after an 'error', and the server's FATAL (a terminated backend) comes before its
    // socket closes, as far apart as the server is slow. A job marked between the two would
    // be given the dead session, and run unmarked until the reconnect.
    client.on('error', (err) => {
      lost();
      if (!this.#closed) {
        this.#log.warn(
          { event: 'worker.liveness_lost', err: brief(err) },
          'liveness session lost; reconnecting',
        );
      }
    });
    client.on('end', lost);
    await client.connect();
    try {
      await query(
        session,
        `SELECT set_config('tcp_keepalives_idle', $1, false),
                set_config('tcp_keepalives_interval', $2, false),
                set_config('tcp_keepalives_count', $3, false)`,
        [String(KEEPALIVE.idle), String(KEEPALIVE.interval), String(KEEPALIVE.count)],
      );
      // A job marked while this loop runs is visited too (Set iteration sees additions).
      for (const jobId of this.#held) await this.#lock(session, jobId);
      await query(session, `SELECT set_config('application_name', $1, false)`, [
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
    this.#session = session;
    // Jobs that ended while this session was connecting: their release found no session,
    // so their lock (if this session took it) is dropped here. From now on release() sees
    // the session and unlocks by itself.
    for (const jobId of session.locked) {
      if (!this.#held.has(jobId)) void unlock(session, jobId);
    }
    return session;
  }
}

/** Drops the job's lock if this session holds it. Never fails: a dead session has none. */
async function unlock(session: Session, jobId: string): Promise<void> {
  if (!session.locked.delete(jobId)) return;
  await query(session, 'SELECT pg_advisory_unlock($1, $2)', [
    LockSpace.job,
    jobLockKey(jobId),
  ]).catch(() => {
    // The session is gone, and its locks with it.
  });
}

function brief(err: unknown) {
  const e = err as { message?: string; code?: string };
  return { message: e?.message ?? String(err), code: e?.code };
}
