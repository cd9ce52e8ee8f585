import { sql } from 'kysely';
import type { Db } from '../platform/db/pool.ts';

/**
 * webhook_deliveries: one row per X-GitHub-Delivery, inserted first in the delivery's
 * transaction (ADR 0008). The primary key does the deduplication: a redelivery's INSERT
 * finds the row (or waits for a concurrent first attempt to commit and then finds it),
 * counts itself as a redelivery — apart, when its body differs from the first one's — and
 * stops there.
 */

export interface NewDelivery {
  deliveryId: string;
  event: string;
  action: string | null;
  /** Provisional until the payload is stored; see setRouting. */
  routing: string;
  detail: string | null;
  payloadSha256: string;
  hookId: string | null;
  repository: { id: string | null; fullName: string | null } | null;
  receivedAt: Date;
}

export interface RecordedDelivery {
  /** false: this delivery id was already recorded (a redelivery). */
  isNew: boolean;
  /** The routing and detail as recorded (the first delivery's, for a redelivery). */
  routing: string;
  detail: string | null;
  /** A redelivery whose body hash differs from the first delivery's. */
  mismatch: boolean;
}

/** Inserts the delivery, or counts a redelivery of one already recorded. */
export async function recordDelivery(trx: Db, d: NewDelivery): Promise<RecordedDelivery> {
  const r = await sql<{
    inserted: boolean;
    routing: string;
    detail: string | null;
    first_sha: string;
  }>`
    INSERT INTO webhook_deliveries AS w
      (delivery_id, event, action, routing, detail, payload_sha256, hook_id,
       repository_id, repository_full_name, received_at)
    VALUES (${d.deliveryId}, ${d.event}, ${d.action}, ${d.routing}, ${d.detail}, ${d.payloadSha256},
            ${d.hookId}::bigint, ${d.repository?.id ?? null}::bigint, ${d.repository?.fullName ?? null},
            ${d.receivedAt})
    ON CONFLICT (delivery_id) DO UPDATE SET
      redeliveries = w.redeliveries + 1,
      redelivery_mismatches = w.redelivery_mismatches + (w.payload_sha256 <> excluded.payload_sha256)::int,
      last_redelivered_at = excluded.received_at
    RETURNING (xmax = 0) AS inserted, routing, detail, payload_sha256 AS first_sha`.execute(trx);
  const row = r.rows[0]!;
  return {
    isNew: row.inserted,
    routing: row.routing,
    detail: row.detail,
    mismatch: !row.inserted && row.first_sha !== d.payloadSha256,
  };
}

export async function setRouting(
  trx: Db,
  deliveryId: string,
  routing: string,
  detail: string | null = null,
): Promise<void> {
  await trx
    .updateTable('webhook_deliveries')
    .set({ routing, detail })
    .where('delivery_id', '=', deliveryId)
    .execute();
}
