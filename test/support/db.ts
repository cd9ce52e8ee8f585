import { randomBytes } from 'node:crypto';
import type pg from 'pg';
import { afterAll, beforeAll, inject } from 'vitest';
import { createDb, createPool, type Db } from '../../src/platform/db/pool.ts';
import { adminQuery, withDatabase } from './postgres-server.ts';

export interface TestDatabase {
  /** URL of this file's own database (give it to child processes as DATABASE_URL). */
  url: string;
  name: string;
  pool: pg.Pool;
  db: Db;
  /** Extra pools made for the test (separate sessions); all closed at the end. */
  newPool(max?: number): pg.Pool;
  adminUrl: string;
}

/**
 * Registers beforeAll/afterAll that give the test file its own database cloned from
 * the migrated template. At the end, the file FAILS if any connection to its database
 * is still open beyond the harness's own: a leaked pool, boss or gate connection.
 */
export function useTestDatabase(): TestDatabase {
  const { adminUrl, template, runId } = inject('testDb');
  const name = `gpi_${runId}_${randomBytes(4).toString('hex')}`;
  const extraPools: pg.Pool[] = [];
  const handle = { adminUrl, name, url: withDatabase(adminUrl, name) } as TestDatabase;

  beforeAll(async () => {
    await adminQuery(adminUrl, `CREATE DATABASE ${name} TEMPLATE ${template}`);
    handle.pool = createPool(handle.url, { max: 5, applicationName: 'test-harness' });
    handle.db = createDb(handle.pool);
    handle.newPool = (max = 3) => {
      const p = createPool(handle.url, { max, applicationName: 'test-extra' });
      extraPools.push(p);
      return p;
    };
  });

  afterAll(async () => {
    await Promise.all(extraPools.map((p) => p.end().catch(() => {})));
    await handle.db?.destroy();
    // A pool's end() resolves when its sockets close; the server-side backend may still be
    // listed for a moment after that, so a connection only counts as leaked if it stays. Only
    // client backends count: an autovacuum worker in the database is the server's, not ours.
    const deadline = Date.now() + 2_000;
    let open: Awaited<ReturnType<typeof adminQuery>>;
    for (;;) {
      open = await adminQuery(
        adminUrl,
        `SELECT application_name, state, left(query, 120) AS query FROM pg_stat_activity
         WHERE datname = $1 AND pid <> pg_backend_pid() AND backend_type = 'client backend'`,
        [name],
      );
      if (!open.rowCount || Date.now() > deadline) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    await adminQuery(adminUrl, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    if (open.rowCount) {
      throw new Error(
        `test leaked ${open.rowCount} database connection(s): ${JSON.stringify(open.rows)}`,
      );
    }
  });

  return handle;
}
