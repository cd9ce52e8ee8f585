import { loadConfig } from '../../src/config.ts';
import { migrateToLatest } from '../../src/db/migrate.ts';
import { createDb, createPool } from '../../src/db/pool.ts';
import { createLogger } from '../../src/log.ts';
import { installPgBoss } from '../../src/queue/boss.ts';

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
