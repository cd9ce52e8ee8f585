import pino, { type Logger } from 'pino';
import { formatLogLine } from './log-text.ts';
import { withoutUserinfo } from './redact.ts';
import { terminal } from './terminal.ts';

export type { Logger };

export type LogFormat = 'auto' | 'json' | 'text';

/**
 * Failures that are part of normal operation: GitHub said no or was unreachable, the
 * budget said no, the database connection went away. Their stack trace says nothing the
 * code and message do not, so it is logged only at debug (LOG_LEVEL=debug or trace).
 * Keyed by `code`, so this module needs no import of the classes that raise them.
 */
const EXPECTED_CODES = new Set([
  // src/github/errors.ts
  'RATE_LIMITED',
  'BUDGET_EXHAUSTED',
  'GATE_TIMEOUT',
  'GITHUB_UNAVAILABLE',
  'GITHUB_UNREACHABLE',
  'GITHUB_AUTH_FAILED',
  'GITHUB_REQUEST_FAILED',
  'MALFORMED_RESPONSE',
  'FIXTURE_MISS',
  'DATABASE_NOT_SET_UP',
  // Node network errors
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  // Postgres: admin/crash shutdown, cannot connect now, connection exceptions (class 08)
  '57P01',
  '57P02',
  '57P03',
  '08000',
  '08001',
  '08003',
  '08004',
  '08006',
]);

function isExpectedFailure(err: unknown): boolean {
  const code = (err as { code?: unknown })?.code;
  if (typeof code === 'string' && EXPECTED_CODES.has(code)) return true;
  // pg's "Connection terminated unexpectedly" and friends carry no code.
  return /^Connection terminated|^timeout exceeded when trying to connect/.test(
    (err as Error)?.message ?? '',
  );
}

/** "message: cause's message: …", as pino prints it, without the stacks. */
function messageWithCauses(err: Error): string {
  let text = err.message;
  let cause = (err as { cause?: unknown }).cause;
  for (let depth = 0; cause instanceof Error && depth < 5; depth++) {
    if (cause.message && !text.includes(cause.message)) text += `: ${cause.message}`;
    cause = (cause as { cause?: unknown }).cause;
  }
  return text;
}

/**
 * An error as one log field. Expected failures: type, code, their context (path, status,
 * retryAt …) and message, no stack unless `withStack`. Others: pino's serializer (stack
 * and causes), minus the pg client objects pg-boss errors drag along. The message is left
 * out when the line's own message already says it.
 */
function describeError(
  err: Error,
  { withStack, lineMessage }: { withStack: boolean; lineMessage: string | undefined },
): Record<string, unknown> {
  const full = messageWithCauses(err);
  const repeated = lineMessage?.includes(full) === true;
  if (isExpectedFailure(err) && !withStack) {
    const e = err as Error & { code?: string; context?: Record<string, unknown> };
    // What the line's message does not already say: nothing, the causes, or all of it.
    const said = lineMessage?.includes(err.message) === true && full.startsWith(err.message);
    const untold = repeated
      ? {}
      : said
        ? { cause: full.slice(err.message.length).replace(/^: /, '') }
        : { message: full };
    return {
      type: e.name,
      ...(e.code ? { code: e.code } : {}),
      ...(e.context ?? {}),
      ...untold,
    };
  }
  const out = pino.stdSerializers.err(err) as unknown as Record<string, unknown>;
  delete out.client;
  delete out.connection;
  delete out.context; // AppError's context: its fields are already at the top level
  if (repeated) delete out.message;
  return out;
}

const CHINDINGS = pino.symbols.chindingsSym;

/** True when `key` is already bound to this exact value (a child logger's bindings). */
function alreadyBound(logger: Logger, key: string, value: unknown): boolean {
  if (value === null || (typeof value === 'object' && value !== null)) return false;
  const bindings = (logger as unknown as Record<symbol, string>)[CHINDINGS] ?? '';
  return bindings.includes(`"${key}":${JSON.stringify(value)}`);
}

