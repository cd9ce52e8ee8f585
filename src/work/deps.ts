import type pg from 'pg';
import type { GitHubClient } from '../budget/client-types.ts';
import type { InFlightPlan } from '../budget/concurrency.ts';
import type { Clock } from '../platform/clock.ts';
import type { Config } from '../platform/config/config.ts';
import type { Db } from '../platform/db/pool.ts';
import type { Logger } from '../platform/log.ts';

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
   * How much this process does at once (src/budget/concurrency.ts), as createApp planned it
   * and sized the pool for. Absent (tests, benches), a runner plans from its client's
   * credentials and its pool's size.
   */
  inFlight?: InFlightPlan | null;
}

/** What a step of leased work (an entity's enrichment, a push's commits) is given. */
export type WorkDeps = Pick<Deps, 'config' | 'db' | 'github' | 'logger' | 'workerId' | 'clock'>;
