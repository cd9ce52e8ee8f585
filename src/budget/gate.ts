import { type RawBuilder, sql } from 'kysely';
import type pg from 'pg';
import { GateTimeout } from '../github/errors.ts';
import { int4Key, LockSpace } from '../platform/db/locks.ts';
import { createPool, type Db } from '../platform/db/pool.ts';
import type { Logger } from '../platform/log.ts';

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
export interface GateStatements<T> {
  /**
   * A statement sent in the SAME round trip (and transaction) as the lock, run once the lock
   * is held: `locked` is a CTE list ending in `locked` (one row); the statement selects FROM
   * it. Its rows are handed to `fn`. Fails as a whole: nothing written, the lock not taken.
   */
  enter?: (locked: RawBuilder<unknown>) => RawBuilder<Record<string, unknown>>;
  /**
   * A statement that also releases the lock, given `fn`'s result: `unlock` is an expression
   * to select once its writes are done (e.g. FROM a data-modifying CTE). null: just unlock.
   */
  leave?: (value: T, unlock: RawBuilder<unknown>) => RawBuilder<unknown> | null;
}

export interface RequestGate {
  /** Runs `fn` holding the gate; waits at most GATE_WAIT_SECONDS in total, else GateTimeout. */
  run<T>(
    fn: (entered: Record<string, unknown>[]) => Promise<T>,
    statements?: GateStatements<T>,
  ): Promise<T>;
  close(): Promise<void>;
}

const LOCK_NOT_AVAILABLE = '55P03';

export function createRequestGate(opts: {
  databaseUrl: string;
  credential: string;
  waitSeconds: number;
  logger: Logger;
  /** Compiles the enter/leave statements (never queried: they run on the gate's own session). */
  db?: Db;
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

  const compile = (q: RawBuilder<unknown>) => {
    if (!opts.db) throw new Error('request gate statements need a db to compile them');
    const c = q.compile(opts.db);
    return { text: c.sql, values: c.parameters as unknown[] };
  };

  async function lock(
    deadline: number,
    enter: GateStatements<unknown>['enter'],
  ): Promise<{ client: pg.PoolClient; rows: Record<string, unknown>[] }> {
    const client = await getPool().connect();
    try {
      const left = String(Math.ceil(Math.max(1, deadline - Date.now())));
      // lock_timeout bounds the wait for the advisory lock held by another process. One
      // round trip on every request: set_config runs before the lock that reads its row
      // (github-gate.test.ts times the bound out), and the caller's statement reads `locked`.
      if (enter) {
        const locked = sql`bound AS (SELECT set_config('lock_timeout', ${left}, false) AS b),
          locked AS (SELECT pg_advisory_lock(${LockSpace.gate}, ${key}) AS l FROM bound)`;
        const r = await client.query(compile(enter(locked)));
        return { client, rows: r.rows };
      }
      await client.query(
        `SELECT pg_advisory_lock($1, $2)
           FROM (SELECT set_config('lock_timeout', $3, false)) AS bound`,
        [LockSpace.gate, key, left],
      );
      return { client, rows: [] };
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

  async function unlock(client: pg.PoolClient, leave: RawBuilder<unknown> | null): Promise<void> {
    try {
      if (leave) await client.query(compile(leave));
      else await client.query('SELECT pg_advisory_unlock($1, $2)', [LockSpace.gate, key]);
      client.release();
    } catch (err) {
      // Destroying the connection ends the session, which releases the lock anyway.
      client.release(err as Error);
      opts.logger.warn(
        { event: 'github.gate_unlock_failed', err },
        'request gate unlock failed; connection dropped',
      );
      // The caller's writes in that statement did not happen: it must know.
      if (leave) throw err;
    }
  }

  return {
    async run<T>(
      fn: (entered: Record<string, unknown>[]) => Promise<T>,
      statements: GateStatements<T> = {},
    ): Promise<T> {
      if (closed) throw new Error('request gate is closed');
      const deadline = Date.now() + waitMs;
      const releaseTurn = await localTurn(deadline);
      try {
        const { client, rows } = await lock(deadline, statements.enter);
        let leave: RawBuilder<unknown> | null = null;
        try {
          const value = await fn(rows);
          const unlockExpr = sql`pg_advisory_unlock(${LockSpace.gate}, ${key})`;
          leave = statements.leave?.(value, unlockExpr) ?? null;
          return value;
        } finally {
          await unlock(client, leave);
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
