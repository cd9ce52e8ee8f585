import type pg from 'pg';
import type { Clock } from './clock.ts';
import type { Config } from './config.ts';
import type { Db } from './db/pool.ts';
import type { InFlightPlan } from './github/concurrency.ts';
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
  /**
   * How much this process does at once (src/github/concurrency.ts), as createApp planned it
   * and sized the pool for. Absent (tests, benches), a runner plans from its client's
   * credentials and its pool's size.
   */
  inFlight?: InFlightPlan | null;
}
