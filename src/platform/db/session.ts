import { Kysely, PostgresDialect } from 'kysely';
import type pg from 'pg';
import type { Db } from './pool.ts';
import type { Database } from './schema.ts';

/**
 * A Kysely instance bound to one session the caller holds (its transaction, its advisory
 * locks): statements written with Kysely run where the caller's raw pg statements run, e.g.
 * storeRejectedEvents inside an archive chunk's transaction. It never begins, commits or
 * releases anything: the session stays the caller's.
 */
export function kyselyOn(client: pg.ClientBase): Db {
  const queryable = client as unknown as { query(...args: unknown[]): unknown };
  const borrowed = { query: (...args: unknown[]) => queryable.query(...args), release: () => {} };
  const pool = { connect: async () => borrowed, end: async () => {} };
  const db = new Kysely<Database>({
    dialect: new PostgresDialect({ pool: pool as unknown as pg.Pool }),
  });
  sessions.set(db, client);
  return db;
}

const sessions = new WeakMap<Db, pg.ClientBase>();

/**
 * The session a kyselyOn instance is bound to (undefined for a pool's): a raw statement on
 * it runs in whatever transaction that instance has open, e.g. a prepared statement, which
 * Kysely cannot name.
 */
export function sessionOf(db: Db): pg.ClientBase | undefined {
  return sessions.get(db);
}
