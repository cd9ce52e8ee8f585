import { createHash } from 'node:crypto';
import { verify } from '@octokit/webhooks-methods';
import type { PgBoss } from 'pg-boss';
import { systemClock } from '../clock.ts';
import type { Deps } from '../deps.ts';
import { ENTITY_CLASSES } from '../enrichment/entity.ts';
import { faultPoint } from '../fault.ts';
import type { EntityClass } from '../github/types.ts';
import { storePushes } from '../ingestion/store.ts';
import { sendCycle } from '../queue/dispatch.ts';
import { recordDelivery, setRouting } from './deliveries.ts';
import { MalformedDelivery, mapPushDelivery } from './push.ts';

/**
 * GitHub webhook intake, persist-then-ack (ADR 0008): verify the signature, then ONE
 * transaction records the delivery id and whatever the delivery stores; only after COMMIT
 * are enrichment hints sent and GitHub answered. A database failure answers 500, so GitHub
 * (or an operator's "Redeliver") sends it again; a redelivery of a committed delivery is a
 * no-op. Transport concerns (content type, body size) are the HTTP route's.
 */

export interface DeliveryRequest {
  deliveryId: string | undefined;
  event: string | undefined;
  /** X-Hub-Signature-256: "sha256=<hex>". */
  signature: string | undefined;
  hookId: string | undefined;
  /** The raw body exactly as received: the signature covers these bytes. */
  rawBody: string;
  /** 'json' or 'form' (payload=<json>, GitHub's application/x-www-form-urlencoded). */
  encoding: 'json' | 'form';
}

export interface DeliveryResponse {
  status: number;
  body: Record<string, unknown>;
}

export type IntakeDeps = Pick<Deps, 'db' | 'logger' | 'clock'> & {
  secret: string;
  /** Absent: no hints are sent; the reconciler finds the new rows on its next tick. */
  boss?: PgBoss;
};

const DELIVERY_ID = /^[\w.:-]{1,100}$/;

function reject(
  deps: IntakeDeps,
  req: DeliveryRequest,
  status: number,
  error: string,
): DeliveryResponse {
  // Never the body or the secret: the delivery id and the reason are what an operator
  // needs to find the delivery in GitHub's "Recent Deliveries".
  deps.logger.warn(
    {
      event: 'webhook.rejected',
      delivery_id: req.deliveryId ?? null,
      gh_event: req.event ?? null,
      status,
      reason: error,
    },
    `webhook delivery ${req.deliveryId ?? '(no id)'} rejected: ${status} ${error}`,
  );
  return { status, body: { error } };
}

function parsePayload(req: DeliveryRequest): unknown {
  const json =
    req.encoding === 'form' ? new URLSearchParams(req.rawBody).get('payload') : req.rawBody;
  if (json === null) throw new SyntaxError('form body has no payload field');
  return JSON.parse(json);
}

function repositoryOf(payload: unknown): { id: number; fullName: string } | null {
  const repo = (payload as { repository?: { id?: unknown; full_name?: unknown } })?.repository;
  if (repo && typeof repo.id === 'number' && typeof repo.full_name === 'string') {
    return { id: repo.id, fullName: repo.full_name };
  }
  return null;
}

