import { createApp } from '../app.ts';
import { childFill } from '../backfill/fill-process.ts';
import { ALL_QUEUES } from '../jobs/queue-names.ts';
import { shutdownTimeoutMs, WorkerService } from '../jobs/worker-service.ts';
import { parseCli } from './args.ts';
import { shutdownSignal } from './shutdown.ts';

const USAGE = `
Usage: bin/worker

Runs until stopped: a scheduler that enqueues poll-sources, reconcile and backfill every
TICK_SECONDS (default 60) and maintenance hourly, and the handlers for every
pg-boss queue: ${ALL_QUEUES.join(', ')}
(backfill fills the recorded gaps whose archive hours are published, from GHARCHIVE_URL;
the reconciler sends the enrichment and commit cycles due work needs). Reconciles once at
start, and polls at once. Run one per machine; replicas cooperate through Postgres. Needs
bin/setup to have run (the pg-boss schema is not migrated here). Without a GitHub
credential it warns at start: the pushes it stores wait for one (docs/commits.md).

SIGTERM or SIGINT: stop the scheduler, stop taking jobs, let running jobs finish
(up to 20 s), close the pools, exit 0. A second signal exits at once.
`;

/** Margin after the job shutdown timeout for closing pools before the process gives up. */
const CLOSE_MARGIN_MS = 5_000;

export async function main(argv: string[]): Promise<number> {
  if (!parseCli(argv, USAGE, {})) return 0;
  // The pool follows the credentials: two polls and a fetcher a resource for each.
  const app = await createApp({ role: 'worker', requires: 'pgboss', writesStoredData: true });
  const stopRequested = shutdownSignal(app.logger, {
    forceAfterMs: shutdownTimeoutMs(app.config) + CLOSE_MARGIN_MS,
  });
  // Gap fills in a child process: an import that dies never takes the polls with it.
  const worker = new WorkerService(app, { fill: childFill(app.databaseUrl) });
  try {
    await worker.start();
    await stopRequested;
  } finally {
    await worker.stop();
    await app.close();
  }
  return 0;
}