/**
 * Every line goes through here: a field the logger is already bound to with the same value
 * (job_id on a job's logger) is printed once, and `err` becomes describeError's form.
 */
function tidy(logger: Logger, obj: Record<string, unknown>, msg: unknown) {
  let out: Record<string, unknown> | undefined;
  for (const key of Object.keys(obj)) {
    if (key !== 'err' && alreadyBound(logger, key, obj[key])) {
      out ??= { ...obj };
      delete out[key];
    }
  }
  const err = obj.err;
  if (err instanceof Error) {
    out ??= { ...obj };
    out.err = describeError(err, {
      withStack: logger.isLevelEnabled('debug'),
      lineMessage: typeof msg === 'string' ? msg : undefined,
    });
  }
  return out ?? obj;
}

/** A child's bindings with each key once (the last value wins, as JSON.parse would). */
function dedupeBindings(child: Logger): void {
  const target = child as unknown as Record<symbol, string>;
  const bindings = target[CHINDINGS];
  if (!bindings) return;
  try {
    const unique = JSON.stringify(JSON.parse(`{${bindings.slice(1)}}`));
    target[CHINDINGS] = `,${unique.slice(1, -1)}`;
  } catch {
    // leave bindings that are not plain JSON as they are
  }
}

/**
 * Where a process's logs go: always stderr (stdout is for results). On a
 * terminal (LOG_FORMAT=auto) or with LOG_FORMAT=text, as readable lines; otherwise pino
 * JSON. On a terminal, lines are written above a progress bar if one is shown.
 */
export function logDestination(
  format: LogFormat,
  stream: NodeJS.WriteStream = process.stderr,
): pino.DestinationStream {
  const tty = stream.isTTY === true;
  const text = format === 'text' || (format === 'auto' && tty);
  if (!tty && !text)
    return pino.destination({ fd: (stream as { fd?: number }).fd ?? 2, sync: true });
  const color = tty && !process.env.NO_COLOR;
  return {
    write: (line: string) => terminal.write(stream, text ? formatLogLine(line, { color }) : line),
  };
}

/**
 * The root logger: pino JSON (stderr unless another destination is given). Every line
 * that matters carries an `event` field from the vocabulary in docs/observability.md "Log events".
 * Authorization headers, tokens and secrets are redacted wherever they appear, and no URL
 * keeps its userinfo.
 */
export function createLogger(
  level: string,
  destination: pino.DestinationStream = pino.destination({ fd: 2, sync: true }),
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
      // logMethod below has already described every `err`; an Error that reaches this
      // (nested, or logged by a library through our logger) gets the full form.
      serializers: {
        err: (e: unknown) =>
          e instanceof Error ? describeError(e, { withStack: true, lineMessage: undefined }) : e,
      },
      hooks: {
        // The last word on every line, whatever put a URL in it (a field, a message, an
        // error's cause): no userinfo (src/platform/redact.ts).
        streamWrite: withoutUserinfo,
        logMethod(args, method) {
          const [first, msg] = args as unknown[];
          if (first instanceof Error) {
            (args as unknown[])[0] = tidy(this, { err: first }, msg ?? first.message);
            if (msg === undefined) (args as unknown[])[1] = first.message;
          } else if (first !== null && typeof first === 'object') {
            (args as unknown[])[0] = tidy(this, first as Record<string, unknown>, msg);
          }
          return method.apply(this, args);
        },
      },
      onChild: dedupeBindings,
    },
    destination,
  );
}

/** The logger of a command or service: level and format from the config, to stderr. */
export function processLogger(config: { logLevel: string; logFormat: LogFormat }): Logger {
  return createLogger(config.logLevel, logDestination(config.logFormat));
}

/** A child logger for one job: every line inside carries job_id and queue (once). */
export function jobLogger(root: Logger, queue: string, jobId: string): Logger {
  return root.child({ queue, job_id: jobId });
}