export async function receiveDelivery(
  deps: IntakeDeps,
  req: DeliveryRequest,
): Promise<DeliveryResponse> {
  if (!req.signature) return reject(deps, req, 401, 'missing signature');
  if (req.rawBody.length === 0) return reject(deps, req, 400, 'empty body');
  if (!(await verify(deps.secret, req.rawBody, req.signature))) {
    return reject(deps, req, 401, 'bad signature');
  }
  if (!req.deliveryId) return reject(deps, req, 400, 'missing delivery id');
  if (!DELIVERY_ID.test(req.deliveryId)) return reject(deps, req, 400, 'invalid delivery id');
  if (!req.event) return reject(deps, req, 400, 'missing event');

  let payload: unknown;
  try {
    payload = parsePayload(req);
  } catch {
    return reject(deps, req, 400, 'invalid JSON');
  }
  if (payload === null || typeof payload !== 'object') {
    return reject(deps, req, 400, 'payload is not a JSON object');
  }

  const receivedAt = (deps.clock ?? systemClock).now();
  let push: ReturnType<typeof mapPushDelivery> | null = null;
  if (req.event === 'push') {
    try {
      push = mapPushDelivery(payload, receivedAt);
    } catch (err) {
      if (err instanceof MalformedDelivery) return reject(deps, req, 400, err.message);
      throw err;
    }
  }
  const deliveryId = req.deliveryId;
  const event = req.event;
  const action = (payload as { action?: unknown }).action;
  const hookId = Number(req.hookId);

  let outcome: { duplicate: boolean; routing: string; newPending: Record<EntityClass, number> };
  try {
    outcome = await deps.db.transaction().execute(async (trx) => {
      const routing = event === 'push' ? 'push' : event === 'ping' ? 'ping' : `ignored:${event}`;
      const isNew = await recordDelivery(trx, {
        deliveryId,
        event,
        action: typeof action === 'string' ? action : null,
        routing,
        payloadSha256: createHash('sha256').update(req.rawBody).digest('hex'),
        hookId: Number.isSafeInteger(hookId) && hookId > 0 ? hookId : null,
        repository: repositoryOf(payload),
        receivedAt,
      });
      const none = { actor: 0, repository: 0 };
      if (!isNew) return { duplicate: true, routing, newPending: none };
      // Crash window: the delivery row is written but not committed, so a redelivery must
      // find nothing and store the push once (test/recovery/crash-matrix.test.ts).
      faultPoint('webhook.after_delivery_insert');
      if (!push) return { duplicate: false, routing, newPending: none };
      const stored = await storePushes(trx, [push], { origin: 'webhook' });
      // Held already (polled first, or another hook on the same repository): one row.
      const final = stored.created > 0 ? 'push:created' : 'push:known';
      await setRouting(trx, deliveryId, final);
      return {
        duplicate: false,
        routing: final,
        newPending: { actor: stored.newActors, repository: stored.newRepositories },
      };
    });
  } catch (err) {
    deps.logger.error(
      { event: 'webhook.failed', delivery_id: deliveryId, gh_event: event, err },
      `webhook delivery ${deliveryId} not stored; answering 500 so GitHub can redeliver`,
    );
    return { status: 500, body: { error: 'storage unavailable' } };
  }

  if (outcome.duplicate) {
    deps.logger.info(
      { event: 'webhook.duplicate', delivery_id: deliveryId, gh_event: event },
      `webhook delivery ${deliveryId} already recorded; nothing to do`,
    );
    return { status: 200, body: { ok: true, duplicate: true } };
  }

  deps.logger.info(
    {
      event: 'webhook.received',
      delivery_id: deliveryId,
      gh_event: event,
      routing: outcome.routing,
    },
    `webhook delivery ${deliveryId} (${event}) recorded: ${outcome.routing}`,
  );
  await dispatchHints(deps, deliveryId, outcome.newPending);
  if (push) {
    return {
      status: 202,
      body: { ok: true, routing: outcome.routing, created: outcome.routing === 'push:created' },
    };
  }
  return { status: 200, body: { ok: true, routing: outcome.routing } };
}

/**
 * After COMMIT: one cycle hint per class that got new pending rows. A failure here loses
 * a hint, never work: the rows are committed and the reconciler asks the same question
 * every tick. So it is logged, and GitHub still hears success.
 */
async function dispatchHints(
  deps: IntakeDeps,
  deliveryId: string,
  newPending: Record<EntityClass, number>,
): Promise<void> {
  if (!deps.boss) return;
  for (const cls of ENTITY_CLASSES) {
    if (newPending[cls] === 0) continue;
    try {
      const sent = await sendCycle(deps.boss, cls, { reason: 'hint' });
      deps.logger.info(
        {
          event: 'enrichment.dispatched',
          delivery_id: deliveryId,
          class: cls,
          new_pending: newPending[cls],
          status: sent.status,
          enrich_job_id: sent.jobId,
          queue: sent.queue,
        },
        `enrichment hint for webhook delivery ${deliveryId}: ${cls} ${newPending[cls]} new, ${sent.status === 'sent' ? 'cycle sent' : 'cycle already queued'}`,
      );
    } catch (err) {
      deps.logger.warn(
        { event: 'webhook.hint_failed', delivery_id: deliveryId, class: cls, err },
        `enrichment hint for webhook delivery ${deliveryId} not sent; the reconciler will pick the rows up`,
      );
    }
  }
}
