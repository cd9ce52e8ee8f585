import type { PgBoss } from 'pg-boss';
import { createApp } from '../app.ts';
import { createBoss } from '../queue/boss.ts';
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

Run as many replicas as you like: everything it shows or stores is in Postgres.
SIGTERM/SIGINT stops gracefully; a second signal exits at once.
`;

/**
 * pg-boss is only used to send enrichment hints after a webhook commits. If it cannot
 * start (setup has not run yet), the web still serves: /readyz says why, and the
 * reconciler finds anything a webhook stored without a hint.
 */
async function startHintSender(
  app: Awaited<ReturnType<typeof createApp>>,
): Promise<PgBoss | undefined> {
  const boss = createBoss(app.databaseUrl, app.config, app.logger, {
    role: 'web',
    max: 2,
    supervise: false,
  });
  try {
    await boss.start();
    return boss;
  } catch (err) {
    app.logger.warn(
      { event: 'web.hints_disabled', err },
      'pg-boss did not start (has bin/setup run?): webhook enrichment hints are off; the reconciler covers them',
    );
    await boss.stop({ graceful: false }).catch(() => {});
    return undefined;
  }
}

export async function main(argv: string[]): Promise<number> {
  if (!parseCli(argv, USAGE, {})) return 0;
  const app = await createApp({ role: 'web', poolMax: 6 });
  const stopRequested = shutdownSignal(app.logger, { forceAfterMs: 15_000 });
  let boss: PgBoss | undefined;
  let server: Awaited<ReturnType<typeof startWebServer>> | undefined;
  try {
    boss = await startHintSender(app);
    server = await startWebServer({ ...app, boss }, app.config.http);
    await stopRequested;
  } finally {
    await server?.close();
    await boss?.stop({ graceful: true, timeout: 5_000 }).catch(() => {});
    await app.close();
  }
  return 0;
}
