import { sql } from 'kysely';
import type { Config } from '../config.ts';
import { pendingMigrations } from '../db/migrate.ts';
import type { Db } from '../db/pool.ts';
import { pgBossInstalled } from '../status/queues.ts';

export type Readiness = { ready: true } | { ready: false; reason: string };

/**
 * GET /readyz: can this deployment do its work? The database answers, every migration
 * has run (an old web in front of a newer schema, or the reverse, must not take traffic),
 * and bin/setup has installed pg-boss. The first failing check is the reason.
 */
export async function checkReadiness(
  db: Db,
  config: Pick<Config, 'pgbossSchema'>,
): Promise<Readiness> {
  try {
    await sql`SELECT 1`.execute(db);
  } catch (err) {
    return { ready: false, reason: `database unreachable: ${(err as Error).message}` };
  }
  try {
    const pending = await pendingMigrations(db);
    if (pending.length > 0) {
      return { ready: false, reason: `pending migrations: ${pending.join(', ')} (run bin/setup)` };
    }
    if (!(await pgBossInstalled(db, config.pgbossSchema))) {
      return {
        ready: false,
        reason: `pg-boss schema "${config.pgbossSchema}" is not installed (run bin/setup)`,
      };
    }
  } catch (err) {
    return { ready: false, reason: `readiness check failed: ${(err as Error).message}` };
  }
  return { ready: true };
}
