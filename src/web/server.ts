import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { systemClock } from '../platform/clock.ts';
import { isNotSetUpError, NOT_SET_UP } from '../platform/db/setup-state.ts';
import { hourlyCoverage } from '../status/coverage.ts';
import { readStatus } from '../status/model.ts';
import { minuteSeries } from '../status/series.ts';
import { InvalidSourceQuery, parseSourceQuery, type SourceQuery } from '../status/sources.ts';
import { ARCHIVE_FILES, archiveRoutes } from './archive-route.ts';
import { createByteBudget } from './body-budget.ts';
import { createIntakeHealth } from './intake-health.ts';
import { createMetrics } from './metrics.ts';
import { renderPage } from './page.ts';
import { createReadinessProbe } from './readiness.ts';
import { sendJson, sendText, type WebDeps } from './respond.ts';
import { webhookRoute } from './webhook-route.ts';

/**
 * bin/web's HTTP server on node:http: eight routes do not need a framework, and every
 * dependency is one more thing to audit in a process that faces GitHub's webhooks.
 */

export interface WebServer {
  url: string;
  close(): Promise<void>;
}

type Handler = (req: http.IncomingMessage, res: http.ServerResponse) => Promise<void>;

export function createRoutes(deps: WebDeps): Map<string, Map<string, Handler>> {
  // One budget for every request of this server: bodies buffered at once are capped.
  const bodyBudget = createByteBudget();
  const metrics = createMetrics(deps, { bodyBudget });
  const now = () => (deps.clock ?? systemClock).now();
  const routes = new Map<string, Map<string, Handler>>();
  const route = (method: string, path: string, handler: Handler) => {
    if (!routes.has(path)) routes.set(path, new Map());
    routes.get(path)!.set(method, handler);
  };

  route('GET', '/healthz', async (_req, res) => sendJson(res, 200, { ok: true }));

  // Webhook intake on its own pool when it has one: nothing else can take its connections.
  const intakeDb = deps.pools?.intake.db ?? deps.db;
  const intake = deps.config.webhookSecret
    ? createIntakeHealth({ db: intakeDb, pool: deps.pools?.intake.pool })
    : undefined;
  const readiness = createReadinessProbe({
    config: deps.config,
    db: deps.db,
    databaseUrl: deps.databaseUrl,
    timeoutMs: deps.readinessTimeoutMs,
    intake,
  });
  route('GET', '/readyz', async (_req, res) => {
    const r = await readiness.check();
    sendJson(res, r.ready ? 200 : 503, r);
  });

  route('GET', '/status', async (req, res) => {
    const query = sourceQueryOf(req, res, 'json');
    if (query) sendJson(res, 200, await readStatus(deps, query));
  });

  route('GET', '/', async (req, res) => {
    const query = sourceQueryOf(req, res, 'html');
    if (!query) return;
    const report = await readStatus(deps, query);
    const series = await minuteSeries(deps.db, now());
    const coverage = await hourlyCoverage(deps.db, now());
    sendText(res, 200, 'text/html; charset=utf-8', renderPage(report, series, coverage));
  });

  route('GET', '/metrics', async (_req, res) => {
    sendText(res, 200, metrics.contentType, await metrics.scrape());
  });

  route('POST', '/webhooks/github', webhookRoute({ ...deps, db: intakeDb }, bodyBudget, intake));
  if (deps.config.archive.serve) {
    const archive = archiveRoutes(deps, {
      db: deps.pools?.archive.db,
      slots: deps.pools?.archive.pool.options.max,
    });
    route('GET', '/archive/', archive.index);
    route('GET', '/archive', archive.index);
    route('GET', ARCHIVE_FILES, archive.file);
  }
  return routes;
}

/** ?sources=N&page=P&state=S&kind=K, or null once a 400 naming the bad one was sent. */
function sourceQueryOf(
  req: http.IncomingMessage,
  res: http.ServerResponse,
  as: 'json' | 'html',
): SourceQuery | null {
  const params = new URL(req.url ?? '/', 'http://localhost').searchParams;
  try {
    return parseSourceQuery((name) => params.get(name));
  } catch (err) {
    if (!(err instanceof InvalidSourceQuery)) throw err;
    if (as === 'json') sendJson(res, 400, { error: err.message });
    else sendText(res, 400, 'text/plain; charset=utf-8', `${err.message}\n`);
    return null;
  }
}

export function createHandler(deps: WebDeps): http.RequestListener {
  const routes = createRoutes(deps);
  return (req, res) => {
    const path = new URL(req.url ?? '/', 'http://localhost').pathname;
    const methods =
      routes.get(path) ?? (path.startsWith('/archive/') ? routes.get(ARCHIVE_FILES) : undefined);
    const method = req.method === 'HEAD' ? 'GET' : (req.method ?? 'GET');
    const handler = methods?.get(method);
    if (!methods) return sendJson(res, 404, { error: 'not found' });
    if (!handler) {
      res.setHeader('allow', [...methods.keys()].join(', '));
      return sendJson(res, 405, { error: 'method not allowed' });
    }
    handler(req, res).catch((err: unknown) => {
      if (isNotSetUpError(err)) {
        // Before bin/setup: say so (503, like /readyz) instead of a 500 and a stack.
        if (!res.headersSent) sendJson(res, 503, { error: NOT_SET_UP });
        return;
      }
      deps.logger.error(
        { event: 'web.request_failed', method: req.method, path, err },
        `${req.method} ${path} failed: ${(err as Error).message}`,
      );
      if (!res.headersSent) sendJson(res, 500, { error: 'internal error' });
      else res.destroy();
    });
  };
}

/** Starts listening; resolves once the port is bound (port 0 picks a free one). */
export async function startWebServer(
  deps: WebDeps,
  opts: { host: string; port: number },
): Promise<WebServer> {
  const server = http.createServer(createHandler(deps));
  // A slow client may not hold a connection open forever; GitHub delivers within 10 s.
  server.requestTimeout = 60_000;
  server.headersTimeout = 20_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port, opts.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  const url = `http://${host}:${address.port}`;
  deps.logger.info({ event: 'web.listening', url }, `web server listening on ${url}`);
  let closing: Promise<void> | undefined;
  return {
    url,
    close() {
      closing ??= new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeIdleConnections();
        // In-flight requests get a moment to finish (a webhook mid-transaction), then go.
        setTimeout(() => server.closeAllConnections(), 5_000).unref();
      });
      return closing;
    },
  };
}
