import type http from 'node:http';
import { receiveDelivery } from '../webhooks/intake.ts';
import type { WebDeps } from './server.ts';
import { sendJson } from './server.ts';

/**
 * POST /webhooks/github: the HTTP half of webhook intake (src/webhooks/intake.ts is the
 * other). It owns what HTTP owns: whether the route exists, content type, body size.
 */

/** GitHub caps webhook payloads at 25 MB and does not deliver larger ones. */
export const MAX_WEBHOOK_BODY_BYTES = 25 * 1024 * 1024;

class BodyTooLarge extends Error {}

function header(req: http.IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

function readBody(req: http.IncomingMessage, limit: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        req.off('data', onData);
        req.pause();
        reject(new BodyTooLarge());
        return;
      }
      chunks.push(chunk);
    };
    req.on('data', onData);
    req.once('end', () => resolve(Buffer.concat(chunks)));
    req.once('error', reject);
  });
}

/**
 * Answers 413 and closes the connection. The rest of the body is read and discarded for
 * a short while first (a "lingering close"): a client still writing would otherwise get a
 * connection reset instead of our answer. Never more than LINGER_MS, whatever it sends.
 */
const LINGER_MS = 2_000;

function tooLarge(res: http.ServerResponse, req: http.IncomingMessage): void {
  res.setHeader('connection', 'close');
  sendJson(res, 413, { error: `payload larger than ${MAX_WEBHOOK_BODY_BYTES} bytes` });
  req.resume();
  const timer = setTimeout(() => req.destroy(), LINGER_MS);
  timer.unref();
  req.once('end', () => clearTimeout(timer));
}

export function webhookRoute(deps: WebDeps) {
  return async (req: http.IncomingMessage, res: http.ServerResponse): Promise<void> => {
    const deliveryId = header(req, 'x-github-delivery');
    const rejected = (status: number, reason: string) =>
      deps.logger.warn(
        { event: 'webhook.rejected', delivery_id: deliveryId ?? null, status, reason },
        `webhook delivery ${deliveryId ?? '(no id)'} rejected: ${status} ${reason}`,
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
      return tooLarge(res, req);
    }
    let raw: Buffer;
    try {
      raw = await readBody(req, MAX_WEBHOOK_BODY_BYTES);
    } catch (err) {
      if (!(err instanceof BodyTooLarge)) throw err;
      rejected(413, 'body exceeded the limit while streaming');
      return tooLarge(res, req);
    }

    const result = await receiveDelivery(
      { db: deps.db, logger: deps.logger, clock: deps.clock, secret, boss: deps.boss },
      {
        deliveryId,
        event: header(req, 'x-github-event'),
        signature: header(req, 'x-hub-signature-256'),
        hookId: header(req, 'x-github-hook-id'),
        rawBody: raw.toString('utf8'),
        encoding,
      },
    );
    sendJson(res, result.status, result.body);
  };
}
