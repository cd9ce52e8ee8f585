import { parentPort, workerData } from 'node:worker_threads';
import { loadConfig } from '../platform/config/config.ts';
import { AppError, ConfigError } from '../platform/errors.ts';
import { logDestination } from '../platform/log.ts';
import { type BackfillCommand, runBackfill } from './backfill-command.ts';

/**
 * bin/backfill's worker thread (see src/cli/backfill.ts): runs the command with a capped
 * heap and hands its output, and how it ended, to the main thread.
 */

export type WorkerMessage =
  | { type: 'line'; text: string }
  | { type: 'progress'; text: string }
  | { type: 'error-line'; text: string }
  | { type: 'log'; text: string }
  | { type: 'done'; code: number }
  | { type: 'failed'; name: string; code?: string; message: string; variable?: string };

const port = parentPort!;
const { command, tty, stderr } = workerData as {
  command: BackfillCommand;
  /** Draw the progress bar. */
  tty: boolean;
  /** The main thread's stderr as logDestination needs to see it (a worker's is a pipe). */
  stderr: { isTTY: boolean; columns?: number };
};
const stop = new AbortController();
port.on('message', (m: { type: string }) => {
  if (m.type === 'stop') stop.abort();
});
const post = (m: WorkerMessage) => port.postMessage(m);

// Log lines formatted here as the process's stderr wants them (LOG_FORMAT, a terminal or
// not), written there by the main thread above its progress bar.
const logStream = {
  ...stderr,
  fd: 2,
  write: (text: string) => {
    post({ type: 'log', text });
    return true;
  },
};

try {
  const logs = logDestination(loadConfig().logFormat, logStream as unknown as NodeJS.WriteStream);
  const code = await runBackfill(
    command,
    {
      tty,
      line: (text) => post({ type: 'line', text }),
      progress: (text) => post({ type: 'progress', text }),
      error: (text) => post({ type: 'error-line', text }),
      logs,
    },
    stop.signal,
  );
  post({ type: 'done', code });
} catch (err) {
  const e = err as Error;
  post({
    type: 'failed',
    name: e?.name ?? 'Error',
    code: err instanceof AppError ? err.code : undefined,
    message: e?.message ?? String(err),
    variable: err instanceof ConfigError ? err.variable : undefined,
  });
}
// Nothing else keeps this thread alive: the app is closed, so it ends here.
port.unref();
