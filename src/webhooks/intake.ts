import { createHash } from 'node:crypto';
import type { PgBoss } from 'pg-boss';
import type { EntityClass } from '../budget/types.ts';
import { hintCommits } from '../jobs/commits-hint.ts';
import { sendCycle } from '../jobs/dispatch.ts';
import { systemClock } from '../platform/clock.ts';
import type { CommitEmailMode } from '../platform/config/config.ts';
import { sqlState } from '../platform/db/errors.ts';
import { inSavepoint } from '../platform/db/savepoint.ts';
import { faultPoint } from '../platform/fault.ts';
import { MAX_JSON_DEPTH } from '../platform/json/bounded.ts';
import { exactId, JsonTooDeep, JsonTooWide, parseJson } from '../platform/json/exact.ts';
import { inspectJson, storableText } from '../platform/json/walk.ts';
import { textUnderPolicy } from '../store/commit-emails.ts';
import { commitsTargetsFor } from '../store/commits-targets.ts';
import type { PushRow } from '../store/mapping.ts';
import { storePushes } from '../store/pushes.ts';
import { Rejection } from '../store/rules.ts';
import type { Deps } from '../work/deps.ts';
import { ENTITY_CLASSES } from '../work/entity.ts';
import { recordDelivery, setRouting } from './deliveries.ts';
import { EVENT_NAME, routingFor } from './events.ts';
import { mapPushDelivery } from './push.ts';
import { verifySignature } from './signature.ts';

/**
 * GitHub webhook intake, persist-then-ack (ADR 0008): verify the signature over the raw
 * bytes, then ONE transaction records the delivery id and whatever the delivery stores;
 * only after COMMIT are enrichment hints sent and GitHub answered.
 *
 * Answers: content never earns a 5xx. A signed, parseable delivery whose push cannot be
 * stored is recorded as `rejected:<reason>` and answered 422 (a 2xx would tell GitHub we
 * hold a push we do not). 500 only when the database did not answer, so the delivery can
 * be sent again. A redelivery of a recorded delivery is answered as a duplicate — except
 * one that was rejected, which is judged again (a fixed version may store it now).
 */

export interface DeliveryRequest {
  deliveryId: string | undefined;
  event: string | undefined;
  /** X-Hub-Signature-256: "sha256=<hex>". */
  signature: string | undefined;
  hookId: string | undefined;
  /** The raw body exactly as received: the signature covers these bytes. */
  rawBody: Buffer;
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
  /** COMMIT_EMAILS for the delivery's commits (default hash). */
  commitEmails?: CommitEmailMode;
  /** No credential in this process (commitsOffReason): covered pushes wait for one. */
  commitsOff?: boolean;
};

const DELIVERY_ID = /^[\w.:-]{1,100}$/;

/** The X-GitHub-Delivery header when it looks like one, else null: what a log line may show. */
export function loggableDeliveryId(raw: string | undefined): string | null {
  return raw !== undefined && DELIVERY_ID.test(raw) ? raw : null;
}

function reject(
  deps: IntakeDeps,
  req: Pick<DeliveryRequest, 'deliveryId' | 'event'>,
  status: number,
  error: string,
  extra: Record<string, unknown> = {},
): DeliveryResponse {
  // Never the body or the secret: the delivery id and the reason are what an operator
  // needs to find the delivery in GitHub's "Recent Deliveries".
  const deliveryId = loggableDeliveryId(req.deliveryId);
  const event = req.event && EVENT_NAME.test(req.event) ? req.event : null;
  deps.logger.warn(
    {
      event: 'webhook.rejected',
      delivery_id: deliveryId,
      gh_event: event,
      status,
      reason: error,
      ...extra,
    },
    `webhook delivery ${deliveryId ?? '(no id)'} rejected: ${status} ${error}`,
  );
  return { status, body: { error, ...extra } };
}

const UTF8 = new TextDecoder('utf-8', { fatal: true });

/** The JSON text of the delivery, or null when it is not there (not UTF-8, no payload field). */
function payloadText(req: DeliveryRequest): string | null {
  let text: string;
  try {
    text = UTF8.decode(req.rawBody);
  } catch {
    return null;
  }
  return req.encoding === 'form' ? new URLSearchParams(text).get('payload') : text;
}

const tooDeep = () =>
  new Rejection('too_deep', `payload is nested deeper than ${MAX_JSON_DEPTH} levels`);

type Verdict =
  | { kind: 'push'; push: PushRow }
  | { kind: 'rejected'; rejection: Rejection }
  | { kind: 'other' };

