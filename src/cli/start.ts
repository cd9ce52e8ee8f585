import { createApp } from '../app.ts';
import { childFill } from '../backfill/fill-process.ts';
import { shutdownTimeoutMs, WorkerService } from '../jobs/worker-service.ts';
import { createWebPools, WEB_POOL_TOTAL, type WebPools, webPoolSizes } from '../web/pools.ts';
import { startWebServer, type WebServer } from '../web/server.ts';
import { parseCli } from './args.ts';
import { runSetup } from './setup.ts';
import { shutdownSignal } from './shutdown.ts';

const USAGE = `
Usage: npm start   (or bin/start)

Everything in one process: setup (migrations, pg-boss schema and queues, SOURCES),
then the worker (scheduler + job handlers) and the web server (HTTP_HOST:HTTP_PORT,
default 127.0.0.1:3000). With no DATABASE_URL it runs an embedded Postgres under
DATA_DIR (default .data/), so a fresh machine needs nothing but Node.

The default GITHUB_MODE=live polls api.github.com continuously and spends real
GitHub quota (60 requests/hour without GITHUB_TOKEN).
SIGTERM/SIGINT stops gracefully; a second signal exits at once.
`;

/** Beyond the jobs' shutdown timeout: the web server's 5 s for in-flight requests, then pools. */
const CLOSE_MARGIN_MS = 10_000;

export async function main(argv: string[]): Promise<number> {
  if (!parseCli(argv, USAGE, {})) return 0;
  // The worker's pool, as its credentials plan it, and the web's share.
  const app = await createApp({ role: 'start', requires: 'none' });
  const stopRequested = shutdownSignal(app.logger, {
    forceAfterMs: shutdownTimeoutMs(app.config) + CLOSE_MARGIN_MS,
  });
  // Gap fills in a child process: an import that dies never takes the polls with it.
  const worker = new WorkerService(app, { fill: childFill(app.databaseUrl) });
  let web: WebServer | undefined;
  let pools: WebPools | undefined;
  try {
    await runSetup(app);
    await worker.start();
    // The web server sends its webhook hints through the worker's boss. Webhook intake and
    // /archive get pools of their own beside the worker's (src/web/pools.ts).
    pools = createWebPools(app.databaseUrl, webPoolSizes(WEB_POOL_TOTAL), app.logger);
    web = await startWebServer({ ...app, boss: worker.boss, pools }, app.config.http);
    await stopRequested;
  } finally {
    // Webhooks first (a delivery in flight may still send a hint), then jobs, then pools.
    await web?.close();
    await worker.stop();
    await pools?.close();
    await app.close();
  }
  return 0;
}
