import { logHeaderNotes, type RateLimitState } from '../github/answer-headers.ts';
import { type AnswerReader, errorMessage } from '../github/classify.ts';
import type { Authorization, Credential } from '../github/credentials.ts';
import {
  GitHubAuthFailed,
  GitHubUnavailable,
  GitHubUnreachable,
  RateLimited,
} from '../github/errors.ts';
import { InstallationTokenFailed } from '../github/installation-tokens.ts';
import type { RequestMethod } from '../github/request-kind.ts';
import { type RawResponse, TransportFailure, unavailableFrom } from '../github/transport.ts';
import type { RequestPurpose } from '../platform/db/columns.ts';
import type { Db } from '../platform/db/pool.ts';
import { faultPoint } from '../platform/fault.ts';
import { type ClientContext, defaultQuotaOf, keysOf } from './client-context.ts';
import { type Settlement, settle } from './ledger.ts';
import { recordAuthFailure, recordBlock } from './rate-limits.ts';

/**
 * Sending one request once its ledger row is marked sent (by the gate's statement or a held
 * request's): the credential's header, the transport, and the answer turned into a result or
 * an error and its settlement — for REST and GraphQL alike, each reading its answer its own
 * way (AnswerReader). Also what an answer that blocks its credential writes.
 */

/** What goes out: a REST GET (maybe conditional) or a GraphQL POST with its JSON body. */
export interface Outgoing {
  method: RequestMethod;
  path: string;
  etag: string | null;
  /** A POST's JSON body; never logged. */
  body?: string | null;
}

/** What a request through the gate came back with (see conclude()). */
export interface Sent<R> {
  answer: RawResponse | null;
  settlement: Settlement;
  durationMs: number;
  rateLimit: RateLimitState | null;
  retried: boolean;
  result: R | undefined;
  error: unknown;
  accepted: boolean;
}

/** The credential gave no header to send with (an installation without a token): nothing sent. */
export interface Unauthorized {
  unauthorized: unknown;
}

/** A 401 on an installation token younger than this is GitHub's replication lag, not a verdict. */
const FRESH_TOKEN_MS = 5_000;
/** How long to let a new token reach every GitHub front end before the one retry. */
const REPLICATION_WAIT_MS = 1_000;

/** An answer that blocks its credential: a 403/429 rate limit, or a 401. */
export function isBlock(error: unknown): boolean {
  return error instanceof RateLimited || error instanceof GitHubAuthFailed;
}

export type Sender = ReturnType<typeof createSender>;