function judge(event: string, payload: unknown, receivedAt: Date): Verdict {
  if (payload === null || typeof payload !== 'object' || Array.isArray(payload)) {
    return {
      kind: 'rejected',
      rejection: new Rejection('not_an_object', 'payload must be a JSON object'),
    };
  }
  // Nothing GitHub sends nests this deep; judge it the same whichever parser path read it.
  if (inspectJson(payload, MAX_JSON_DEPTH).tooDeep) {
    return { kind: 'rejected', rejection: tooDeep() };
  }
  if (event !== 'push') return { kind: 'other' };
  try {
    return { kind: 'push', push: mapPushDelivery(payload as Record<string, unknown>, receivedAt) };
  } catch (err) {
    if (err instanceof Rejection) return { kind: 'rejected', rejection: err };
    throw err;
  }
}

/** What webhook_deliveries keeps besides the routing: bounded, storable, exact ids. */
function coordinates(payload: unknown): {
  action: string | null;
  repository: { id: string | null; fullName: string | null } | null;
} {
  const o =
    payload !== null && typeof payload === 'object' ? (payload as Record<string, unknown>) : {};
  const action = typeof o.action === 'string' ? storableText(o.action.slice(0, 100)) : null;
  const repo =
    o.repository !== null && typeof o.repository === 'object'
      ? (o.repository as Record<string, unknown>)
      : null;
  if (!repo) return { action, repository: null };
  const fullName =
    typeof repo.full_name === 'string' ? storableText(repo.full_name.slice(0, 512)) : null;
  return { action, repository: { id: exactId(repo.id), fullName } };
}

interface Outcome {
  status: number;
  routing: string;
  detail: string | null;
  duplicate: boolean;
  mismatch: boolean;
  reprocessed: boolean;
  newPending: Record<EntityClass, number>;
  /** 1 when the push was stored pending its commits (a fetch-commits hint after COMMIT). */
  commitsPending?: number;
}

const NONE = { actor: 0, repository: 0 };

export async function receiveDelivery(
  deps: IntakeDeps,
  req: DeliveryRequest,
): Promise<DeliveryResponse> {
  if (!req.signature) return reject(deps, req, 401, 'missing signature');
  if (req.rawBody.length === 0) return reject(deps, req, 400, 'empty body');
  if (!verifySignature(deps.secret, req.rawBody, req.signature)) {
    return reject(deps, req, 401, 'bad signature');
  }
  if (!req.deliveryId) return reject(deps, req, 400, 'missing delivery id');
  if (!DELIVERY_ID.test(req.deliveryId)) return reject(deps, req, 400, 'invalid delivery id');
  if (!req.event) return reject(deps, req, 400, 'missing event');
  if (!EVENT_NAME.test(req.event)) return reject(deps, req, 400, 'invalid event name');

  const text = payloadText(req);
  if (text === null) return reject(deps, req, 400, 'invalid JSON: not UTF-8, or no payload field');
  const receivedAt = (deps.clock ?? systemClock).now();
  let payload: unknown = null;
  let verdict: Verdict | null = null;
  try {
    payload = parseJson(text);
  } catch (err) {
    // Only the parser's own answers: a bug in judging below is a 500, never "invalid JSON".
    if (err instanceof SyntaxError) return reject(deps, req, 400, 'invalid JSON');
    if (err instanceof JsonTooWide) {
      verdict = {
        kind: 'rejected',
        rejection: new Rejection('too_wide', `payload ${err.message}`),
      };
    } else if (err instanceof JsonTooDeep) verdict = { kind: 'rejected', rejection: tooDeep() };
    else throw err;
  }
  verdict ??= judge(req.event, payload, receivedAt);

  const deliveryId = req.deliveryId;
  const event = req.event;
  const hookId = exactId(req.hookId ?? '');
  const sha = createHash('sha256').update(req.rawBody).digest('hex');
  const record = (routing: string, detail: string | null) => ({
    deliveryId,
    event,
    ...coordinates(payload),
    routing,
    detail,
    payloadSha256: sha,
    hookId: hookId === '0' ? null : hookId,
    receivedAt,
  });

  const emails = deps.commitEmails ?? 'hash';
  let outcome: Outcome;
  try {
    // Who gets commits: the process's cached targets, read before the transaction (and
    // inside this try: a database that cannot answer is the same 500 as a failed store).
    const commits =
      verdict.kind === 'push'
        ? {
            targets: await commitsTargetsFor(deps.commitsOff === true, deps.db),
            emails,
          }
        : undefined;
    outcome = await deps.db.transaction().execute(async (trx): Promise<Outcome> => {
      const provisional =
        verdict.kind === 'push'
          ? 'push'
          : verdict.kind === 'rejected'
            ? `rejected:${verdict.rejection.reason}`
            : routingFor(event);
      // Why it was rejected may quote the delivery: kept and logged under COMMIT_EMAILS.
      const detail =
        verdict.kind === 'rejected' ? textUnderPolicy(verdict.rejection.message, emails) : null;
      const rec = await recordDelivery(trx, record(provisional, detail));
      const base = {
        duplicate: !rec.isNew,
        mismatch: rec.mismatch,
        reprocessed: false,
        newPending: NONE,
      };
      // A redelivery is a duplicate, unless the first copy was rejected and this very body
      // can be stored now (the rules were fixed between the two).
      const retry = !rec.isNew && rec.routing.startsWith('rejected:') && !rec.mismatch;
      if (!rec.isNew && !(retry && verdict.kind === 'push')) {
        return {
          ...base,
          status: rec.routing.startsWith('rejected:') ? 422 : 200,
          routing: rec.routing,
          detail: rec.detail,
        };
      }
      // Crash window: the delivery row is written but not committed, so a redelivery must
      // find nothing and store the push once (test/recovery/crash-matrix.test.ts).
      faultPoint('webhook.after_delivery_insert');
      if (verdict.kind === 'rejected')
        return { ...base, status: 422, routing: provisional, detail };
      if (verdict.kind === 'other')
        return { ...base, status: 200, routing: provisional, detail: null };
      const attempt = await inSavepoint(trx, () =>
        storePushes(trx, [verdict.push], { origin: 'webhook', commits }),
      );
      if ('refused' in attempt) {
        // The database refused the push itself, for a reason the rules did not foresee: the
        // same body would be refused again, so the delivery is recorded as rejected.
        const err = attempt.refused;
        const refusal = textUnderPolicy(
          `the database refused the push (SQLSTATE ${sqlState(err)}): ${storableText((err as Error).message)}`,
          emails,
        );
        await setRouting(trx, deliveryId, 'rejected:store_failed', refusal);
        return { ...base, status: 422, routing: 'rejected:store_failed', detail: refusal };
      }
      const stored = attempt.ok;
      // Held already (polled first, or another hook on the same repository): one row.
      const final = stored.created > 0 ? 'push:created' : 'push:known';
      await setRouting(trx, deliveryId, final);
      return {
        ...base,
        duplicate: false,
        reprocessed: !rec.isNew,
        status: 202,
        routing: final,
        detail: null,
        newPending: { actor: stored.newActors, repository: stored.newRepositories },
        commitsPending: stored.commitsPending,
      };
    });
  } catch (err) {
    deps.logger.error(
      { event: 'webhook.failed', delivery_id: deliveryId, gh_event: event, err },
      `webhook delivery ${deliveryId} not stored; answering 500 so GitHub can redeliver`,
    );
    return { status: 500, body: { error: 'storage unavailable' } };
  }
  return answer(deps, deliveryId, event, outcome);
}

