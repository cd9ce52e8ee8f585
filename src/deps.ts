import type pg from 'pg';
import type { Clock } from './clock.ts';
import type { Config } from './config.ts';
import type { Db } from './db/pool.ts';
import type { GitHubClient } from './github/types.ts';
import type { Logger } from './log.ts';

/**
 * What domain services need. `App` (src/app.ts) satisfies it; tests build one from
 * their own database, a fake GitHub and a test logger.
 */
export interface Deps {
  config: Config;
  db: Db;
  pool: pg.Pool;
  github: GitHubClient;
  logger: Logger;
  workerId: string;
  clock?: Clock;
}
