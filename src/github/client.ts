import { type Clock, systemClock } from '../clock.ts';
import type { Config } from '../config.ts';
import type { Db } from '../db/pool.ts';
import type { RequestPurpose } from '../db/schema.ts';
import { parseJson } from '../json/exact.ts';
import type { Logger } from '../log.ts';
import { type BudgetPolicy, budgetSnapshot, reserve } from './budget.ts';
import { credentialOf, defaultQuota } from './credential.ts';
import {
  BudgetExhausted,
  GitHubAuthFailed,
  GitHubRequestFailed,
  GitHubUnavailable,
  GitHubUnreachable,
  MalformedResponse,
  RateLimited,
} from './errors.ts';
import { createRequestGate } from './gate.ts';
import { markSent, releaseReservation, settle } from './ledger.ts';
import {
  clearAuthFailures,
  parseRateLimit,
  rateLimitRetryAt,
  recordAuthFailure,
  recordBlock,
} from './rate-limit.ts';
import {
  fixtureTransport,
  liveTransport,
  type RawResponse,
  type Transport,
  TransportFailure,
} from './transport.ts';
import type { GitHubClient, GitHubRequest, GitHubResponse, Reservation } from './types.ts';

export interface GitHubClientOptions {
  config: Config;
  db: Db;
  /** The gate opens its own tiny pool on this URL (session locks need a dedicated connection). */
  databaseUrl: string;
  logger: Logger;
  clock?: Clock;
  /** Tests: replace the HTTP/fixture transport. */
  transport?: Transport;
}

/** Statuses that are answers about the resource, returned to the caller to decide. */
const RETURNED = new Set([304, 404, 410, 422]);

/** `[` and `]` are legal in a WHATWG path but GitHub wants them encoded (`dependabot%5Bbot%5D`). */
function encodePath(p: string): string {
  return p.replace(/\[/g, '%5B').replace(/\]/g, '%5D');
}

function errorMessage(body: string | null): string {
  if (!body) return '';
  try {
    const m = (JSON.parse(body) as { message?: unknown }).message;
    return typeof m === 'string' ? m : '';
  } catch {
    return body.slice(0, 200);
  }
}

