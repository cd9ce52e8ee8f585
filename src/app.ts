import os from 'node:os';
import type pg from 'pg';
import { type Config, loadConfig } from './config.ts';
import { type EmbeddedHandle, startEmbeddedPostgres } from './db/embedded.ts';
import { createDb, createPool, type Db } from './db/pool.ts';
import { createGitHubClient } from './github/client.ts';
import type { GitHubClient } from './github/types.ts';
import { createLogger, type Logger } from './log.ts';

/**
 * The composition root: the one place that wires config, database pool, GitHub client
 * and logger (the queue layer adds pg-boss on top in src/queue/boss.ts). Every
 * command and service receives an App (or the parts it needs) from here.
 */
export interface App {
  config: Config;
  logger: Logger;
  databaseUrl: string;
  pool: pg.Pool;
  db: Db;
  github: GitHubClient;
  /** "host:pid" — written to claims and runs so an operator can tell who holds what. */
  workerId: string;
  close(): Promise<void>;
}

export interface CreateAppOptions {
  config?: Config;
  logger?: Logger;
  /** Name that shows up in pg_stat_activity.application_name. */
  role?: string;
  poolMax?: number;
}

export async function createApp(opts: CreateAppOptions = {}): Promise<App> {
  const config = opts.config ?? loadConfig();
  const logger = opts.logger ?? createLogger(config.logLevel);
  let embedded: EmbeddedHandle | undefined;
  let databaseUrl = config.databaseUrl;
  if (!databaseUrl) {
    embedded = await startEmbeddedPostgres({ dataDir: config.dataDir, logger });
    databaseUrl = embedded.url;
  }
  const role = opts.role ?? 'app';
  const pool = createPool(databaseUrl, {
    max: opts.poolMax ?? 10,
    applicationName: `gpi-${role}`,
    logger,
  });
  const db = createDb(pool);
  const github = createGitHubClient({ config, db, databaseUrl, logger });
  let closed = false;
  return {
    config,
    logger,
    databaseUrl,
    pool,
    db,
    github,
    workerId: `${os.hostname()}:${process.pid}`,
    async close() {
      if (closed) return;
      closed = true;
      await github.close().catch((err) => logger.warn({ err }, 'closing GitHub client failed'));
      await db.destroy().catch((err) => logger.warn({ err }, 'closing pool failed'));
      // Kysely ends the pool only if it ever ran a query; a command that used the pool
      // directly (bin/backfill's imports) would otherwise leave its sessions open.
      if (!pool.ending)
        await pool.end().catch((err) => logger.warn({ err }, 'closing pool failed'));
      await embedded
        ?.stop()
        .catch((err) => logger.warn({ err }, 'stopping embedded Postgres failed'));
    },
  };
}
