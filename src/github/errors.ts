import { credentialHint } from '../platform/config/credential-label.ts';
import { AppError } from '../platform/errors.ts';
import { withoutUserinfo } from '../platform/redact.ts';

/** A credential GitHub keeps rejecting (401): its block on the auth ladder, and why. */
export interface AuthBlock {
  credential: string;
  /** The first 401 of this run of 401s. */
  since: Date;
  /** When it may be tried again. */
  until: Date;
  /** 401s in a row. */
  failures: number;
  /** What GitHub said with the latest one (bounded). */
  error: string | null;
}

/**
 * "GitHub rejected every credential (401): token:1a2b3c4d since … until … (Bad
 * credentials); … — check …": which credentials, since when, until when. Labels only.
 */
export function describeRejected(blocks: readonly AuthBlock[]): string {
  const each = blocks.map(
    (b) =>
      `${b.credential} since ${b.since.toISOString()}, blocked until ${b.until.toISOString()}${
        b.error ? ` (${b.error})` : ''
      }`,
  );
  const who = blocks.length === 1 ? 'the credential' : `all ${blocks.length} credentials`;
  const hints = [
    ...new Set(
      blocks.map((b) =>
        b.credential.startsWith('token:')
          ? 'GITHUB_TOKEN / GITHUB_TOKENS'
          : credentialHint(b.credential),
      ),
    ),
  ];
  return `GitHub rejected ${who} (401): ${each.join('; ')} — check ${hints.join(', ')}`;
}

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
  readonly reason: 'allowance' | 'remaining' | 'blocked' | null;
  /** For a blocked credential: a 403/429 (rate_limit) or a 401 (auth). */
  readonly blockReason: 'rate_limit' | 'auth' | null;
  constructor(
    purpose: string,
    retryAt: Date | null,
    reason: BudgetExhausted['reason'] = null,
    blockReason: BudgetExhausted['blockReason'] = null,
    /** Every credential's auth block, when a 401 blocks each one (names them in the message). */
    rejected: readonly AuthBlock[] = [],
  ) {
    const until = retryAt ? ` until ${retryAt.toISOString()}` : '';
    super(
      'BUDGET_EXHAUSTED',
      blockReason === 'auth'
        ? rejected.length > 0
          ? `nothing sent: ${describeRejected(rejected)}`
          : `the credential is blocked after GitHub rejected it (401)${until}`
        : blockReason === 'rate_limit'
          ? `GitHub rate-limited the credential${until}`
          : `request budget for ${purpose} is spent${until}`,
      {
        purpose,
        retryAt: retryAt?.toISOString() ?? null,
        reason,
        blockReason,
        ...(rejected.length > 0 ? { credentials: rejected.map((b) => b.credential) } : {}),
      },
    );
    this.retryAt = retryAt;
    this.reason = reason;
    this.blockReason = blockReason;
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
  constructor(
    path: string,
    status: number | null,
    detail: string,
    cause?: unknown,
    code = 'GITHUB_UNAVAILABLE',
    message = `GitHub unavailable on ${path}: ${detail}`,
  ) {
    super(code, message, { path, status }, { cause });
    this.status = status;
  }
}

/**
 * An answer refused while it was read: longer than its kind's byte cap (the
 * socket destroyed the moment the cap was passed), or not read and decoded within the
 * whole-answer deadline. GitHub did answer and spent the request; for the caller it is
 * transient like a 5xx: the poll backs off, a push or an entity goes on its retry ladder.
 */
export class GitHubAnswerRefused extends GitHubUnavailable {
  readonly reason: 'too_large' | 'deadline';
  constructor(
    path: string,
    status: number,
    reason: GitHubAnswerRefused['reason'],
    detail: string,
    cause?: unknown,
  ) {
    super(
      path,
      status,
      detail,
      cause,
      reason === 'too_large' ? 'GITHUB_ANSWER_TOO_LARGE' : 'GITHUB_ANSWER_TIMEOUT',
      `GitHub's answer on ${path} refused: ${detail}`,
    );
    this.reason = reason;
  }
}

/**
 * The request never reached GitHub (DNS failure, connection refused or timed out, TLS
 * handshake failed): transient like GitHubUnavailable, but nothing was spent — the ledger
 * settles it as not counted.
 */
export class GitHubUnreachable extends GitHubUnavailable {
  /**
   * `apiUrl`: where the request went (GITHUB_API_URL), named in the message with what to
   * check — the likeliest causes are a wrong URL (a fake that is not running) and no network.
   */
  constructor(path: string, detail: string, cause: unknown, apiUrl: string) {
    super(
      path,
      null,
      detail,
      cause,
      'GITHUB_UNREACHABLE',
      `GitHub unreachable at ${withoutUserinfo(apiUrl)} (${path}): ${detail}; check GITHUB_API_URL or the network`,
    );
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

/**
 * 401: GitHub rejected the credential. The client blocks it on the auth ladder (1, 5, 15,
 * 60 min; the first accepted answer clears it): `retryAt` is when it may be tried again.
 */
export class GitHubAuthFailed extends AppError {
  readonly status = 401;
  readonly retryAt: Date | null;
  /** The credential GitHub rejected (a label, never the secret). */
  readonly credential: string | null;
  constructor(
    path: string,
    block?: { until: Date; failures: number },
    credential?: string,
    message?: string,
  ) {
    super(
      'GITHUB_AUTH_FAILED',
      message ??
        `GitHub rejected the credentials (401) on ${path}; check ${credentialHint(credential)}${
          block
            ? ` (401 #${block.failures} in a row: blocked until ${block.until.toISOString()})`
            : ''
        }`,
      {
        path,
        ...(credential ? { credential } : {}),
        ...(block ? { retryAt: block.until.toISOString(), failures: block.failures } : {}),
      },
    );
    this.retryAt = block?.until ?? null;
    this.credential = credential ?? null;
  }
}

/**
 * A 401 and no credential left to try: every one of the pool is blocked by GitHub's
 * rejections. The one auth failure that stops work; it names each credential, since when
 * and until when. `retryAt` is when the first of them may be tried again.
 */
export class PoolRejected extends GitHubAuthFailed {
  readonly blocks: readonly AuthBlock[];
  constructor(path: string, blocks: readonly AuthBlock[]) {
    const first = [...blocks].sort((a, b) => a.until.getTime() - b.until.getTime())[0]!;
    super(
      path,
      { until: first.until, failures: first.failures },
      first.credential,
      `${describeRejected(blocks)} (on ${path})`,
    );
    this.blocks = blocks;
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

/** GraphQL asked of a pool with no credential GitHub's GraphQL API takes (anonymous). */
export class GraphQLNeedsCredential extends AppError {
  constructor() {
    super(
      'GITHUB_GRAPHQL_NO_CREDENTIAL',
      'GitHub GraphQL needs a credential: set GITHUB_TOKEN, GITHUB_TOKENS or a GitHub App (anonymous requests are REST only)',
    );
  }
}
