import { createAppAuth } from '@octokit/auth-app';
import { Octokit } from '@octokit/rest';
import type { AppCredentials } from '../platform/config/credential-config.ts';
import { AppError } from '../platform/errors.ts';
import type { Logger } from '../platform/log.ts';
import { isRequestNotSent } from './http-fetch.ts';

/**
 * Installation access tokens of a GitHub App, one per installation, kept in this process's
 * memory only (never stored, never logged): @octokit/auth-app signs the App's JWT (RS256,
 * 10 minutes) and asks `POST /app/installations/{id}/access_tokens` under GITHUB_API_URL;
 * we keep the answer until shortly before it expires and ask again then, so no request
 * ever goes out with an expired token. Concurrent callers of one installation share one
 * request (single flight). auth-app's own cache is bypassed (`refresh: true`): it keeps a
 * token 59 minutes whatever its `expires_at` says.
 */

export interface InstallationToken {
  token: string;
  /** When we received it (ms since epoch): a 401 within seconds is replication lag. */
  issuedAt: number;
  /** GitHub's expires_at (ms since epoch). */
  expiresAt: number;
}

/** The token endpoint refused or failed; `status` is null when no answer came back. */
export class InstallationTokenFailed extends AppError {
  readonly status: number | null;
  /** True when nothing reached GitHub (DNS, connection refused): nothing was spent anywhere. */
  readonly notSent: boolean;
  constructor(
    installationId: number,
    status: number | null,
    detail: string,
    notSent: boolean,
    rateLimited = false,
  ) {
    super(
      'GITHUB_APP_TOKEN_FAILED',
      `could not get a token for GitHub App installation ${installationId}: ${detail}`,
      { installationId, status },
    );
    this.status = status;
    this.notSent = notSent;
    this.rejected = status !== null && status >= 400 && status < 500 && !rateLimited;
  }

  /**
   * GitHub refused the App or the installation (bad key or ID, uninstalled, suspended) —
   * unlike a rate limit on the token endpoint, which passes.
   */
  rejected = false;
}

/** Longest a token is used before its expiry: GitHub's tokens last an hour. */
const REFRESH_MARGIN_MS = 5 * 60_000;

/** When a token is due for replacement: 5 minutes before it expires, or at 3/4 of a short life. */
export function refreshAt(t: InstallationToken): number {
  const life = t.expiresAt - t.issuedAt;
  return t.expiresAt - Math.min(REFRESH_MARGIN_MS, Math.max(0, life) / 4);
}

export interface InstallationTokens {
  /** A token valid for a while yet: the cached one, or a new one. */
  get(installationId: number): Promise<InstallationToken>;
  /** GitHub rejected the cached token (revoked, or our clock is off): ask for a new one next time. */
  invalidate(installationId: number): void;
}

export function installationTokens(o: {
  app: AppCredentials;
  apiUrl: string;
  userAgent: string;
  fetch: typeof fetch;
  logger: Logger;
  /**
   * Runs one token request at a time for the App across every process (its own request
   * gate, `app:<id>`): GitHub asks for requests of one client ID to be made serially.
   */
  serially: <T>(fn: () => Promise<T>) => Promise<T>;
}): InstallationTokens {
  // Its own Octokit: the API transport reads bodies itself (parseSuccessResponseBody: false),
  // auth-app needs them parsed. Same HTTP stack (timeouts, keep-alive), no auth of its own.
  const octokit = new Octokit({
    baseUrl: o.apiUrl,
    userAgent: o.userAgent,
    log: { debug() {}, info() {}, warn() {}, error() {} },
    request: { fetch: o.fetch },
  });
  const auth = createAppAuth({
    appId: o.app.id,
    privateKey: o.app.privateKey,
    request: octokit.request,
    // auth-app warns about clock skew and 401 retries; it never prints a token, but keep it
    // to our vocabulary and level.
    log: {
      warn: (message: string) =>
        o.logger.warn({ event: 'github.app_auth_warning', detail: message }, message),
    },
  });
  const cache = new Map<number, InstallationToken>();
  const inFlight = new Map<number, Promise<InstallationToken>>();

  async function issue(installationId: number): Promise<InstallationToken> {
    const started = Date.now();
    try {
      const a = await o.serially(() =>
        auth({ type: 'installation', installationId, refresh: true }),
      );
      const t = { token: a.token, issuedAt: Date.now(), expiresAt: Date.parse(a.expiresAt) };
      cache.set(installationId, t);
      o.logger.debug(
        {
          event: 'github.installation_token',
          installation_id: installationId,
          expires_at: new Date(t.expiresAt).toISOString(),
          duration_ms: Date.now() - started,
        },
        `installation ${installationId}: new token, expires ${new Date(t.expiresAt).toISOString()}`,
      );
      return t;
    } catch (err) {
      if (err instanceof AppError) throw err; // the App's gate stayed busy (GateTimeout)
      const e = err as {
        status?: number;
        response?: { data?: unknown; headers?: Record<string, string | undefined> };
        cause?: unknown;
      };
      const answered = e.response !== undefined;
      const message =
        answered && typeof (e.response!.data as { message?: unknown })?.message === 'string'
          ? String((e.response!.data as { message: string }).message).slice(0, 200)
          : err instanceof Error
            ? err.message.slice(0, 200)
            : String(err);
      const rateLimited =
        e.status === 429 ||
        e.response?.headers?.['retry-after'] !== undefined ||
        /rate limit|abuse/i.test(message);
      const failure = new InstallationTokenFailed(
        installationId,
        answered ? (e.status ?? null) : null,
        answered ? `HTTP ${e.status}: ${message}` : message,
        !answered && isRequestNotSent(e.cause),
        rateLimited,
      );
      o.logger.warn(
        {
          event: 'github.installation_token_failed',
          installation_id: installationId,
          status: failure.status,
          error: failure.message,
        },
        failure.message,
      );
      throw failure;
    }
  }

  return {
    async get(installationId) {
      const cached = cache.get(installationId);
      if (cached && Date.now() < refreshAt(cached)) return cached;
      let pending = inFlight.get(installationId);
      if (!pending) {
        pending = issue(installationId).finally(() => inFlight.delete(installationId));
        inFlight.set(installationId, pending);
      }
      return pending;
    },
    invalidate(installationId) {
      cache.delete(installationId);
    },
  };
}
