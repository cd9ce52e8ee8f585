import type { Logger } from '../platform/log.ts';

const SIGNAL_NUMBERS = { SIGINT: 2, SIGTERM: 15 } as const;
type ShutdownSignal = keyof typeof SIGNAL_NUMBERS;

/**
 * Resolves on the first SIGTERM or SIGINT, so the caller can shut down gracefully. A
 * second signal means "now": the process exits at once with 128 + signal number, leaving
 * leases and reservations to their own timeouts. `forceAfterMs` arms the same exit in
 * case the graceful path itself hangs (a database that stopped answering).
 */
export function shutdownSignal(
  log: Logger,
  { forceAfterMs }: { forceAfterMs?: number } = {},
): Promise<ShutdownSignal> {
  return new Promise((resolve) => {
    let received = false;
    const onSignal = (signal: ShutdownSignal) => {
      if (received) {
        log.warn({ event: 'process.forced_exit', signal }, `${signal} again: exiting now`);
        process.exit(128 + SIGNAL_NUMBERS[signal]);
      }
      received = true;
      log.info(
        { event: 'process.signal', signal },
        `${signal} received: shutting down (send it again to exit now)`,
      );
      if (forceAfterMs !== undefined) {
        setTimeout(() => {
          log.error(
            { event: 'process.forced_exit', signal, after_ms: forceAfterMs },
            'graceful shutdown did not finish in time: exiting now',
          );
          process.exit(128 + SIGNAL_NUMBERS[signal]);
        }, forceAfterMs).unref();
      }
      resolve(signal);
    };
    process.on('SIGTERM', onSignal);
    process.on('SIGINT', onSignal);
  });
}
