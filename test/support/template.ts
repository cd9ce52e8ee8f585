import { installPgBoss } from '../../src/jobs/boss.ts';
import { loadConfig } from '../../src/platform/config/config.ts';
import { migrateToLatest } from '../../src/platform/db/migrate.ts';
import { createDb, createPool } from '../../src/platform/db/pool.ts';
import { createLogger } from '../../src/platform/log.ts';

/**
 * Builds the migrated template every test database is cloned from: the business
 * schema and the pg-boss schema with its queues (default PGBOSS_SCHEMA), exactly as
 * bin/setup would.
 */
export async function prepareTemplate(url: string): Promise<void> {
  const pool = createPool(url, { max: 2 });
  const db = createDb(pool);
  try {
    await migrateToLatest(db);
  } finally {
    await db.destroy();
  }
  await installPgBoss(url, loadConfig({}), createLogger('silent'));
}