export function createGitHubClient(opts: GitHubClientOptions): GitHubClient {
  const { config, db, logger } = opts;
  const clock = opts.clock ?? systemClock;
  const mode = config.github.mode;
  const credential = credentialOf(mode, config.github.token);
  const policy: BudgetPolicy = { credential, share: config.enrichment.share };
  const transport =
    opts.transport ??
    (mode === 'fixture'
      ? fixtureTransport({ dir: config.github.fixturesDir, apiUrl: config.github.apiUrl })
      : liveTransport({
          apiUrl: config.github.apiUrl,
          token: config.github.token,
          userAgent: config.github.userAgent,
          connectTimeoutMs: config.github.connectTimeoutMs,
          responseTimeoutMs: config.github.responseTimeoutMs,
        }));
  const gate = createRequestGate({
    databaseUrl: opts.databaseUrl,
    credential,
    waitSeconds: config.github.gateWaitSeconds,
    logger,
  });

  async function reserveOrNull(
    purpose: RequestPurpose,
    meta: Parameters<GitHubClient['reserve']>[1] = {},
  ) {
    return reserve(db, policy, purpose, {
      path: meta.path ? encodePath(meta.path) : undefined,
      jobId: meta.jobId,
      runId: meta.runId,
      entity: meta.entity,
      now: clock.now(),
    });
  }

  /** Turn an answer into a GitHubResponse or the error it stands for. */
  function classify<T>(path: string, raw: RawResponse, requestId: number): GitHubResponse<T> {
    const { status, headers } = raw;
    const base = {
      status,
      etag: headers.etag ?? null,
      pollInterval: headers['x-poll-interval'] ? Number(headers['x-poll-interval']) || null : null,
      rateLimit: parseRateLimit(headers),
      url: raw.url,
      requestId,
      counted: status !== 304,
    };
    if (status >= 200 && status < 300) {
      if (raw.body === null || raw.body === '') return { ...base, data: undefined };
      try {
        // Exact: 64-bit ids keep every digit (src/json/exact.ts).
        return { ...base, data: parseJson(raw.body) as T };
      } catch (err) {
        throw new MalformedResponse(
          path,
          `HTTP ${status} body is not JSON (${raw.body.length} bytes)`,
          err,
          status,
        );
      }
    }
    if (RETURNED.has(status)) return { ...base, data: undefined };
    if (status === 401) throw new GitHubAuthFailed(path);
    if (status >= 500) throw new GitHubUnavailable(path, status, `HTTP ${status}`);
    const retryAt = rateLimitRetryAt(status, headers, errorMessage(raw.body), clock.now());
    if (retryAt) throw new RateLimited(status, retryAt, path);
    throw new GitHubRequestFailed(path, status, errorMessage(raw.body) || 'unexpected status');
  }

  async function request<T>(req: GitHubRequest): Promise<GitHubResponse<T>> {
    const path = encodePath(req.path);
    let reservation: Reservation | undefined = req.reservation;
    if (!reservation) {
      const d = await reserveOrNull(req.purpose, { ...req, path });
      if (!d.ok) throw new BudgetExhausted(req.purpose, d.retryAt, d.reason, d.blockReason);
      reservation = d.reservation;
    }
    const id = reservation.id;
    const started = Date.now();
    let raw: RawResponse | null = null;
    let failure: unknown = null;
    try {
      await gate.run(async () => {
        await markSent(db, id, {
          path,
          method: 'GET',
          now: clock.now(),
          jobId: req.jobId,
          runId: req.runId,
        });
        try {
          raw = await transport.send({ method: 'GET', path, etag: req.etag ?? null });
        } catch (err) {
          failure = err;
        }
      });
    } catch (err) {
      // Nothing was sent (gate timeout, or the ledger refused): give the reservation back.
      await releaseReservation(db, id, (err as Error).message, clock.now()).catch(() => {});
      throw err;
    }
    const durationMs = Date.now() - started;
    const now = clock.now();
    const answer = raw as RawResponse | null;
    const rateLimit = answer ? parseRateLimit(answer.headers) : null;

    let result: GitHubResponse<T> | undefined;
    let error: unknown = failure;
    if (answer) {
      try {
        result = classify<T>(path, answer, id);
      } catch (err) {
        error = err;
      }
    } else if (failure instanceof TransportFailure) {
      error = failure.reached
        ? new GitHubUnavailable(path, null, failure.message, failure.cause)
        : new GitHubUnreachable(path, failure.message, failure.cause);
    }

    const settlement = {
      outcome: error ? ('error' as const) : ('completed' as const),
      status: answer?.status ?? null,
      reached: !(error instanceof GitHubUnreachable),
      durationMs,
      rateLimit,
      error: error ? (error as Error).message : undefined,
      now,
    };
    // A 403/429 blocks the credential for every process until GitHub's retry-after/reset;
    // a 401 climbs the auth ladder (1, 5, 15, 60 min) so no poll or cycle repeats it every
    // tick; any other answer proves the credential is accepted and clears that ladder.
    if (error instanceof RateLimited) {
      const until = error.retryAt;
      await db.transaction().execute(async (trx) => {
        await settle(trx, id, settlement, credential);
        await recordBlock(trx, credential, until, defaultQuota(credential));
      });
    } else if (error instanceof GitHubAuthFailed) {
      const block = await db.transaction().execute(async (trx) => {
        await settle(trx, id, settlement, credential);
        return recordAuthFailure(trx, credential, now, defaultQuota(credential));
      });
      error = new GitHubAuthFailed(path, block);
    } else {
      // The usual case: settle and the rate-limit upsert are one statement.
      // A 2xx-4xx that is not a 401 means GitHub checked the credential and took it; a 5xx
      // (maybe from a proxy) or no answer says nothing about it.
      const accepted = answer !== null && answer.status < 500;
      await settle(db, id, settlement, credential, accepted);
      if (accepted && !rateLimit) await clearAuthFailures(db, credential);
    }

    (req.jobId ? logger.child({ job_id: req.jobId }) : logger).debug(
      {
        event: 'github.request',
        method: 'GET',
        path,
        purpose: req.purpose,
        status: answer?.status ?? null,
        counted: answer ? answer.status !== 304 : settlement.reached ? null : false,
        duration_ms: durationMs,
        request_id: id,
        credential,
        rate_limit_remaining: rateLimit?.remaining ?? null,
        error: error ? (error as Error).message : undefined,
      },
      `GET ${path} → ${answer?.status ?? 'no answer'}`,
    );
    if (error) throw error;
    return result!;
  }

  return {
    credential,
    mode,
    async reserve(purpose, meta) {
      const d = await reserveOrNull(purpose, meta);
      return d.ok ? d.reservation : null;
    },
    tryReserve: reserveOrNull,
    async release(reservation) {
      await releaseReservation(db, reservation.id, 'released unused', clock.now());
    },
    request,
    budget: () => budgetSnapshot(db, policy, clock.now()),
    close: () => gate.close(),
  };
}