export function createSender(ctx: ClientContext) {
  const { config, db, logger, clock, sleep, transport } = ctx;

  /**
   * Sends with the credential's header. An installation token GitHub answers 401 to is
   * tried once more: within its first seconds GitHub may not know it everywhere yet
   * (replication), so the same token a second later; an older one may have been revoked
   * (or our clock is off), so a new token at once. Same ledger row: one logical request.
   */
  async function sendAs(
    cred: Credential,
    auth: Authorization,
    out: Outgoing,
  ): Promise<{ raw: RawResponse; retried: boolean }> {
    const send = (a: Authorization) => transport.send({ ...out, authorization: a.header });
    const raw = await send(auth);
    if (raw.status !== 401 || cred.kind !== 'installation') return { raw, retried: false };
    const fresh = auth.issuedAt !== null && Date.now() - auth.issuedAt < FRESH_TOKEN_MS;
    if (fresh) await new Promise((r) => setTimeout(r, REPLICATION_WAIT_MS));
    else cred.invalidate();
    let again: Authorization;
    try {
      again = await cred.authorize();
    } catch {
      return { raw, retried: false }; // the 401 stands; the next request asks again
    }
    return { raw: await send(again), retried: true };
  }

  /** An answer (or none) turned into the caller's result or error, and its ledger settlement. */
  function conclude<R>(
    path: string,
    credential: string,
    raw: RawResponse | null,
    failure: unknown,
    retried: boolean,
    started: number,
    reader: AnswerReader<R>,
  ): Sent<R> {
    const durationMs = Date.now() - started;
    const now = clock.now();
    const answer = raw;
    // A header clamped or ignored (retry-after past an hour, X-Poll-Interval 1e10): at warn.
    if (answer) logHeaderNotes(logger, answer.headers, now, { path, credential });
    let result: R | undefined;
    let error: unknown = failure;
    if (answer) {
      try {
        result = reader.classify(answer);
      } catch (err) {
        error = err;
      }
    } else if (failure instanceof TransportFailure) {
      error = failure.reached
        ? unavailableFrom(path, failure)
        : new GitHubUnreachable(path, failure.message, failure.cause, config.github.apiUrl);
    }
    const rateLimit = answer ? reader.rateLimit(answer, now, result) : null;
    const points = reader.points?.(result, answer);
    const settlement: Settlement = {
      outcome: error ? 'error' : 'completed',
      // An answer refused while read (too large, too late) still had a status: it was spent.
      status:
        answer?.status ??
        (failure instanceof TransportFailure ? failure.refused?.status : null) ??
        null,
      reached: !(error instanceof GitHubUnreachable),
      durationMs,
      rateLimit,
      error: error ? (error as Error).message : undefined,
      ...(points === undefined ? {} : { points }),
      now,
    };
    // A 2xx-4xx that is not a 401 means GitHub checked the credential and took it; a 5xx
    // (maybe from a proxy) or no answer says nothing about it.
    const accepted = answer !== null && answer.status < 500;
    return { answer, settlement, durationMs, rateLimit, retried, result, error, accepted };
  }

  /**
   * Send with the credential's header, once the gate is held and the row marked sent: what
   * came back, or that no header could be had (nothing sent). Shared by the gate path, the
   * held one and GraphQL.
   */
  async function sendOnce<R>(
    cred: Credential,
    out: Outgoing,
    slot: Date,
    reader: AnswerReader<R>,
  ): Promise<Sent<R> | Unauthorized> {
    // Marked sent (it may spend quota from here on), not sent yet.
    faultPoint('github.after_sent');
    // Spread within the secondary limit: this endpoint's slot on this credential.
    const wait = slot.getTime() - clock.now().getTime();
    if (wait > 0) await sleep(wait);
    // The header right before sending, once the gate is ours: an installation token is
    // checked (and replaced when due) after any wait for the gate, never before it.
    let auth: Authorization;
    try {
      auth = await cred.authorize();
    } catch (err) {
      return { unauthorized: err };
    }
    const started = Date.now();
    let raw: RawResponse | null = null;
    let retried = false;
    let failure: unknown = null;
    try {
      ({ raw, retried } = await sendAs(cred, auth, out));
    } catch (err) {
      failure = err;
    }
    return conclude<R>(out.path, cred.label, raw, failure, retried, started, reader);
  }

  /** Climb the auth ladder on every key of the credential (a 401 on either blocks both). */
  async function blockAuth(trx: Db, cred: Credential, key: string, now: Date, reason: string) {
    let mine: Awaited<ReturnType<typeof recordAuthFailure>> | undefined;
    for (const k of keysOf(cred)) {
      const b = await recordAuthFailure(trx, k, now, defaultQuotaOf(cred, k), reason);
      if (k === key) mine = b;
    }
    return mine;
  }

  /**
   * An installation could not get a token: GitHub refused the App or the installation
   * (a 4xx: bad key or ID, uninstalled, suspended) — an auth failure of that credential,
   * on the auth ladder like a 401 — or the token endpoint failed (transient). Nothing was
   * sent with the reservation either way.
   */
  async function authorizationFailed(cred: Credential, key: string, path: string, err: unknown) {
    if (!(err instanceof InstallationTokenFailed)) return err;
    if (err.rejected) {
      const block = await db
        .transaction()
        .execute((trx) => blockAuth(trx, cred, key, clock.now(), err.message));
      return new GitHubAuthFailed(path, block, cred.label);
    }
    return err.notSent
      ? new GitHubUnreachable(path, err.message, err, config.github.apiUrl)
      : new GitHubUnavailable(path, err.status, err.message, err);
  }

  /**
   * Settle an answer that blocks its key, with the block, in `trx`. A 403/429 blocks the key
   * (REST or GraphQL: the other goes on) for every process until GitHub's retry-after or
   * reset; a 401 climbs the auth ladder (1, 5, 15, 60 min) of both keys of the credential,
   * so no poll or cycle repeats it every tick. Either block is this credential's: the rest of
   * the pool carries on. Returns the error to throw.
   */
  async function writeBlock(
    trx: Db,
    cred: Credential,
    key: string,
    id: number,
    path: string,
    o: Sent<unknown>,
  ): Promise<unknown> {
    const { settlement, error } = o;
    await settle(trx, id, settlement, key);
    if (error instanceof RateLimited) {
      await recordBlock(trx, key, error.retryAt, defaultQuotaOf(cred, key));
      return error;
    }
    cred.invalidate();
    const said = errorMessage(o.answer?.body ?? null) || 'Bad credentials';
    const block = await blockAuth(trx, cred, key, settlement.now, `HTTP 401: ${said}`);
    return new GitHubAuthFailed(path, block, cred.label);
  }

  /** The debug line every answered request writes (github.request). */
  function logRequest(
    req: { purpose: RequestPurpose; jobId?: string | null },
    method: RequestMethod,
    path: string,
    id: number,
    credential: string,
    o: Sent<unknown>,
    error: unknown,
    extra: Record<string, unknown> = {},
  ) {
    const { answer, settlement, durationMs, rateLimit, retried } = o;
    (req.jobId ? logger.child({ job_id: req.jobId }) : logger).debug(
      {
        event: 'github.request',
        method,
        path,
        purpose: req.purpose,
        status: answer?.status ?? null,
        counted: answer ? answer.status !== 304 : settlement.reached ? null : false,
        duration_ms: durationMs,
        request_id: id,
        credential,
        ...extra,
        ...(retried ? { retried_after_401: true } : {}),
        rate_limit_remaining: rateLimit?.remaining ?? null,
        error: error ? (error as Error).message : undefined,
      },
      `${method} ${path} → ${answer?.status ?? 'no answer'}`,
    );
  }

  return { sendOnce, authorizationFailed, writeBlock, logRequest };
}
