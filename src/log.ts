import pino, { type Logger } from 'pino';

export type { Logger };

/**
 * pino's error serializer, minus properties that drag whole objects into a log line
 * (pg errors raised through pg-boss carry the `client`, with its connection state).
 */
function serializeError(err: unknown) {
  const out = pino.stdSerializers.err(err as Error) as unknown as Record<string, unknown>;
  if (out && typeof out === 'object') {
    delete out.client;
    delete out.connection;
  }
  return out;
}

/**
 * The root logger: pino JSON on stdout (or the given destination). Every line that
 * matters carries an `event` field from the vocabulary in README "Log events".
 * Authorization headers, tokens and secrets are redacted wherever they appear.
 */
export function createLogger(
  level: string,
  destination?: pino.DestinationStream,
  bindings: Record<string, unknown> = {},
): Logger {
  return pino(
    {
      level,
      base: { pid: process.pid, ...bindings },
      timestamp: pino.stdTimeFunctions.isoTime,
      redact: {
        paths: [
          'token',
          'secret',
          'authorization',
          '*.token',
          '*.secret',
          '*.authorization',
          'headers.authorization',
          '*.headers.authorization',
          'request.headers.authorization',
        ],
        censor: '[redacted]',
      },
      formatters: { level: (label) => ({ level: label }) },
      serializers: { err: serializeError },
    },
    destination,
  );
}

/** A child logger for one job: every line inside carries job_id and queue. */
export function jobLogger(root: Logger, queue: string, jobId: string): Logger {
  return root.child({ queue, job_id: jobId });
}
