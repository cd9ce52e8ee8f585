import { randomBytes } from 'node:crypto';
import type pg from 'pg';
import { inject } from 'vitest';
import { createDb, createPool, type Db } from '../../src/platform/db/pool.ts';
import { adminQuery, withDatabase } from './postgres-server.ts';

/**
 * Extra databases for a test that needs a fresh world several times in one file (the crash
 * matrix: one per fault point). Each is cloned from the same migrated template as
 * useTestDatabase() (business schema + pg-boss), named like the harness's so that leftovers
 * of a killed run are dropped by the next run's global setup.
 */
export interface ScratchDatabase {
  url: string;
  name: string;
  pool: pg.Pool;
  db: Db;
  /** Closes the pool and drops the database (FORCE: children may still be dying). */
  drop(): Promise<void>;
}

export async function createScratchDatabase(): Promise<ScratchDatabase> {
  const { adminUrl, template, runId } = inject('testDb');
  const name = `gpi_${runId}_${randomBytes(4).toString('hex')}`;
  await adminQuery(adminUrl, `CREATE DATABASE ${name} TEMPLATE ${template}`);
  const url = withDatabase(adminUrl, name);
  const pool = createPool(url, { max: 3, applicationName: 'test-scratch' });
  const db = createDb(pool);
  return {
    url,
    name,
    pool,
    db,
    async drop() {
      await db.destroy();
      await adminQuery(adminUrl, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    },
  };
}
