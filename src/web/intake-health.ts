import { sql } from 'kysely';
import type pg from 'pg';
import type { Db } from '../platform/db/pool.ts';

/**
 * Whether webhook intake can store a delivery now, for /readyz (ADR 0185). GitHub does not
 * redeliver on its own, so a web that answers deliveries 500 must say so where a load balancer
 * or an operator looks, not only in its log. Three signs, the first that holds is the reason:
 *
 * - intake's pool has every connection busy and deliveries waiting for one;
 * - a connection of intake's pool cannot be had, or the database takes no writes
 *   (a read-only server), within the readiness deadline;
 * - the last delivery was answered 500 "storage unavailable", less than RECENT_MS ago, with
 *   none stored since. It expires: a web taken out of rotation gets no delivery to prove
 *   itself again, and the active check above speaks for it then.
 */

export const RECENT_MS = 60_000;

export interface IntakeHealth {
  noteStored(): void;
  noteFailed(at: Date): void;
  /** null when intake can store, else why not. */
  check(timeoutMs: number): Promise<string | null>;
}

export function createIntakeHealth(o: {
  db: Db;
  /** The pool `db` runs on, when intake has one of its own (its load is read, not waited on). */
  pool?: pg.Pool;
  now?: () => Date;
}): IntakeHealth {
  const now = o.now ?? (() => new Date());
  let failedAt: Date | null = null;

  return {
    noteStored() {
      failedAt = null;
    },
    noteFailed(at) {
      failedAt = at;
    },
    async check(timeoutMs) {
      const p = o.pool;
      if (p && p.waitingCount > 0 && p.idleCount === 0 && p.totalCount >= (p.options.max ?? 10)) {
        return `webhook intake cannot store now: all ${p.totalCount} of its database connections are busy and ${p.waitingCount} deliveries wait for one`;
      }
      let timer: NodeJS.Timeout | undefined;
      const deadline = new Promise<string>((resolve) => {
        timer = setTimeout(
          () =>
            resolve(
              `webhook intake cannot store now: no database connection of its own within ${timeoutMs} ms`,
            ),
          timeoutMs,
        );
      });
      const probe = (async () => {
        try {
          const r = await sql<{ ro: string }>`
            SELECT current_setting('transaction_read_only') AS ro`.execute(o.db);
          if (r.rows[0]?.ro === 'on') {
            return 'webhook intake cannot store: the database takes no writes (read-only)';
          }
          return null;
        } catch (err) {
          return `webhook intake cannot store: ${(err as Error).message}`;
        }
      })();
      let verdict: string | null;
      try {
        verdict = await Promise.race([probe, deadline]);
      } finally {
        clearTimeout(timer);
      }
      if (verdict) return verdict;
      if (failedAt && now().getTime() - failedAt.getTime() < RECENT_MS) {
        return `webhook intake could not store its last delivery (${failedAt.toISOString()}, answered 500 "storage unavailable"); none stored since`;
      }
      return null;
    },
  };
}