async function answer(
  deps: IntakeDeps,
  deliveryId: string,
  event: string,
  o: Outcome,
): Promise<DeliveryResponse> {
  if (o.mismatch) {
    deps.logger.warn(
      {
        event: 'webhook.redelivery_mismatch',
        delivery_id: deliveryId,
        gh_event: event,
        routing: o.routing,
      },
      `webhook delivery ${deliveryId} redelivered with a different body; answered as a duplicate, the first copy stands`,
    );
  }
  const rejected = o.routing.startsWith('rejected:');
  if (o.duplicate) {
    deps.logger.info(
      { event: 'webhook.duplicate', delivery_id: deliveryId, gh_event: event, routing: o.routing },
      `webhook delivery ${deliveryId} already recorded (${o.routing}); nothing to do`,
    );
    const body: Record<string, unknown> = { ok: !rejected, duplicate: true };
    if (rejected) Object.assign(body, { routing: o.routing, error: o.detail });
    if (o.mismatch) body.mismatch = true;
    return { status: o.status, body };
  }
  if (rejected) {
    return reject(deps, { deliveryId, event }, 422, o.detail ?? o.routing, {
      routing: o.routing,
      recorded: true,
    });
  }
  deps.logger.info(
    {
      event: 'webhook.received',
      delivery_id: deliveryId,
      gh_event: event,
      routing: o.routing,
      reprocessed: o.reprocessed || undefined,
    },
    `webhook delivery ${deliveryId} (${event}) recorded: ${o.routing}`,
  );
  await dispatchHints(deps, deliveryId, o.newPending);
  await hintCommits(deps.boss, deps.logger, o.commitsPending ?? 0, {
    cause: `webhook delivery ${deliveryId}`,
    deliveryId,
  });
  if (o.status === 202) {
    return {
      status: 202,
      body: {
        ok: true,
        routing: o.routing,
        created: o.routing === 'push:created',
        ...(o.reprocessed ? { reprocessed: true } : {}),
      },
    };
  }
  return { status: 200, body: { ok: true, routing: o.routing } };
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
