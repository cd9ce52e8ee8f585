import type http from 'node:http';
import type { PgBoss } from 'pg-boss';
import type { Deps } from '../work/deps.ts';
import type { WebPools } from './pools.ts';

/**
 * What every route of bin/web's server needs, and how it answers: shared by the server
 * (src/web/server.ts) and the webhook route (src/web/webhook-route.ts), neither of which
 * imports the other for it.
 */

export type WebDeps = Pick<Deps, 'config' | 'db' | 'logger' | 'github' | 'clock'> & {
  /** For post-commit enrichment hints from webhooks; without it the reconciler covers. */
  boss?: PgBoss;
  /** /readyz opens its own bounded connection on this URL (src/web/readiness.ts). */
  databaseUrl?: string;
  /** How long /readyz waits for its checks before it says 503 (default READINESS_TIMEOUT_MS). */
  readinessTimeoutMs?: number;
  /**
   * Pools of their own for webhook intake and /archive (src/web/pools.ts); without them
   * both use `db`.
   */
  pools?: Pick<WebPools, 'intake' | 'archive'>;
};

export function sendJson(res: http.ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    'content-type': 'application/json; charset=utf-8',
    'content-length': Buffer.byteLength(text),
    'cache-control': 'no-store',
  });
  res.end(text);
}

export function sendText(
  res: http.ServerResponse,
  status: number,
  contentType: string,
  text: string,
): void {
  res.writeHead(status, {
    'content-type': contentType,
    'content-length': Buffer.byteLength(text),
    'cache-control': 'no-store',
  });
  res.end(text);
}
