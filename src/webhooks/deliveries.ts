import type { Db } from '../db/pool.ts';

/**
 * webhook_deliveries: one row per X-GitHub-Delivery, inserted first in the delivery's
 * transaction. The primary key does the deduplication: a redelivery's INSERT finds the
 * row (or waits for a concurrent first attempt to commit and then finds it) and the
 * delivery stops there (ADR 0008).
 */

export interface NewDelivery {
  deliveryId: string;
  event: string;
  action: string | null;
  /** Provisional until the payload is stored; see setRouting. */
  routing: string;
  payloadSha256: string;
  hookId: number | null;
  repository: { id: number; fullName: string } | null;
  receivedAt: Date;
}

/** Inserts the delivery; false when this delivery id is already recorded (a redelivery). */
export async function recordDelivery(trx: Db, d: NewDelivery): Promise<boolean> {
  const inserted = await trx
    .insertInto('webhook_deliveries')
    .values({
      delivery_id: d.deliveryId,
      event: d.event,
      action: d.action,
      routing: d.routing,
      payload_sha256: d.payloadSha256,
      hook_id: d.hookId,
      repository_id: d.repository?.id ?? null,
      repository_full_name: d.repository?.fullName ?? null,
      received_at: d.receivedAt,
    })
    .onConflict((oc) => oc.column('delivery_id').doNothing())
    .returning('delivery_id')
    .executeTakeFirst();
  return inserted !== undefined;
}

export async function setRouting(trx: Db, deliveryId: string, routing: string): Promise<void> {
  await trx
    .updateTable('webhook_deliveries')
    .set({ routing })
    .where('delivery_id', '=', deliveryId)
    .execute();
}
