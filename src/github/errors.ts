import { AppError } from '../errors.ts';

/** 403/429 as a budget event: never data. `retryAt` is when to try again. */
export class RateLimited extends AppError {
  readonly retryAt: Date;
  readonly status: number;
  constructor(status: number, retryAt: Date, path: string) {
    super(
      'RATE_LIMITED',
      `GitHub rate limit (HTTP ${status}) on ${path}; retry at ${retryAt.toISOString()}`,
      {
        status,
        retryAt: retryAt.toISOString(),
        path,
      },
    );
    this.retryAt = retryAt;
    this.status = status;
  }
}

/** The budget said no before anything was sent. */
export class BudgetExhausted extends AppError {
  readonly retryAt: Date | null;
  constructor(purpose: string, retryAt: Date | null) {
    super(
      'BUDGET_EXHAUSTED',
      `request budget for ${purpose} is spent${retryAt ? ` until ${retryAt.toISOString()}` : ''}`,
      {
        purpose,
        retryAt: retryAt?.toISOString() ?? null,
      },
    );
    this.retryAt = retryAt;
  }
}

/** Waited GATE_WAIT_SECONDS for the request gate and did not get it; nothing was sent. */
export class GateTimeout extends AppError {
  constructor(credential: string, waitedMs: number) {
    super('GATE_TIMEOUT', `request gate for ${credential} still busy after ${waitedMs} ms`, {
      credential,
      waitedMs,
    });
  }
}

/** 5xx, a timeout or a connection error: transient, retried by the owning ledger's ladder. */
export class GitHubUnavailable extends AppError {
  readonly status: number | null;
  constructor(path: string, status: number | null, detail: string, cause?: unknown) {
    super(
      'GITHUB_UNAVAILABLE',
      `GitHub unavailable on ${path}: ${detail}`,
      { path, status },
      { cause },
    );
    this.status = status;
  }
}

/** A 2xx whose body is not the JSON GitHub documents. */
export class MalformedResponse extends AppError {
  /** The HTTP status the body came with, when known (the attempt ledger records it). */
  readonly status: number | null;
  constructor(path: string, detail: string, cause?: unknown, status: number | null = null) {
    super('MALFORMED_RESPONSE', `malformed response from ${path}: ${detail}`, { path }, { cause });
    this.status = status;
  }
}

/** 401: the token is bad. Sources must not be hammered: callers back off hard. */
export class GitHubAuthFailed extends AppError {
  readonly status = 401;
  constructor(path: string) {
    super(
      'GITHUB_AUTH_FAILED',
      `GitHub rejected the credentials (401) on ${path}; check GITHUB_TOKEN`,
      { path },
    );
  }
}

/** Fixture mode was asked for something it has no file for. */
export class FixtureMiss extends AppError {
  constructor(method: string, path: string, file: string) {
    super('FIXTURE_MISS', `no fixture for ${method} ${path} (looked for ${file})`, {
      method,
      path,
      file,
    });
  }
}

/** Any other unexpected status (e.g. 422 past the events window, 400). */
export class GitHubRequestFailed extends AppError {
  readonly status: number;
  constructor(path: string, status: number, detail: string) {
    super('GITHUB_REQUEST_FAILED', `GitHub answered ${status} on ${path}: ${detail}`, {
      path,
      status,
    });
    this.status = status;
  }
}
