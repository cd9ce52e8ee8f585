import type { PgBoss } from 'pg-boss';
import { createApp } from '../app.ts';
import { startHintSender } from '../jobs/dispatch.ts';
import { loadConfig } from '../platform/config/config.ts';
import { checkStoredSettings, logRecorded } from '../platform/config/stored-settings.ts';
import { isNotSetUpError } from '../platform/db/setup-state.ts';
import { createWebPools, WEB_POOL_TOTAL, webPoolSizes } from '../web/pools.ts';
import { startWebServer } from '../web/server.ts';
import { parseCli } from './args.ts';
import { shutdownSignal } from './shutdown.ts';

const USAGE = `
Usage: bin/web

Serves, on HTTP_HOST:HTTP_PORT (default 127.0.0.1:3000):
  GET  /healthz           process is up
  GET  /readyz            database reachable, migrated, pg-boss installed (503 + reason if not)
  GET  /status            the status report as JSON
  GET  /                  the status page
  GET  /metrics           Prometheus metrics (read from the database at scrape time)
  POST /webhooks/github   GitHub push webhooks (needs WEBHOOK_SECRET; 404 without it)
  GET  /archive/          this store's hours as GH Archive files: an index, and
                          /archive/YYYY-MM-DD-H.json.gz each (ARCHIVE_SERVE=off: 404)

Six database connections (or DATABASE_POOL_MAX when lower, at least three): a third for
webhook intake, a third for /archive, a third for the rest; none waits for another's.

Run as many replicas as you like: everything it shows or stores is in Postgres.
SIGTERM/SIGINT stops gracefully; a second signal exits at once.
`;

/**
 * With WEBHOOK_SECRET set the web stores pushes and their inline commits: its COMMIT_EMAILS
 * must be the database's, like a worker's, or it refuses to start (exit 2).
 * Without it the web only reads and shows, and starts whatever its settings; before bin/setup
 * it starts too, and answers 503 until the database is set up.
 */
async function checkWebhookSettings(app: Awaited<ReturnType<typeof createApp>>): Promise<void> {
  if (!app.config.webhookSecret) return;
  try {
    const recorded = await checkStoredSettings(app.db, app.config, 'web');
    if (recorded.length > 0) logRecorded(app.logger, recorded);
  } catch (err) {
    if (!isNotSetUpError(err)) throw err;
  }
}

export async function main(argv: string[]): Promise<number> {
  if (!parseCli(argv, USAGE, {})) return 0;
  // Six connections (or DATABASE_POOL_MAX when lower) in three pools: webhook intake and
  // /archive each have their own, so neither can take the other's (src/web/pools.ts).
  const config = loadConfig();
  const sizes = webPoolSizes(Math.min(WEB_POOL_TOTAL, config.databasePoolMax ?? WEB_POOL_TOTAL));
  const app = await createApp({ config, role: 'web', poolMax: sizes.app, requires: 'none' });
  const pools = createWebPools(app.databaseUrl, sizes, app.logger);
  try {
    await checkWebhookSettings(app);
  } catch (err) {
    await pools.close();
    await app.close();
    throw err;
  }
  const stopRequested = shutdownSignal(app.logger, { forceAfterMs: 15_000 });
  let boss: PgBoss | undefined;
  let server: Awaited<ReturnType<typeof startWebServer>> | undefined;
  try {
    // pg-boss only sends the post-commit hints of webhooks; without it the web still serves.
    boss = await startHintSender(app, 'web');
    server = await startWebServer({ ...app, boss, pools }, app.config.http);
    await stopRequested;
  } finally {
    await server?.close();
    await boss?.stop({ graceful: true, timeout: 5_000 }).catch(() => {});
    await pools.close();
    await app.close();
  }
  return 0;
}
