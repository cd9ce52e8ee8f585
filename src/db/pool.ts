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
 * A pg Pool with an 'error' listener (an idle client whose server went away must
 * not crash the process) and a statement timeout so a wedged query cannot pin a job.
 */
export function createPool(connectionString: string, opts: PoolOptions = {}): pg.Pool {
  const pool = new pg.Pool({
    // Names the statements written with prepared() (src/db/prepared.ts).
    Client: PreparingClient,
    connectionString,
    max: opts.max ?? 10,
    application_name: opts.applicationName ?? 'github-push-ingestor',
    connectionTimeoutMillis: 10_000,
    idleTimeoutMillis: 30_000,
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
