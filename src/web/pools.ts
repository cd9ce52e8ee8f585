import type pg from 'pg';
import { createDb, createPool, type Db } from '../platform/db/pool.ts';
import type { Logger } from '../platform/log.ts';

/**
 * bin/web's connections in three pools (ADR 0185), so that no route can take another's:
 *
 * - intake: webhook deliveries alone. GitHub does not redeliver on its own, so a delivery
 *   must never wait for a connection something else holds;
 * - archive: /archive, behind its gate (src/web/archive-gate.ts): a build holds one for as
 *   long as it reads its hour;
 * - the app pool (createApp's): the status page, /status, /metrics.
 *
 * The process's total (6, or DATABASE_POOL_MAX when lower) is split a third each, at least
 * one each: bin/web opens at least three.
 */

export interface WebPoolSizes {
  app: number;
  intake: number;
  archive: number;
}

export const WEB_POOL_TOTAL = 6;

export function webPoolSizes(total: number): WebPoolSizes {
  const intake = Math.max(1, Math.ceil(total / 3));
  const archive = Math.max(1, Math.floor(total / 3));
  return { intake, archive, app: Math.max(1, total - intake - archive) };
}

export interface WebPool {
  pool: pg.Pool;
  db: Db;
}

export interface WebPools {
  intake: WebPool;
  archive: WebPool;
  close(): Promise<void>;
}

export function createWebPools(
  databaseUrl: string,
  sizes: Pick<WebPoolSizes, 'intake' | 'archive'>,
  logger: Logger,
): WebPools {
  const make = (name: string, max: number): WebPool => {
    const pool = createPool(databaseUrl, { max, applicationName: `gpi-web-${name}`, logger });
    return { pool, db: createDb(pool) };
  };
  const intake = make('intake', sizes.intake);
  const archive = make('archive', sizes.archive);
  return {
    intake,
    archive,
    async close() {
      for (const p of [intake, archive]) {
        await p.db.destroy().catch(() => {});
        if (!p.pool.ending) await p.pool.end().catch(() => {});
      }
    },
  };
}
