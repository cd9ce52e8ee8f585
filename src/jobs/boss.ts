import { PgBoss, type Queue } from 'pg-boss';
import type { Config } from '../platform/config/config.ts';
import type { Logger } from '../platform/log.ts';
import { QUEUES, type QueueName } from './queue-names.ts';

/**
 * pg-boss in its own schema (PGBOSS_SCHEMA) of the business database. bin/setup installs
 * and migrates it (installQueues); every other process starts with `migrate: false`, so a
 * rolling deploy never races a schema migration: an old worker meeting a newer schema, or
 * a new worker meeting an older one, fails its start with pg-boss's version check instead.
 *
 * pg-boss is never joined to a business transaction (ADR 0007): a job only ever says
 * "look at the tables"; the tables say what to do.
 */

/** Longest a single GitHub attempt can take once started: gate wait + connect + response. */
export function attemptWorstCaseSeconds(config: Config): number {
  const { gateWaitSeconds, connectTimeoutMs, responseTimeoutMs } = config.github;
  return gateWaitSeconds + Math.ceil((connectTimeoutMs + responseTimeoutMs) / 1000);
}

/**
 * How long an enrichment cycle keeps claiming entities before it hands over to a fresh job
 * (checked between entities, never mid-request). Bounds the job so its expiry can be tight.
 */
export const CYCLE_MAX_SECONDS = 120;
/** ...and how many entities at most, so one class cannot hold its queue for a whole budget. */
export const CYCLE_MAX_ENTITIES = 50;
/** Maintenance works in batches until done or this many seconds have passed. */
export const MAINTENANCE_MAX_SECONDS = 240;
/**
 * A backfill job starts no new gap after this long (the gap in flight finishes its hours;
 * every chunk is checkpointed, so an expired or stopped job loses nothing).
 */
export const BACKFILL_MAX_SECONDS = 600;

/**
 * The backstop behind the orphan sweep, which fails a dead worker's job as soon
 * as its liveness lock is gone: a worker whose session survives but whose event loop is
 * wedged stops heartbeating, and pg-boss's monitor fails its job within about heartbeat +
 * supervise interval. 30 s is comfortably above the 15 s refresh pg-boss uses (half).
 */
export const HEARTBEAT_SECONDS = 30;

export interface QueueDefinition extends Omit<Queue, 'name'> {
  name: QueueName;
  policy: 'stately';
  retryLimit: 0;
  /** Why this queue is configured the way it is (printed by nothing; read by reviewers). */
  why: string;
}

/**
 * The seven queues and their policies. Every queue is `stately` (at most one job queued and
 * one active): a hint arriving while a cycle runs is kept, further ones collapse, and a slow
 * poll never has ticks piling up behind it. The tick queues are also sent throttled (one
 * job per TICK_SECONDS slot, see scheduler), so several schedulers never double a tick.
 * `retryLimit: 0` everywhere: the business ledgers are the retry ladders, the next tick
 * is the retry.
 */
export function queueDefinitions(config: Config): QueueDefinition[] {
  const attempt = attemptWorstCaseSeconds(config);
  const common = { policy: 'stately', retryLimit: 0, heartbeatSeconds: HEARTBEAT_SECONDS } as const;
  const tick = { ...common, retentionSeconds: 3600, deleteAfterSeconds: 86_400 };
  const cycle = {
    ...common,
    // The cycle stops claiming after CYCLE_MAX_SECONDS; the entity in flight then may still
    // take one attempt's worst case; the rest is margin for the database work around it.
    expireInSeconds: CYCLE_MAX_SECONDS + attempt + 30,
    retentionSeconds: 86_400,
    deleteAfterSeconds: 86_400,
  };
  return [
    {
      name: QUEUES.pollSources,
      ...tick,
      // Each due source is up to three pages, each up to one attempt's worst case, and the
      // request gate serializes them even when a few sources poll at once;
      // 15 minutes covers ten sources at their worst. An expired poll
      // is harmless (its sources stay locked by the run still holding them).
      expireInSeconds: 900,
      why: 'tick: polls every due source under its lock',
    },
    { name: QUEUES.enrichActor, ...cycle, why: 'one actor cycle queued + one active' },
    { name: QUEUES.enrichRepository, ...cycle, why: 'one repository cycle queued + one active' },
    {
      name: QUEUES.reconcile,
      ...tick,
      expireInSeconds: 60,
      why: 'tick: a handful of indexed queries',
    },
    {
      name: QUEUES.maintenance,
      ...tick,
      expireInSeconds: MAINTENANCE_MAX_SECONDS + 60,
      why: 'hourly: batched prune, time-boxed',
    },
    {
      name: QUEUES.backfill,
      ...tick,
      // A gap is ~5 archive hours of ~100 MB each; an hour takes seconds to minutes to
      // download. An expired fill is harmless: its checkpoints and the gap lock say where it was.
      expireInSeconds: BACKFILL_MAX_SECONDS + 3000,
      why: 'tick: fills open gaps from GH Archive, one download at a time (stately)',
    },
    { name: QUEUES.fetchCommits, ...cycle, why: 'one commits cycle queued + one active' },
  ];
}

