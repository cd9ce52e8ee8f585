import type { Db } from '../platform/db/pool.ts';
import type { EnrichmentAttemptOutcome } from '../platform/db/schema.ts';
import { redact } from '../platform/redact.ts';
import type { Claim } from './claim.ts';

/**
 * enrichment_attempts: one row per attempt, opened just before the request is sent
 * (outcome NULL) and finished in the same transaction that applies its result. A worker
 * that dies in between leaves the row open; the next claim of that entity marks it
 * 'interrupted', so the ledger tells crashes apart from failures without a janitor.
 */

export async function openAttempt(
  db: Db,
  claim: Claim,
  meta: { now: Date; jobId?: string | null },
): Promise<number> {
  return db.transaction().execute(async (trx) => {
    await trx
      .updateTable('enrichment_attempts')
      .set({
        outcome: 'interrupted',
        finished_at: meta.now,
        detail: 'worker stopped before the attempt finished',
      })
      .where('class', '=', claim.class)
      .where('entity_id', '=', String(claim.id))
      .where('outcome', 'is', null)
      .execute();
    const row = await trx
      .insertInto('enrichment_attempts')
      .values({
        class: claim.class,
        entity_id: claim.id,
        attempt: claim.attempts + 1,
        started_at: meta.now,
        job_id: meta.jobId ?? null,
        worker: claim.workerId,
      })
      .returning('id')
      .executeTakeFirstOrThrow();
    return Number(row.id);
  });
}

export async function finishAttempt(
  db: Db,
  attemptId: number,
  result: {
    outcome: EnrichmentAttemptOutcome;
    httpStatus?: number | null;
    detail?: string | null;
    requestId?: number | null;
    now: Date;
  },
): Promise<void> {
  await db
    .updateTable('enrichment_attempts')
    .set({
      outcome: result.outcome,
      http_status: result.httpStatus ?? null,
      detail: result.detail ? redact(result.detail) : null,
      request_id: result.requestId ?? null,
      finished_at: result.now,
    })
    .where('id', '=', String(attemptId))
    .execute();
}
