import { sql } from 'kysely';
import type { Db } from './pool.ts';

/** What the database server has for this process's connections: its connection headroom. */
export interface ConnectionHeadroom {
  /** max_connections. */
  maxConnections: number;
  /** superuser_reserved_connections + reserved_connections: never ours. */
  reserved: number;
  /** Client sessions open now, every database and process, this process's first included. */
  inUse: number;
}

/**
 * What the server has for connections, read once when a process sizes its pool (createApp):
 * max_connections, the slots reserved for superusers (and, from Postgres 16, for
 * pg_use_reserved_connections), and the client sessions open now, of every database —
 * max_connections is the server's, not a database's.
 */
export async function connectionHeadroom(db: Db): Promise<ConnectionHeadroom> {
  const r = await sql<{ max: number; reserved: number; in_use: number }>`
    SELECT current_setting('max_connections')::int AS max,
           current_setting('superuser_reserved_connections')::int
             + coalesce(current_setting('reserved_connections', true)::int, 0) AS reserved,
           (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')::int
             AS in_use`.execute(db);
  const row = r.rows[0]!;
  return { maxConnections: row.max, reserved: row.reserved, inUse: row.in_use };
}
