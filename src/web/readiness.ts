import net from 'node:net';
import { sql } from 'kysely';
import pg from 'pg';
import type { Config } from '../platform/config/config.ts';
import { pendingMigrations } from '../platform/db/migrate.ts';
import { createDb, type Db } from '../platform/db/pool.ts';
import { pgBossInstalled } from '../platform/db/setup-state.ts';
import type { IntakeHealth } from './intake-health.ts';

export type Readiness = { ready: true } | { ready: false; reason: string };

/** How long /readyz waits for the database before it says 503. */
export const READINESS_TIMEOUT_MS = 2_000;

/** How the check's own connection shows in pg_stat_activity. */
export const READINESS_APPLICATION_NAME = 'github-push-ingestor readyz';

/**
 * GET /readyz: can this deployment do its work? The database answers, every migration
 * has run (an old web in front of a newer schema, or the reverse, must not take traffic),
 * bin/setup has installed pg-boss, and, with WEBHOOK_SECRET set, webhook intake can store
 * (src/web/intake-health.ts). The first failing check is the reason.
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

export interface ReadinessProbe {
  /** The answer within `timeoutMs`, whatever the database does; concurrent callers share one check. */
  check(): Promise<Readiness>;
}

export interface ReadinessProbeOptions {
  config: Pick<Config, 'pgbossSchema'>;
  /**
   * The check opens its own connection on this URL for each check, with connect and
   * statement timeouts, and cuts it when done, so a frozen server costs one socket at a
   * time. Without one, the check runs on `db` (bounded by the deadline, not by timeouts).
   */
  databaseUrl?: string;
  db: Db;
  timeoutMs?: number;
  /** Webhook intake's own check (src/web/intake-health.ts), when the web takes deliveries. */
  intake?: IntakeHealth;
}

/**
 * Readiness that answers in time (a frozen Postgres — SIGSTOP, a lock the check needs, a
 * network black hole — once held /readyz for 28 s and then said 200). One check is in
 * flight at a time and every caller meanwhile shares it, so a hung database cannot pile up
 * connections; each check ends by its deadline, its connection destroyed with it.
 */
export function createReadinessProbe(o: ReadinessProbeOptions): ReadinessProbe {
  const timeoutMs = o.timeoutMs ?? READINESS_TIMEOUT_MS;
  let inFlight: Promise<Readiness> | null = null;

  async function once(): Promise<Readiness> {
    const sockets: net.Socket[] = [];
    const pool = o.databaseUrl
      ? new pg.Pool({
          connectionString: o.databaseUrl,
          max: 1,
          application_name: READINESS_APPLICATION_NAME,
          connectionTimeoutMillis: timeoutMs,
          statement_timeout: timeoutMs,
          lock_timeout: timeoutMs,
          // Our own socket, so a check that ran out of time can be cut at once: a polite
          // close would wait for a frozen server to answer.
          stream: () => {
            const s = new net.Socket();
            sockets.push(s);
            return s;
          },
        })
      : null;
    // A cut or failed connection is the answer (503), never an uncaught 'error'.
    pool?.on('error', () => {});
    pool?.on('connect', (client) => client.on('error', () => {}));
    const db = pool ? createDb(pool) : o.db;
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<Readiness>((resolve) => {
      timer = setTimeout(
        () =>
          resolve({
            ready: false,
            reason: `database unreachable: no answer within ${timeoutMs} ms`,
          }),
        timeoutMs,
      );
    });
    try {
      const r = await Promise.race([checkReadiness(db, o.config), deadline]);
      if (!r.ready || !o.intake) return r;
      const intake = await o.intake.check(timeoutMs);
      return intake ? { ready: false, reason: intake } : r;
    } finally {
      clearTimeout(timer);
      for (const s of sockets) s.destroy();
      if (pool) void pool.end().catch(() => {});
    }
  }

  return {
    check() {
      inFlight ??= once().finally(() => {
        inFlight = null;
      });
      return inFlight;
    },
  };
}