export interface CreateBossOptions {
  /** Only bin/setup (and the test template) migrates. */
  migrate?: boolean;
  /** Shows in pg_stat_activity and the pg-boss instance registry. */
  role?: string;
  max?: number;
  /** Run pg-boss's monitor (expiry, heartbeat checks, retention). Workers do; setup doesn't. */
  supervise?: boolean;
}

/**
 * A PgBoss with its error and warning listeners attached: pg-boss emits `error` for
 * failures in its background loops, and an EventEmitter `error` nobody listens to would
 * crash the process.
 */
export function createBoss(
  databaseUrl: string,
  config: Config,
  logger: Logger,
  opts: CreateBossOptions = {},
): PgBoss {
  const role = opts.role ?? 'worker';
  const boss = new PgBoss({
    connectionString: databaseUrl,
    schema: config.pgbossSchema,
    migrate: opts.migrate ?? false,
    // The scheduler is croner (src/scheduler); pg-boss's own cron stays off.
    schedule: false,
    supervise: opts.supervise ?? true,
    max: opts.max ?? 4,
    application_name: `gpi-${role}-boss`,
    instanceName: role,
    registerInstance: opts.supervise ?? true,
  });
  boss.on('error', (err) => {
    logger.error({ event: 'queue.error', err }, `pg-boss: ${err.message}`);
  });
  boss.on('warning', (w) => {
    logger.warn({ event: 'queue.warning', detail: w.data }, `pg-boss: ${w.message}`);
  });
  return boss;
}

/**
 * Installs or migrates the pg-boss schema and converges the queues on
 * queueDefinitions(). Idempotent. The caller serializes concurrent setups (withSetupLock);
 * pg-boss also takes its own advisory lock around its migration.
 */
export async function installPgBoss(
  databaseUrl: string,
  config: Config,
  logger: Logger,
): Promise<{ created: QueueName[]; updated: QueueName[] }> {
  const boss = createBoss(databaseUrl, config, logger, {
    migrate: true,
    role: 'setup',
    max: 2,
    supervise: false,
  });
  await boss.start();
  const created: QueueName[] = [];
  const updated: QueueName[] = [];
  try {
    for (const { name, why: _why, ...options } of queueDefinitions(config)) {
      const existing = await boss.getQueue(name);
      if (!existing) {
        await boss.createQueue(name, options);
        created.push(name);
        continue;
      }
      if (existing.policy !== options.policy) {
        // pg-boss cannot change a policy in place; say so instead of pretending.
        logger.warn(
          { event: 'setup.queue_policy_mismatch', queue: name, policy: existing.policy },
          `queue ${name} has policy ${existing.policy}, expected ${options.policy}: delete the queue and run setup again`,
        );
      }
      const { policy: _policy, ...mutable } = options;
      const current = existing as unknown as Record<string, unknown>;
      if (Object.entries(mutable).every(([k, v]) => current[k] === v)) continue;
      await boss.updateQueue(name, mutable);
      updated.push(name);
    }
  } finally {
    await boss.stop({ graceful: false });
  }
  return { created, updated };
}

/**
 * What pg-boss needs of the process that runs it: the database, the configuration and the
 * logger. An App (src/app.ts) is one; the queue layer never needs the rest of it.
 */
export interface BossHost {
  databaseUrl: string;
  config: Config;
  logger: Logger;
}

/** bin/setup's step: pg-boss schema and queues, on the app's database. */
export async function installQueues(
  app: BossHost,
): Promise<{ created: QueueName[]; updated: QueueName[] }> {
  const { created, updated } = await installPgBoss(app.databaseUrl, app.config, app.logger);
  // At info only when something changed: a setup that finds everything in place is quiet.
  app.logger[created.length + updated.length > 0 ? 'info' : 'debug'](
    { event: 'setup.queues', schema: app.config.pgbossSchema, created, updated },
    `pg-boss schema ${app.config.pgbossSchema}: ${created.length} queue(s) created, ${updated.length} updated`,
  );
  return { created, updated };
}
