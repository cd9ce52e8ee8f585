import { createApp } from '../app.ts';
import { childFill } from '../backfill/fill-process.ts';
import { ALL_QUEUES } from '../queue/names.ts';
import { shutdownTimeoutMs, WorkerService } from '../queue/worker-service.ts';
import { parseCli } from './args.ts';
import { shutdownSignal } from './shutdown.ts';

const USAGE = `
Usage: bin/worker

Runs until stopped: a scheduler that enqueues poll-sources and reconcile every
TICK_SECONDS (default 60) and maintenance hourly, and the handlers for every
pg-boss queue: ${ALL_QUEUES.join(', ')}
(backfill fills recorded gaps from GH Archive). Reconciles once at start. Run one per
machine; replicas cooperate through Postgres. Needs bin/setup to have run (the pg-boss schema is not migrated here).

SIGTERM or SIGINT: stop the scheduler, stop taking jobs, let running jobs finish
(up to 20 s), close the pools, exit 0. A second signal exits at once.
`;

/** Margin after the job shutdown timeout for closing pools before the process gives up. */
const CLOSE_MARGIN_MS = 5_000;

export async function main(argv: string[]): Promise<number> {
  if (!parseCli(argv, USAGE, {})) return 0;
  // 8 as ADR 0009 sizes it for polls, + 2: a gap fill holds two sessions for its imports.
  const app = await createApp({ role: 'worker', poolMax: 10, requires: 'pgboss' });
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
