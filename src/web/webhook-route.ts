import type http from 'node:http';
import { quoted } from '../platform/quote.ts';
import { commitsOffReason } from '../store/commits-targets.ts';
import { loggableDeliveryId, receiveDelivery } from '../webhooks/intake.ts';
import { signatureShaped } from '../webhooks/signature.ts';
import { BodyTimeout, BodyTooLarge, BudgetFull, type HeldBody, readBody } from './body.ts';
import type { ByteBudget } from './body-budget.ts';
import type { IntakeHealth } from './intake-health.ts';
import { sendJson, type WebDeps } from './respond.ts';

/**
 * POST /webhooks/github: the HTTP half of webhook intake (src/webhooks/intake.ts is the
 * other). It owns what HTTP owns: whether the route exists, content type, body size, and
 * the process-wide cap on body bytes buffered at once (src/web/body-budget.ts).
 */

/** GitHub caps webhook payloads at 25 MB and does not deliver larger ones. */
export const MAX_WEBHOOK_BODY_BYTES = 25 * 1024 * 1024;

/** Seconds a sender refused for a full body budget is asked to wait. */
const BUSY_RETRY_AFTER_SECONDS = 5;
/** GitHub gives up on a delivery after 10 s; a body still arriving after this is dropped. */
const BODY_TIMEOUT_MS = 15_000;

function header(req: http.IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

/**
 * Answers 401 (no signature: the body is never read), 413 (too large), 503 (body budget
 * full; with Retry-After) or 408 (body too slow) and closes the connection. The rest of the body is read and discarded for a short while
 * first (a "lingering close"): closing a socket with unread data sends a reset, which can
 * destroy our answer before the client reads it; after LINGER_MS the connection is cut. Never more than LINGER_MS, whatever it
 * sends; the discarded reads reuse the same small buffers, so they do not grow memory.
 */
const LINGER_MS = 2_000;

function refuse(
  res: http.ServerResponse,
  req: http.IncomingMessage,
  status: 401 | 413 | 503 | 408,
  error?: string,
): void {
  // No "connection: close": Node would destroy the socket as soon as the answer is written,
  // with the body still arriving — a reset that can destroy the answer in flight.
  if (status === 401) {
    sendJson(res, 401, { error });
  } else if (status === 503) {
    res.setHeader('retry-after', String(BUSY_RETRY_AFTER_SECONDS));
    sendJson(res, 503, { error: 'busy: too many request bodies in memory; retry later' });
  } else if (status === 408) {
    sendJson(res, 408, { error: `body not received within ${BODY_TIMEOUT_MS / 1000} s` });
  } else {
    sendJson(res, 413, { error: `payload larger than ${MAX_WEBHOOK_BODY_BYTES} bytes` });
  }
  req.resume();
  const timer = setTimeout(() => req.destroy(), LINGER_MS);
  timer.unref();
  req.once('end', () => clearTimeout(timer));
}

export function webhookRoute(deps: WebDeps, budget: ByteBudget, health?: IntakeHealth) {
  return async (req: http.IncomingMessage, res: http.ServerResponse): Promise<void> => {
    const deliveryId = header(req, 'x-github-delivery');
    // Unsigned text reaches no log line: an id that does not look like one is not shown.
    const shown = loggableDeliveryId(deliveryId);
    const rejected = (status: number, reason: string) =>
      deps.logger.warn(
        { event: 'webhook.rejected', delivery_id: shown, status, reason },
        `webhook delivery ${shown ?? '(no id)'} rejected: ${status} ${reason}`,
      );

    const secret = deps.config.webhookSecret;
    if (!secret) {
      // Not configured: the endpoint does not exist, rather than accepting unsigned posts.
      rejected(404, 'WEBHOOK_SECRET is not set');
      req.resume();
      return sendJson(res, 404, { error: 'not found' });
    }

    const mediaType = (header(req, 'content-type') ?? '').split(';')[0]!.trim().toLowerCase();
    const encoding =
      mediaType === 'application/json'
        ? 'json'
        : mediaType === 'application/x-www-form-urlencoded'
          ? 'form'
          : null;
    if (!encoding) {
      rejected(415, `unsupported content type ${quoted(mediaType, 100)}`);
      req.resume();
      return sendJson(res, 415, { error: 'content type must be application/json' });
    }

    // A stranger's request holds no byte of the budget: without a signature that could be
    // valid, it is refused before its body is read. The HMAC itself needs the body.
    const signature = header(req, 'x-hub-signature-256');
    if (!signatureShaped(signature)) {
      const reason = signature === undefined ? 'missing signature' : 'bad signature';
      rejected(401, `${reason} (body not read)`);
      return refuse(res, req, 401, reason);
    }

    const declared = Number(header(req, 'content-length'));
    if (Number.isFinite(declared) && declared > MAX_WEBHOOK_BODY_BYTES) {
      rejected(413, `declared body of ${declared} bytes`);
      return refuse(res, req, 413);
    }
    let raw: HeldBody;
    try {
      raw = await readBody(req, {
        limit: MAX_WEBHOOK_BODY_BYTES,
        budget,
        declared: Number.isSafeInteger(declared) && declared >= 0 ? declared : null,
        timeoutMs: BODY_TIMEOUT_MS,
      });
    } catch (err) {
      if (err instanceof BodyTooLarge) {
        rejected(413, 'body exceeded the limit while streaming');
        return refuse(res, req, 413);
      }
      if (err instanceof BudgetFull) {
        budget.noteRefused();
        rejected(503, `request bodies in memory reached ${budget.limit} bytes`);
        return refuse(res, req, 503);
      }
      if (err instanceof BodyTimeout) {
        rejected(408, 'body not received in time');
        return refuse(res, req, 408);
      }
      throw err;
    }

    try {
      const result = await receiveDelivery(
        {
          db: deps.db,
          logger: deps.logger,
          clock: deps.clock,
          secret,
          boss: deps.boss,
          commitEmails: deps.config.commits.emails,
          commitsOff: commitsOffReason(deps.config.github) !== null,
        },
        {
          deliveryId,
          event: header(req, 'x-github-event'),
          signature,
          hookId: header(req, 'x-github-hook-id'),
          rawBody: raw.body,
          encoding,
        },
      );
      // What /readyz says of intake: a 500 is a delivery the database did not take.
      if (result.status >= 500) health?.noteFailed(new Date());
      else health?.noteStored();
      sendJson(res, result.status, result.body);
    } finally {
      raw.release();
    }
  };
}
