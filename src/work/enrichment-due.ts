import { sql } from 'kysely';
import type { EntityClass } from '../budget/types.ts';
import type { EnrichmentState } from '../platform/db/columns.ts';
import type { Db } from '../platform/db/pool.ts';
import { ENTITY_CLASSES, ENTITY_TABLES } from './entity.ts';

/**
 * "Is there enrichment work?" — asked of committed state by the reconciler every tick
 * and by the fairness rule before every reservation, so each question is a range scan on
 * a small partial index (migrations 2026-11-29T0910 and T0930), never a scan of the table.
 *
 * Due work is (a) pending rows whose next_attempt_at has come and whose lease is free or
 * expired, and (b) enriched rows older than the TTL, which the next cycle's age-out sweep
 * turns into pending refreshes. (b) needs the TTL: pass config.enrichment.ttlSeconds;
 * without it the default ENRICH_TTL (7 days) is assumed.
 */

export const DEFAULT_TTL_SECONDS = 7 * 86400;

function pendingDue(cls: EntityClass, now: Date) {
  const { table } = ENTITY_TABLES[cls];
  return sql`
    SELECT 1 FROM ${sql.table(table)}
    WHERE enrichment_state = 'pending' AND next_attempt_at <= ${now}
      AND (claimed_until IS NULL OR claimed_until <= ${now})`;
}

function agedOut(cls: EntityClass, now: Date, ttlSeconds: number) {
  const { table } = ENTITY_TABLES[cls];
  const cutoff = new Date(now.getTime() - ttlSeconds * 1000);
  return sql`
    SELECT 1 FROM ${sql.table(table)}
    WHERE enrichment_state = 'enriched' AND enriched_at < ${cutoff}`;
}

/** The "any due work?" question as a statement (exported so a test can EXPLAIN it). */
export function dueStatement(cls: EntityClass, now: Date, ttlSeconds: number) {
  return sql<{ due: boolean }>`
    SELECT EXISTS (${pendingDue(cls, now)}) OR EXISTS (${agedOut(cls, now, ttlSeconds)}) AS due`;
}

/** True when a cycle of `cls` would find something to do. */
export async function hasDueWork(
  db: Db,
  cls: EntityClass,
  now: Date = new Date(),
  ttlSeconds: number = DEFAULT_TTL_SECONDS,
): Promise<boolean> {
  const r = await dueStatement(cls, now, ttlSeconds).execute(db);
  return r.rows[0]!.due;
}

/** How many entities of `cls` are due now (pending and due, plus refreshes the TTL has made due). */
export async function countDue(
  db: Db,
  cls: EntityClass,
  now: Date = new Date(),
  ttlSeconds: number = DEFAULT_TTL_SECONDS,
): Promise<number> {
  const r = await countDueStatement(cls, now, ttlSeconds).execute(db);
  return Number(r.rows[0]!.n);
}

/**
 * countDue as a statement (exported so a test can EXPLAIN it). O(backlog), but both halves
 * are index-only counts: `*_pending` carries claimed_until as an INCLUDE column (migration
 * 2026-11-29T0930) and `*_age_out` is keyed on enriched_at.
 */
export function countDueStatement(cls: EntityClass, now: Date, ttlSeconds: number) {
  return sql<{ n: string }>`
    SELECT (SELECT count(*) FROM (${pendingDue(cls, now)}) p)
         + (SELECT count(*) FROM (${agedOut(cls, now, ttlSeconds)}) a) AS n`;
}

export type Backlog = Record<
  EntityClass,
  Record<EnrichmentState, number> & { due: number; claimed: number }
>;

/**
 * Counts per class and state for the status page, plus how many are due now and how
 * many are under a live lease. (The per-state counts read the whole table: fine for a
 * status page, not for a hot path.)
 */
export async function backlog(
  db: Db,
  now: Date = new Date(),
  ttlSeconds: number = DEFAULT_TTL_SECONDS,
): Promise<Backlog> {
  const out = {} as Backlog;
  for (const cls of ENTITY_CLASSES) {
    const { table } = ENTITY_TABLES[cls];
    const r = await sql<{ state: EnrichmentState; n: string; claimed: string }>`
      SELECT enrichment_state AS state, count(*) AS n,
             count(*) FILTER (WHERE claimed_until > ${now}) AS claimed
      FROM ${sql.table(table)} GROUP BY enrichment_state`.execute(db);
    const counts = { pending: 0, enriched: 0, failed: 0, gone: 0, due: 0, claimed: 0 };
    for (const row of r.rows) {
      counts[row.state] = Number(row.n);
      counts.claimed += Number(row.claimed);
    }
    counts.due = await countDue(db, cls, now, ttlSeconds);
    out[cls] = counts;
  }
  return out;
}
