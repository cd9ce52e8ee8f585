import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import type { Logger } from '../log.ts';
import { PreparingClient } from './prepared.ts';
import type { Database } from './schema.ts';

// bigint (int8) → string stays the pg default; timestamps → Date (pg default).

export interface PoolOptions {
  max?: number;
  applicationName?: string;
  logger?: Logger;
}

/**
 * What every session of ours runs first. No JIT: our statements are short, and a page's
 * merge (CTEs over parameter arrays, estimated blind) passes jit_above_cost once push_events
 * holds some tens of thousands of rows: compiling it took 2.5-4 s of a 5 ms statement, with
 * the credential's request gate held. A SET, not a startup option: PgBouncer
 * refuses startup options it does not know.
 */
export const SESSION_SETUP = 'SET jit = off';

/**
 * pg-pool's onConnect hook: the pool hands a new session out only once this has run, and a
 * failure ends that session and fails the checkout (nothing runs on a session half set up).
 * For a pool built elsewhere (the bench's recording pool) to set its sessions up alike.
 */
export async function setUpSession(client: pg.ClientBase): Promise<void> {
  await client.query(SESSION_SETUP);
}

/**
 * A pg Pool with an 'error' listener (an idle client whose server went away must
 * not crash the process), whose every new session runs SESSION_SETUP before it is handed out.
 */
export function createPool(connectionString: string, opts: PoolOptions = {}): pg.Pool {
  const pool = new pg.Pool({
    // Names the statements written with prepared() (src/platform/db/prepared.ts).
    Client: PreparingClient,
    connectionString,
    max: opts.max ?? 10,
    application_name: opts.applicationName ?? 'github-push-ingestor',
    connectionTimeoutMillis: 10_000,
    idleTimeoutMillis: 30_000,
    onConnect: setUpSession,
  });
  pool.on('error', (err) => {
    opts.logger?.warn(
      { event: 'db.idle_client_error', err: brief(err) },
      'idle database client failed',
    );
  });
  // A client checked out for a long hold (a source lock, the request gate, the setup
  // lock) has no pool listener while out; a dropped connection would then crash the
  // process. The error still surfaces on that client's next query.
  pool.on('connect', (client) => {
    client.on('error', (err) => {
      opts.logger?.warn(
        { event: 'db.client_error', err: brief(err) },
        'database connection failed',
      );
    });
  });
  return pool;
}

/** The parts of a pg error worth logging (the full object drags the whole client along). */
function brief(err: Error & { code?: string }) {
  return { message: err.message, code: err.code };
}

export function createDb(pool: pg.Pool): Kysely<Database> {
  return new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
}

export type Db = Kysely<Database>;
