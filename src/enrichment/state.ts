import { sql } from 'kysely';
import type { EntityClass } from '../budget/types.ts';
import type { Db } from '../platform/db/pool.ts';
import { ENTITY_TABLES } from '../work/entity.ts';
import { failLeasedAttempt, LEASED_ROWS, settleLeased } from '../work/leased-rows.ts';
import { type Claim, stillOurs } from './claim.ts';

/**
 * The entity state machine (docs/sources-and-budget.md "Enrichment", ADR 0006). Every transition that ends
 * an attempt also clears the lease, and only applies while the lease is still ours: a
 * worker whose lease expired mid-request must not overwrite the row's next owner
 * (src/work/leased-rows.ts, shared with commit fetching).
 *
 *   pending ──200──► enriched ──TTL (age-out sweep)──► pending (refresh, etag kept)
 *   pending ──304──► enriched (enriched_at moved)
 *   pending ──404/410──► gone (terminal)
 *   pending ──5xx/timeout/malformed──► pending (attempts+1, backoff) … ► failed (terminal)
 *   pending ──403/429──► pending (next_attempt_at = retry-at, no penalty)
 */

/** How many enriched rows one sweep turns back into pending refreshes (keeps it short). */
export const AGE_OUT_BATCH = 200;

/**
 * The age-out sweep: enriched rows older than the TTL become pending again — due for a
 * conditional refresh. Their etag, enriched_at and profile stay, which is what makes the
 * refresh a cheap If-None-Match and places it in the claim's second tier.
 */
export async function ageOut(
  db: Db,
  cls: EntityClass,
  opts: { now: Date; ttlSeconds: number; batch?: number },
): Promise<number> {
  const { table } = ENTITY_TABLES[cls];
  const cutoff = new Date(opts.now.getTime() - opts.ttlSeconds * 1000);
  const r = await sql`
    UPDATE ${sql.table(table)} SET
      enrichment_state = 'pending', attempts = 0, next_attempt_at = ${opts.now}, updated_at = ${opts.now}
    WHERE id IN (
      SELECT id FROM ${sql.table(table)}
      WHERE enrichment_state = 'enriched' AND enriched_at < ${cutoff}
      ORDER BY enriched_at
      LIMIT ${opts.batch ?? AGE_OUT_BATCH}
      FOR UPDATE SKIP LOCKED
    )`.execute(db);
  return Number(r.numAffectedRows ?? 0);
}

/** Column values a 200 writes (name column, profile fields, raw profile). */
export type ProfileColumns = Record<string, unknown>;

function transition(db: Db, claim: Claim, set: ReturnType<typeof sql>): Promise<boolean> {
  return settleLeased(db, LEASED_ROWS[claim.class], stillOurs(claim), set);
}

/** 200: store the profile; the entity is enriched and its failure count cleared. */
export function markEnriched(
  db: Db,
  claim: Claim,
  profile: ProfileColumns,
  etag: string | null,
  now: Date,
): Promise<boolean> {
  const assignments = Object.entries(profile).map(
    ([column, value]) => sql`${sql.ref(column)} = ${value}`,
  );
  return transition(
    db,
    claim,
    sql`${sql.join(assignments)}, enrichment_state = 'enriched', attempts = 0, last_error = NULL,
        enriched_at = ${now}, next_attempt_at = ${now}, etag = ${etag}, updated_at = ${now}`,
  );
}

/** 304: the profile we hold is current; only enriched_at moves. */
export function markNotModified(
  db: Db,
  claim: Claim,
  etag: string | null,
  now: Date,
): Promise<boolean> {
  return transition(
    db,
    claim,
    sql`enrichment_state = 'enriched', attempts = 0, last_error = NULL, enriched_at = ${now},
        next_attempt_at = ${now}, etag = COALESCE(${etag}, etag), updated_at = ${now}`,
  );
}

/** 404/410/451: GitHub no longer serves it. Terminal; the last profile we had stays. */
export function markGone(db: Db, claim: Claim, detail: string, now: Date): Promise<boolean> {
  return transition(
    db,
    claim,
    sql`enrichment_state = 'gone', last_error = ${detail}, next_attempt_at = ${now}, updated_at = ${now}`,
  );
}

/**
 * A transient failure (5xx, timeout, malformed body): one more attempt spent. Below the
 * limit the row waits on the backoff ladder; at the limit it is `failed` — terminal, so
 * a permanently broken entity costs at most maxAttempts requests, never a loop.
 */
export function markFailedAttempt(
  db: Db,
  claim: Claim,
  detail: string,
  now: Date,
  maxAttempts: number,
): Promise<{ applied: boolean; terminal: boolean; nextAttemptAt: Date }> {
  return failLeasedAttempt(db, LEASED_ROWS[claim.class], stillOurs(claim), {
    attempts: claim.attempts,
    detail,
    now,
    maxAttempts,
  });
}

/** 403/429: a budget event, not the entity's fault: no attempt is counted against it. */
export function deferUntil(db: Db, claim: Claim, retryAt: Date, now: Date): Promise<boolean> {
  return transition(db, claim, sql`next_attempt_at = ${retryAt}, updated_at = ${now}`);
}
