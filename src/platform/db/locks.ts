import { createHash } from 'node:crypto';
import { type RawBuilder, sql } from 'kysely';
import type pg from 'pg';
import type { Db } from './pool.ts';

/**
 * Advisory lock namespaces (the first int4 of the two-key form). Keep them unique:
 * every cross-process exclusion in the project is listed here.
 */
export const LockSpace = {
  /** bin/setup: migrations and pg-boss install, held for the session. */
  setup: 7301,
  /** One poll of a source at a time (objid = source id), held for the session. */
  source: 7302,
  /** The request gate: one request in flight per credential (objid = credentialKey). */
  gate: 7303,
  /** Budget reservation: transaction-scoped, serializes count + insert per credential. */
  budget: 7304,
  /**
   * A pg-boss job being run (objid = int4Key(job id)), held by its worker's liveness session
   * for as long as the handler runs: an active job whose lock nobody holds has no worker.
   */
  job: 7305,
  /**
   * Embedded Postgres holders (objid 0), in its `postgres` database: every process using
   * it holds this shared for its lifetime; the last to leave takes it exclusively and stops
   * the server.
   */
  embeddedHolders: 7306,
  /** One import of a (file, scope) at a time (objid = int4Key of both), held for the session. */
  backfillFile: 7307,
  /** One fill of a gap at a time (objid = gap id), held for the session. */
  gap: 7308,
} as const;

/** A stable int4 for a string (credential fingerprint, etc.). */
export function int4Key(s: string): number {
  return createHash('sha256').update(s).digest().readInt32BE(0);
}

/** Session-level try-lock on a dedicated client (the lock lives as long as the session). */
export async function tryLockSession(
  client: pg.ClientBase,
  space: number,
  id: number,
): Promise<boolean> {
  const r = await client.query<{ ok: boolean }>('SELECT pg_try_advisory_lock($1, $2) AS ok', [
    space,
    id,
  ]);
  return r.rows[0]!.ok;
}

export async function unlockSession(
  client: pg.ClientBase,
  space: number,
  id: number,
): Promise<boolean> {
  const r = await client.query<{ ok: boolean }>('SELECT pg_advisory_unlock($1, $2) AS ok', [
    space,
    id,
  ]);
  return r.rows[0]!.ok;
}

/**
 * SQL: is the two-key advisory lock (space, key) held by some session of this database?
 * pg_locks is cluster-wide, so the database filter keeps another database's lock on the same
 * key from counting. `key` may be a column expression (one lock per row of a query).
 */
export function lockHeldSql(space: number, key: number | RawBuilder<unknown>) {
  return sql<boolean>`EXISTS (
    SELECT 1 FROM pg_locks l
    WHERE l.locktype = 'advisory' AND l.granted
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND l.classid = ${space}::int::oid AND l.objid = (${key})::int::oid AND l.objsubid = 2)`;
}

/** Is the lock held by any session of this database right now? */
export async function isLockHeld(db: Db, space: number, id: number): Promise<boolean> {
  const r = await sql<{ held: boolean }>`SELECT ${lockHeldSql(space, id)} AS held`.execute(db);
  return r.rows[0]!.held;
}
