import os from 'node:os';
import type pg from 'pg';
import { createGitHubClient } from './budget/client.ts';
import type { GitHubClient } from './budget/client-types.ts';
import {
  fitToServer,
  type InFlightPlan,
  inFlightPlan,
  isPlanRole,
  type PlanRole,
} from './budget/concurrency.ts';
import { credentialLabels } from './github/credentials.ts';
import { type Config, loadConfig } from './platform/config/config.ts';
import {
  adoptStoredSettings,
  checkStoredSettings,
  logRecorded,
} from './platform/config/stored-settings.ts';
import { type ConnectionHeadroom, connectionHeadroom } from './platform/db/connections.ts';
import { acquireEmbeddedPostgres, type EmbeddedHandle } from './platform/db/embedded.ts';
import { createDb, createPool, type Db } from './platform/db/pool.ts';
import { assertSetUp } from './platform/db/setup-state.ts';
import { type Logger, processLogger } from './platform/log.ts';
import { logConfigWarnings } from './work/config-checks.ts';

/**
 * The composition root: the one place that wires config, database pool, GitHub client
 * and logger (the queue layer adds pg-boss on top in src/jobs/boss.ts). Every
 * command and service receives an App (or the parts it needs) from here.
 */
export interface App {
  config: Config;
  logger: Logger;
  databaseUrl: string;
  pool: pg.Pool;
  db: Db;
  github: GitHubClient;
  /**
   * What this process does at once and the pool it sized for it: for the roles
   * that poll or fetch (worker, start, ingest, enrich, commits); null for the others.
   */
  inFlight: InFlightPlan | null;
  /** "host:pid" — written to claims and runs so an operator can tell who holds what. */
  workerId: string;
  close(): Promise<void>;
}

export interface CreateAppOptions {
  config?: Config;
  logger?: Logger;
  /** Name that shows up in pg_stat_activity.application_name. */
  role?: string;
  /**
   * The pool of a role without an in-flight plan (web, setup, the CLIs). A role with one
   * (worker, start, ingest, enrich, commits) sizes its pool from its credentials instead
   * (src/budget/concurrency.ts), and this, when given, caps it as DATABASE_POOL_MAX does.
   */
  poolMax?: number;
  /**
   * What bin/setup must have done before this process can work: 'schema' (the business
   * migrations), 'pgboss' (those and the pg-boss schema), or 'none' (setup itself). A
   * database without it stops the process with "database not set up: run bin/setup".
   */
  requires?: 'none' | 'schema' | 'pgboss';
  /**
   * This process writes pushes or commits: its COMMIT_EMAILS and COMMITS_MAX_PER_PUSH must be
   * the database's (src/platform/config/stored-settings.ts), else it stops with exit 2 before work.
   */
  writesStoredData?: boolean;
  /** What the server has for connections, when the caller knows it (tests): no probe then. */
  connectionHeadroom?: ConnectionHeadroom;
}

/** Services, whose log should say when the embedded server starts and stops with them. */
const LONG_RUNNING = new Set(['worker', 'web', 'start']);

export async function createApp(opts: CreateAppOptions = {}): Promise<App> {
  let config = opts.config ?? loadConfig();
  const logger = opts.logger ?? processLogger(config);
  const role = opts.role ?? 'app';
  let embedded: EmbeddedHandle | undefined;
  let databaseUrl = config.databaseUrl;
  if (!databaseUrl) {
    // Shared with every other process using it; the last to leave stops it.
    embedded = await acquireEmbeddedPostgres({
      dataDir: config.dataDir,
      port: config.embeddedPort,
      logger,
      role,
      lifecycleLevel: LONG_RUNNING.has(role) ? 'info' : 'debug',
    });
    databaseUrl = embedded.url;
  }
  const planRole = isPlanRole(role) ? role : null;
  // A process that spends the budget says at start what its settings starve.
  if (planRole) logConfigWarnings(logger, config);
  const cap = minOf(config.databasePoolMax, planRole ? opts.poolMax : undefined);
  const credentials = credentialLabels(config);
  // Until the server says what it has: the plan within DATABASE_POOL_MAX alone.
  let inFlight = planRole ? inFlightPlan({ credentials, role: planRole, poolMax: cap }) : null;
  const pool = createPool(databaseUrl, {
    max: inFlight?.dbPool ?? minOf(config.databasePoolMax, opts.poolMax) ?? 10,
    applicationName: `gpi-${role}`,
    logger,
  });
  const db = createDb(pool);
  const requires = opts.requires ?? 'schema';
  try {
    if (requires !== 'none') {
      await assertSetUp(db, requires === 'pgboss' ? { pgbossSchema: config.pgbossSchema } : {});
      if (opts.writesStoredData) {
        config = await adoptStoredSettings(db, config);
        const recorded = await checkStoredSettings(db, config, role);
        if (recorded.length > 0) logRecorded(logger, recorded);
      }
    }
    if (planRole) {
      const server = opts.connectionHeadroom ?? (await connectionHeadroom(db));
      inFlight = planWithinServer(server, config, planRole, credentials, cap, logger);
      // pg's pool reads its max at every checkout; nothing has been checked out but the probe.
      pool.options.max = inFlight.dbPool;
    }
  } catch (err) {
    await db.destroy().catch(() => {});
    await embedded?.release().catch(() => {});
    throw err;
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
    inFlight,
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

function minOf(a: number | undefined, b: number | undefined): number | undefined {
  if (a === undefined) return b;
  return b === undefined ? a : Math.min(a, b);
}

/**
 * The in-flight plan within what the server has: max_connections less the reserved slots,
 * the sessions open now and a headroom for what starts later (src/budget/concurrency.ts,
 * fitToServer). Logged once, so an operator sees the numbers the process runs with.
 */
function planWithinServer(
  server: ConnectionHeadroom,
  config: Config,
  role: PlanRole,
  credentials: string[],
  cap: number | undefined,
  logger: Logger,
): InFlightPlan {
  const app = config.github.mode === 'live' && config.github.app !== null;
  const { plan, headroomCap } = fitToServer({ credentials, role, poolMax: cap, app }, server);
  const fields = {
    event: 'app.in_flight_plan',
    role,
    credentials: plan.credentials.rest,
    polls: plan.polls,
    fetchers_rest: plan.fetchers.rest,
    fetchers_graphql: plan.fetchers.graphql,
    db_pool: plan.dbPool,
    wanted_pool: plan.wantedPool,
    limited_by: plan.limitedBy,
    pool_cap: cap ?? null,
    max_connections: server.maxConnections,
    connections_in_use: server.inUse,
    room: headroomCap,
  };
  const line = `${role}: ${plan.polls} poll(s) and ${plan.fetchers.rest + plan.fetchers.graphql} fetcher(s) in flight on ${plan.credentials.rest} credential(s), database pool ${plan.dbPool}`;
  if (plan.limitedBy === 'credentials') logger.debug(fields, line);
  else {
    const why =
      cap !== undefined && cap < headroomCap
        ? `DATABASE_POOL_MAX=${cap}`
        : `max_connections=${server.maxConnections} with ${server.inUse} open`;
    logger.warn(
      fields,
      `${line} (the credentials ask for ${plan.wantedPool}; ${why} allows no more)`,
    );
  }
  return plan;
}
