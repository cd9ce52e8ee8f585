import type pg from 'pg';
import { int4Key, LockSpace } from '../db/locks.ts';
import { createPool } from '../db/pool.ts';
import type { Logger } from '../log.ts';
import { GateTimeout } from './errors.ts';

/**
 * The request gate: one GitHub request in flight per credential across every process
 * (GitHub's secondary limits punish concurrency). A session advisory lock on a dedicated
 * connection — not the app pool, whose connections are shared with transactions — held
 * from just before the request is sent until its answer has been read. If the process
 * dies, its session ends and Postgres releases the lock: nothing to clean up.
 *
 * Inside one process, callers queue on a local FIFO first so that only one of them
 * waits on Postgres (and the dedicated pool never needs more than one connection).
 */
export interface RequestGate {
  /** Runs `fn` holding the gate; waits at most GATE_WAIT_SECONDS in total, else GateTimeout. */
  run<T>(fn: () => Promise<T>): Promise<T>;
  close(): Promise<void>;
}

const LOCK_NOT_AVAILABLE = '55P03';

export function createRequestGate(opts: {
  databaseUrl: string;
  credential: string;
  waitSeconds: number;
  logger: Logger;
}): RequestGate {
  const key = int4Key(opts.credential);
  const waitMs = opts.waitSeconds * 1000;
  let pool: pg.Pool | null = null;
  let tail: Promise<void> = Promise.resolve();
  let closed = false;

  const getPool = () => {
    pool ??= createPool(opts.databaseUrl, {
      max: 1,
      applicationName: 'gpi-gate',
      logger: opts.logger,
    });
    return pool;
  };

  /** Wait for our turn in this process, or give up at the deadline. */
  async function localTurn(deadline: number): Promise<() => void> {
    let release!: () => void;
    const mine = new Promise<void>((r) => {
      release = r;
    });
    const before = tail;
    tail = tail.then(() => mine);
    let timer: NodeJS.Timeout | undefined;
    const timedOut = await Promise.race([
      before.then(() => false),
      new Promise<boolean>((r) => {
        timer = setTimeout(() => r(true), Math.max(0, deadline - Date.now()));
      }),
    ]);
    clearTimeout(timer);
    if (timedOut) {
      // Leave the queue without blocking those behind us: our slot opens once ours would.
      void before.then(release);
      throw new GateTimeout(opts.credential, waitMs);
    }
    return release;
  }

  async function lock(deadline: number): Promise<pg.PoolClient> {
    const client = await getPool().connect();
    try {
      const left = Math.max(1, deadline - Date.now());
      // lock_timeout bounds the wait for the advisory lock held by another process. One
      // round trip on every request: the subquery's set_config runs before the lock that
      // reads its row (github-gate.test.ts times the bound out).
      await client.query(
        `SELECT pg_advisory_lock($1, $2)
           FROM (SELECT set_config('lock_timeout', $3, false)) AS bound`,
        [LockSpace.gate, key, String(Math.ceil(left))],
      );
      return client;
    } catch (err) {
      client.release(
        (err as { code?: string }).code === LOCK_NOT_AVAILABLE ? undefined : (err as Error),
      );
      if ((err as { code?: string }).code === LOCK_NOT_AVAILABLE) {
        throw new GateTimeout(opts.credential, waitMs);
      }
      throw err;
    }
  }

  async function unlock(client: pg.PoolClient): Promise<void> {
    try {
      await client.query('SELECT pg_advisory_unlock($1, $2)', [LockSpace.gate, key]);
      client.release();
    } catch (err) {
      // Destroying the connection ends the session, which releases the lock anyway.
      client.release(err as Error);
      opts.logger.warn(
        { event: 'github.gate_unlock_failed', err },
        'request gate unlock failed; connection dropped',
      );
    }
  }

  return {
    async run<T>(fn: () => Promise<T>): Promise<T> {
      if (closed) throw new Error('request gate is closed');
      const deadline = Date.now() + waitMs;
      const releaseTurn = await localTurn(deadline);
      try {
        const client = await lock(deadline);
        try {
          return await fn();
        } finally {
          await unlock(client);
        }
      } finally {
        releaseTurn();
      }
    },
    async close() {
      closed = true;
      await tail.catch(() => {});
      await pool?.end();
      pool = null;
    },
  };
}
