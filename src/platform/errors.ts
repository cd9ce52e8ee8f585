/**
 * Named errors with a stable `code`, the context that matters, and `cause`.
 * Never put a token or webhook secret into `context` or `message`.
 */
export class AppError extends Error {
  readonly code: string;
  readonly context: Record<string, unknown>;

  constructor(
    code: string,
    message: string,
    context: Record<string, unknown> = {},
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = new.target.name;
    this.code = code;
    this.context = context;
  }

  toJSON(): Record<string, unknown> {
    return { name: this.name, code: this.code, message: this.message, ...this.context };
  }
}

/** A bad environment variable; the process stops with exit 2. */
export class ConfigError extends AppError {
  readonly variable: string;
  constructor(variable: string, problem: string, code = 'CONFIG_INVALID') {
    super(code, `${variable} ${problem}`, { variable });
    this.variable = variable;
  }
}

/** Bad command-line arguments; usage is printed and the process exits 2. */
export class UsageError extends AppError {
  constructor(message: string) {
    super('USAGE', message);
  }
}

export class NotFound extends AppError {
  constructor(what: string, id: unknown) {
    super('NOT_FOUND', `${what} ${String(id)} does not exist`, { what, id });
  }
}
