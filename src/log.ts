import pino, { type Logger } from 'pino';

export type { Logger };

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
      serializers: { err: pino.stdSerializers.err },
    },
    destination,
  );
}

/** A child logger for one job: every line inside carries job_id and queue. */
export function jobLogger(root: Logger, queue: string, jobId: string): Logger {
  return root.child({ queue, job_id: jobId });
}
