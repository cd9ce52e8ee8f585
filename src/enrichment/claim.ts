import { sql } from 'kysely';
import type { EntityClass } from '../budget/types.ts';
import type { Db } from '../platform/db/pool.ts';
import { ENTITY_TABLES } from '../work/entity.ts';
import { writeIfOurs } from '../work/leased-rows.ts';

/**
 * Claiming the next due entity of a class under a lease (ADR 0006).
 *
 * The lease (`claimed_until`, `claimed_by`) is the only thing a claim writes: a worker
 * that dies mid-fetch leaves a lease that simply expires, and the row is due again —
 * there is no cleanup code. `FOR UPDATE SKIP LOCKED` keeps two claimers from ever
 * picking the same row; the lease keeps a later claimer off it while the request runs.
 * Two claimers may be two processes or two lanes of one cycle: lanes share a
 * workerId, but stillOurs also names the entity and the lease's end, so a lane can only
 * ever write the row it claimed.
 */

export interface Claim {
  class: EntityClass;
  /** GitHub's id as a decimal string (64-bit; never a JS number). */
  id: string;
  /** login or full_name as stored when claimed. */
  name: string;
  etag: string | null;
  attempts: number;
  /** true when the row holds a profile already (a TTL refresh, not a first fetch). */
  refresh: boolean;
  workerId: string;
  leaseUntil: Date;
  /**
   * The lease columns as they were before the claim, as Postgres text, so that a
   * release puts back exactly what was there (a JS Date would drop the microseconds).
   */
  previous: { claimedUntil: string | null; claimedBy: string | null };
}

export interface ClaimOptions {
  now: Date;
  leaseSeconds: number;
  workerId: string;
}

// The policy, in order: never-enriched pending rows (oldest due first), then refreshes.
// Each tier matches one partial index of migration 2026-11-29T0910 exactly.
const TIERS = [
  { refresh: false, predicate: sql`enriched_at IS NULL` },
  { refresh: true, predicate: sql`enriched_at IS NOT NULL` },
] as const;

interface ClaimRow {
  id: string;
  name: string;
  etag: string | null;
  attempts: number;
  prev_until: string | null;
  prev_by: string | null;
}

/** The claim of one tier as a statement (exported so a test can EXPLAIN it). */
export function claimStatement(
  cls: EntityClass,
  refresh: boolean,
  leaseUntil: Date,
  opts: ClaimOptions,
) {
  const { table, nameColumn } = ENTITY_TABLES[cls];
  const tier = TIERS[refresh ? 1 : 0];
  return sql<ClaimRow>`
    UPDATE ${sql.table(table)} AS t
    SET claimed_until = ${leaseUntil}, claimed_by = ${opts.workerId}
    FROM (
      SELECT id, claimed_until::text AS prev_until, claimed_by AS prev_by
      FROM ${sql.table(table)}
      WHERE enrichment_state = 'pending' AND ${tier.predicate}
        AND next_attempt_at <= ${opts.now}
        AND (claimed_until IS NULL OR claimed_until <= ${opts.now})
      ORDER BY next_attempt_at, first_seen_at
      LIMIT 1
      FOR UPDATE SKIP LOCKED
    ) AS c
    WHERE t.id = c.id
    RETURNING t.id, t.${sql.ref(nameColumn)} AS name, t.etag, t.attempts, c.prev_until, c.prev_by`;
}

/** Claims the next due entity of `cls`, or returns null when none is due. */
export async function claimNext(
  db: Db,
  cls: EntityClass,
  opts: ClaimOptions,
): Promise<Claim | null> {
  const leaseUntil = new Date(opts.now.getTime() + opts.leaseSeconds * 1000);
  for (const tier of TIERS) {
    const r = await claimStatement(cls, tier.refresh, leaseUntil, opts).execute(db);
    const row = r.rows[0];
    if (row) {
      return {
        class: cls,
        id: row.id,
        name: row.name,
        etag: row.etag,
        attempts: row.attempts,
        refresh: tier.refresh,
        workerId: opts.workerId,
        leaseUntil,
        previous: { claimedUntil: row.prev_until, claimedBy: row.prev_by },
      };
    }
  }
  return null;
}

/** The WHERE that proves a claim is still ours (our worker, our lease, not re-claimed since). */
export function stillOurs(claim: Claim) {
  return sql`id = ${claim.id} AND claimed_by = ${claim.workerId} AND claimed_until = ${claim.leaseUntil}`;
}

/**
 * Gives a claim back untouched: the lease columns return to what they held before, so
 * the row is byte-for-byte what it was (used when the budget says no). Returns false
 * when the lease was no longer ours (it expired and someone else took the row).
 */
export function releaseClaim(db: Db, claim: Claim): Promise<boolean> {
  return writeIfOurs(
    db,
    ENTITY_TABLES[claim.class].table,
    stillOurs(claim),
    sql`claimed_until = ${claim.previous.claimedUntil}::timestamptz,
        claimed_by = ${claim.previous.claimedBy}`,
  );
}
