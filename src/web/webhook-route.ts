import type http from 'node:http';
import { receiveDelivery } from '../webhooks/intake.ts';
import type { ByteBudget } from './body-budget.ts';
import type { WebDeps } from './server.ts';
import { sendJson } from './server.ts';

/**
 * POST /webhooks/github: the HTTP half of webhook intake (src/webhooks/intake.ts is the
 * other). It owns what HTTP owns: whether the route exists, content type, body size, and
 * the process-wide cap on body bytes buffered at once (src/web/body-budget.ts).
 */

/** GitHub caps webhook payloads at 25 MB and does not deliver larger ones. */
export const MAX_WEBHOOK_BODY_BYTES = 25 * 1024 * 1024;

class BodyTooLarge extends Error {}
class BudgetFull extends Error {}

/** Seconds a sender refused for a full body budget is asked to wait. */
export const BUSY_RETRY_AFTER_SECONDS = 5;

function header(req: http.IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

/**
 * Buffers the body, taking each chunk's bytes from the shared budget as it arrives. On
 * any failure the bytes taken so far are given back; on success the caller gives back
 * `held` once it is done with the body.
 */
function readBody(
  req: http.IncomingMessage,
  limit: number,
  budget: ByteBudget,
): Promise<{ body: Buffer; held: number }> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const fail = (err: Error) => {
      req.off('data', onData);
      req.pause();
      chunks.length = 0;
      budget.give(size);
      reject(err);
    };
    const onData = (chunk: Buffer) => {
      if (size + chunk.length > limit) return fail(new BodyTooLarge());
      if (!budget.tryTake(chunk.length)) return fail(new BudgetFull());
      size += chunk.length;
      chunks.push(chunk);
    };
    req.on('data', onData);
    req.once('end', () => {
      const body = Buffer.concat(chunks, size);
      chunks.length = 0;
      resolve({ body, held: size });
    });
    req.once('error', (err) => fail(err));
  });
}

/**
 * Answers 413 (too large) or 503 (body budget full) and closes the connection. The rest of the body is read and discarded for
 * a short while first (a "lingering close"): a client still writing would otherwise get a
 * connection reset instead of our answer. Never more than LINGER_MS, whatever it sends.
 */
const LINGER_MS = 2_000;

function refuseBody(res: http.ServerResponse, req: http.IncomingMessage, status: 413 | 503): void {
  res.setHeader('connection', 'close');
  if (status === 503) {
    res.setHeader('retry-after', String(BUSY_RETRY_AFTER_SECONDS));
    sendJson(res, 503, { error: 'busy: too many request bodies in memory; retry later' });
  } else {
    sendJson(res, 413, { error: `payload larger than ${MAX_WEBHOOK_BODY_BYTES} bytes` });
  }
  req.resume();
  const timer = setTimeout(() => req.destroy(), LINGER_MS);
  timer.unref();
  req.once('end', () => clearTimeout(timer));
}

export function webhookRoute(deps: WebDeps, budget: ByteBudget) {
  return async (req: http.IncomingMessage, res: http.ServerResponse): Promise<void> => {
    const deliveryId = header(req, 'x-github-delivery');
    const rejected = (status: number, reason: string) =>
      deps.logger.warn(
        {
          event: 'webhook.rejected',
          delivery_id: deliveryId?.slice(0, 100) ?? null,
          status,
          reason,
        },
        `webhook delivery ${deliveryId?.slice(0, 100) ?? '(no id)'} rejected: ${status} ${reason}`,
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
      rejected(415, `unsupported content type "${mediaType}"`);
      req.resume();
      return sendJson(res, 415, { error: 'content type must be application/json' });
    }

    const declared = Number(header(req, 'content-length'));
    if (Number.isFinite(declared) && declared > MAX_WEBHOOK_BODY_BYTES) {
      rejected(413, `declared body of ${declared} bytes`);
      return refuseBody(res, req, 413);
    }
    let raw: { body: Buffer; held: number };
    try {
      raw = await readBody(req, MAX_WEBHOOK_BODY_BYTES, budget);
    } catch (err) {
      if (err instanceof BodyTooLarge) {
        rejected(413, 'body exceeded the limit while streaming');
        return refuseBody(res, req, 413);
      }
      if (err instanceof BudgetFull) {
        budget.noteRefused();
        rejected(503, `request bodies in memory reached ${budget.limit} bytes`);
        return refuseBody(res, req, 503);
      }
      throw err;
    }

    try {
      const result = await receiveDelivery(
        { db: deps.db, logger: deps.logger, clock: deps.clock, secret, boss: deps.boss },
        {
          deliveryId,
          event: header(req, 'x-github-event'),
          signature: header(req, 'x-hub-signature-256'),
          hookId: header(req, 'x-github-hook-id'),
          rawBody: raw.body,
          encoding,
        },
      );
      sendJson(res, result.status, result.body);
    } finally {
      budget.give(raw.held);
    }
  };
}
