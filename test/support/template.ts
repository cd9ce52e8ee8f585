import { createDb, createPool } from '../../src/db/pool.ts';
import { migrateToLatest } from '../../src/db/migrate.ts';

/**
 * Builds the migrated template every test database is cloned from: the business
 * schema and (once the queue layer exists) the pg-boss schema, exactly as bin/setup would.
 */
export async function prepareTemplate(url: string): Promise<void> {
  const pool = createPool(url, { max: 2 });
  const db = createDb(pool);
  try {
    await migrateToLatest(db);
  } finally {
    await db.destroy();
  }
}
