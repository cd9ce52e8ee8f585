import { sql } from 'kysely';
import type { EntityClass } from '../budget/types.ts';
import type { EnrichmentState } from '../platform/db/columns.ts';
import type { Db } from '../platform/db/pool.ts';
import { foldTallies } from '../store/tally-fold.ts';
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
 * The entities of `cls` in `state`: their tally plus the deltas not yet folded (migration
 * 2026-12-05T1440: appended by the table's triggers, folded by the maintenance job).
 */
function tallied(cls: EntityClass, state: EnrichmentState) {
  return sql`(SELECT coalesce(sum(entities), 0) FROM (
      SELECT entities FROM entity_tallies WHERE entity = ${cls} AND enrichment_state = ${state}
      UNION ALL
      SELECT entities FROM entity_tally_deltas WHERE entity = ${cls} AND enrichment_state = ${state}
    ) t)`;
}

/** Pending rows under a live lease: a range of `*_leased` (live leases only). */
function leasedPending(cls: EntityClass, now: Date, dueOnly: boolean) {
  const { table } = ENTITY_TABLES[cls];
  return sql`(SELECT count(*) FROM ${sql.table(table)}
    WHERE enrichment_state = 'pending' AND claimed_until IS NOT NULL AND claimed_until > ${now}
      ${dueOnly ? sql`AND next_attempt_at <= ${now}` : sql``})`;
}

/**
 * countDue as a statement (exported so a test can EXPLAIN it): the pending tally less the
 * pending rows that are not due — scheduled later (a range of `*_pending` on
 * next_attempt_at) or due but under a live lease (`*_leased`) — plus the aged-out rows
 * (`*_age_out`). Every count is index-only and bounded by work in flight or waiting on a
 * backoff, not by the backlog: a million new entities are a tally, not a million index
 * entries read.
 */
export function countDueStatement(cls: EntityClass, now: Date, ttlSeconds: number) {
  const { table } = ENTITY_TABLES[cls];
  return sql<{ n: string }>`
    SELECT ${tallied(cls, 'pending')}
         - (SELECT count(*) FROM ${sql.table(table)}
            WHERE enrichment_state = 'pending' AND next_attempt_at > ${now})
         - ${leasedPending(cls, now, true)}
         + (SELECT count(*) FROM (${agedOut(cls, now, ttlSeconds)}) a) AS n`;
}

/** Folds the entity tallies' deltas (src/store/tally-fold.ts); the deltas folded. */
export function foldEntityTallies(db: Db): Promise<number> {
  return foldTallies(db, {
    tallies: 'entity_tallies',
    deltas: 'entity_tally_deltas',
    keys: ['entity', 'enrichment_state'],
    value: 'entities',
  });
}

export type Backlog = Record<
  EntityClass,
  Record<EnrichmentState, number> & { due: number; claimed: number }
>;

/**
 * Counts per class and state for the status page (the tallies), plus how many are due now
 * and how many pending ones are under a live lease (`claimed`: being fetched now; an
 * entity's lease outlives its fetch, and a fetched one is not counted).
 */
export async function backlog(
  db: Db,
  now: Date = new Date(),
  ttlSeconds: number = DEFAULT_TTL_SECONDS,
): Promise<Backlog> {
  const out = {} as Backlog;
  for (const cls of ENTITY_CLASSES) {
    // The tallies and their deltas in one pass, then the counts of work in flight.
    const states = await sql<{ state: EnrichmentState; n: string }>`
      SELECT enrichment_state AS state, sum(entities) AS n FROM (
        SELECT enrichment_state, entities FROM entity_tallies WHERE entity = ${cls}
        UNION ALL
        SELECT enrichment_state, entities FROM entity_tally_deltas WHERE entity = ${cls}
      ) t GROUP BY 1`.execute(db);
    const counts = { pending: 0, enriched: 0, failed: 0, gone: 0, due: 0, claimed: 0 };
    for (const row of states.rows) counts[row.state] = Number(row.n);
    const r = await sql<{ claimed: string; due: string }>`
      SELECT ${leasedPending(cls, now, false)} AS claimed,
        (${countDueStatement(cls, now, ttlSeconds)}) AS due`.execute(db);
    counts.claimed = Number(r.rows[0]!.claimed);
    counts.due = Number(r.rows[0]!.due);
    out[cls] = counts;
  }
  return out;
}
