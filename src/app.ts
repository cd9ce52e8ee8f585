import os from 'node:os';
import type pg from 'pg';
import { type Config, loadConfig } from './config.ts';
import { acquireEmbeddedPostgres, type EmbeddedHandle } from './db/embedded.ts';
import { createDb, createPool, type Db } from './db/pool.ts';
import { assertSetUp } from './db/setup-state.ts';
import { createGitHubClient } from './github/client.ts';
import type { GitHubClient } from './github/types.ts';
import { type Logger, processLogger } from './log.ts';
import { checkStoredSettings, logRecorded } from './stored-settings.ts';

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
  /**
   * What bin/setup must have done before this process can work: 'schema' (the business
   * migrations), 'pgboss' (those and the pg-boss schema), or 'none' (setup itself). A
   * database without it stops the process with "database not set up: run bin/setup".
   */
  requires?: 'none' | 'schema' | 'pgboss';
  /**
   * This process writes pushes or commits: its COMMIT_EMAILS and COMMITS_MAX_PER_PUSH must be
   * the database's (src/stored-settings.ts, ADR 0125), else it stops with exit 2 before work.
   */
  writesStoredData?: boolean;
}

/** Services, whose log should say when the embedded server starts and stops with them. */
const LONG_RUNNING = new Set(['worker', 'web', 'start']);

export async function createApp(opts: CreateAppOptions = {}): Promise<App> {
  const config = opts.config ?? loadConfig();
  const logger = opts.logger ?? processLogger(config);
  const role = opts.role ?? 'app';
  let embedded: EmbeddedHandle | undefined;
  let databaseUrl = config.databaseUrl;
  if (!databaseUrl) {
    // Shared with every other process using it; the last to leave stops it (ADR 0030).
    embedded = await acquireEmbeddedPostgres({
      dataDir: config.dataDir,
      port: config.embeddedPort,
      logger,
      role,
      lifecycleLevel: LONG_RUNNING.has(role) ? 'info' : 'debug',
    });
    databaseUrl = embedded.url;
  }
  const pool = createPool(databaseUrl, {
    max: opts.poolMax ?? 10,
    applicationName: `gpi-${role}`,
    logger,
  });
  const db = createDb(pool);
  const requires = opts.requires ?? 'schema';
  if (requires !== 'none') {
    try {
      await assertSetUp(db, requires === 'pgboss' ? { pgbossSchema: config.pgbossSchema } : {});
      if (opts.writesStoredData) {
        const recorded = await checkStoredSettings(db, config, role);
        if (recorded.length > 0) logRecorded(logger, recorded);
      }
    } catch (err) {
      await db.destroy().catch(() => {});
      await embedded?.release().catch(() => {});
      throw err;
    }
  }
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
        ?.release()
        .catch((err) =>
          logger.warn(
            { event: 'db.embedded_stop_failed', err },
            'stopping embedded Postgres failed',
          ),
        );
    },
  };
}
