import { sql } from 'kysely';
import { type Clock, systemClock } from '../clock.ts';
import type { Config } from '../config.ts';
import { int4Key, LockSpace } from '../db/locks.ts';
import type { Db } from '../db/pool.ts';
import type { RequestPurpose } from '../db/schema.ts';
import { faultPoint } from '../fault.ts';
import { parseJson } from '../json/exact.ts';
import type { Logger } from '../log.ts';
import { authBlocks } from './auth-blocks.ts';
import {
  type BudgetPolicy,
  type BudgetRefusal,
  budgetSnapshot,
  reserve,
  reserveIfFree,
} from './budget.ts';
import { type Authorization, buildCredentials, type Credential } from './credentials.ts';
import {
  BudgetExhausted,
  GitHubAuthFailed,
  GitHubRequestFailed,
  GitHubUnavailable,
  GitHubUnreachable,
  MalformedResponse,
  PoolRejected,
  RateLimited,
} from './errors.ts';
import { createRequestGate, type RequestGate } from './gate.ts';
import { createHttpFetch } from './http-fetch.ts';
import { InstallationTokenFailed } from './installation-tokens.ts';
import {
  releaseReservation,
  type Settlement,
  settle,
  settleAndUnlock,
  unsendAndUnlock,
} from './ledger.ts';
import { sentStatement, spacingMs } from './pacing.ts';
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
import type {
  GateHolder,
  GitHubClient,
  GitHubRequest,
  GitHubResponse,
  HeldAnswer,
  HeldDecision,
  HeldRequest,
  PoolDecision,
  PoolRefusal,
  Reservation,
} from './types.ts';

/**
 * The GitHub client over a pool of credentials (ADR 0003, ADR 0050): every request is
 * reserved on one credential's budget (the one with the most of its purpose's allowance
 * left), sent through that credential's request gate with that credential's Authorization,
 * and settled on that credential's ledger row and rate-limit row. With one credential
 * (GITHUB_TOKEN, anonymous, fixture) this is exactly the single-credential client.
 */

export interface GitHubClientOptions {
  config: Config;
  db: Db;
  /** The gate opens its own tiny pool on this URL (session locks need a dedicated connection). */
  databaseUrl: string;
  logger: Logger;
  clock?: Clock;
  /** Tests: replace the HTTP/fixture transport. */
  transport?: Transport;
  /** How to wait for an endpoint's pacing slot (tests pair it with `clock`). */
  sleep?: (ms: number) => Promise<void>;
}

const realSleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** What a request through the gate came back with (see conclude()). */
interface Sent<T> {
  answer: RawResponse | null;
  settlement: Settlement;
  durationMs: number;
  rateLimit: ReturnType<typeof parseRateLimit>;
  retried: boolean;
  result: GitHubResponse<T> | undefined;
  error: unknown;
  accepted: boolean;
}

/** The credential gave no header to send with (an installation without a token): nothing sent. */
interface Unauthorized {
  unauthorized: unknown;
}

/** Statuses that are answers about the resource, returned to the caller to decide. */
const RETURNED = new Set([304, 404, 410, 422]);

/**
 * How many busy gates reserveHeld steps past before it keeps a reservation unheld: each try
 * costs a statement in the caller's transaction, a fallback two commits of the gate's own.
 */
const MAX_BUSY_RETRIES = 4;

/** A 401 on an installation token younger than this is GitHub's replication lag, not a verdict. */
const FRESH_TOKEN_MS = 5_000;
/** How long to let a new token reach every GitHub front end before the one retry. */
const REPLICATION_WAIT_MS = 1_000;

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
  const sleep = opts.sleep ?? realSleep;
  const spacing = spacingMs(config.github.endpointRatePerMinute);
  const mode = config.github.mode;
  const httpFetch = createHttpFetch({
    connectTimeoutMs: config.github.connectTimeoutMs,
    responseTimeoutMs: config.github.responseTimeoutMs,
  });

  const transport =
    opts.transport ??
    (mode === 'fixture'
      ? fixtureTransport({ dir: config.github.fixturesDir, apiUrl: config.github.apiUrl })
      : liveTransport({
          apiUrl: config.github.apiUrl,
          userAgent: config.github.userAgent,
          fetch: httpFetch,
        }));
  // One gate per credential (and one per App for its token requests), opened on first use;
  // each holds one connection of its own.
  const gates = new Map<string, RequestGate>();
  let closed = false;
  const gateFor = (name: string): RequestGate => {
    if (closed) throw new Error('GitHub client is closed');
    let gate = gates.get(name);
    if (!gate) {
      gate = createRequestGate({
        db,
        databaseUrl: opts.databaseUrl,
        credential: name,
        waitSeconds: config.github.gateWaitSeconds,
        logger,
      });
      gates.set(name, gate);
    }
    return gate;
  };
  const pool = buildCredentials(config, { logger, fetch: httpFetch, gate: gateFor });
  const byLabel = new Map<string, Credential>(pool.map((c) => [c.label, c]));
  const labels = pool.map((c) => c.label);
  const policy: BudgetPolicy = {
    credentials: pool.map((c) => ({ label: c.label, defaultQuota: c.defaultQuota })),
    share: config.enrichment.share,
  };

  async function reserveOrNull(
    purpose: RequestPurpose,
    meta: Parameters<GitHubClient['reserve']>[1] = {},
  ) {
    return reserve(
      meta.trx ?? db,
      policy,
      purpose,
      {
        path: meta.path ? encodePath(meta.path) : undefined,
        jobId: meta.jobId,
        runId: meta.runId,
        entity: meta.entity,
        now: clock.now(),
      },
      meta.trx !== undefined,
    );
  }

  /** Turn an answer into a GitHubResponse or the error it stands for. */
  function classify<T>(
    path: string,
    raw: RawResponse,
    requestId: number,
    credential: string,
  ): GitHubResponse<T> {
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
    if (status === 401) throw new GitHubAuthFailed(path, undefined, credential);
    if (status >= 500) throw new GitHubUnavailable(path, status, `HTTP ${status}`);
    const retryAt = rateLimitRetryAt(status, headers, errorMessage(raw.body), clock.now());
    if (retryAt) throw new RateLimited(status, retryAt, path);
    throw new GitHubRequestFailed(path, status, errorMessage(raw.body) || 'unexpected status');
  }

  /**
   * An installation could not get a token: GitHub refused the App or the installation
   * (a 4xx: bad key or ID, uninstalled, suspended) — an auth failure of that credential,
   * on the auth ladder like a 401 — or the token endpoint failed (transient). Nothing was
   * sent with the reservation either way.
   */
  async function authorizationFailed(cred: Credential, path: string, err: unknown) {
    if (!(err instanceof InstallationTokenFailed)) return err;
    if (err.rejected) {
      const block = await recordAuthFailure(
        db,
        cred.label,
        clock.now(),
        cred.defaultQuota,
        err.message,
      );
      return new GitHubAuthFailed(path, block, cred.label);
    }
    return err.notSent
      ? new GitHubUnreachable(path, err.message, err, config.github.apiUrl)
      : new GitHubUnavailable(path, err.status, err.message, err);
  }

  /**
   * Sends with the credential's header. An installation token GitHub answers 401 to is
   * tried once more: within its first seconds GitHub may not know it everywhere yet
   * (replication), so the same token a second later; an older one may have been revoked
   * (or our clock is off), so a new token at once. Same ledger row: one logical request.
   */
  async function sendAs(
    cred: Credential,
    auth: Authorization,
    req: { path: string; etag: string | null },
  ): Promise<{ raw: RawResponse; retried: boolean }> {
    const send = (a: Authorization) =>
      transport.send({ method: 'GET', ...req, authorization: a.header });
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
  function conclude<T>(
    path: string,
    id: number,
    credential: string,
    raw: RawResponse | null,
    failure: unknown,
    retried: boolean,
    started: number,
  ): Sent<T> {
    const durationMs = Date.now() - started;
    const now = clock.now();
    const answer = raw;
    const rateLimit = answer ? parseRateLimit(answer.headers) : null;
    let result: GitHubResponse<T> | undefined;
    let error: unknown = failure;
    if (answer) {
      try {
        result = classify<T>(path, answer, id, credential);
      } catch (err) {
        error = err;
      }
    } else if (failure instanceof TransportFailure) {
      error = failure.reached
        ? new GitHubUnavailable(path, null, failure.message, failure.cause)
        : new GitHubUnreachable(path, failure.message, failure.cause, config.github.apiUrl);
    }
    const settlement: Settlement = {
      outcome: error ? 'error' : 'completed',
      status: answer?.status ?? null,
      reached: !(error instanceof GitHubUnreachable),
      durationMs,
      rateLimit,
      error: error ? (error as Error).message : undefined,
      now,
    };
    // A 2xx-4xx that is not a 401 means GitHub checked the credential and took it; a 5xx
    // (maybe from a proxy) or no answer says nothing about it.
    const accepted = answer !== null && answer.status < 500;
    return { answer, settlement, durationMs, rateLimit, retried, result, error, accepted };
  }

  /**
   * A refusal of the whole pool, with every credential's auth block when a 401 blocks each
   * one (so the caller can say which, since when and until when).
   */
  async function explain(d: BudgetRefusal): Promise<PoolRefusal> {
    if (d.reason !== 'blocked' || d.blockReason !== 'auth') return d;
    const blocks = await authBlocks(db, labels, clock.now());
    return blocks.length === pool.length ? { ...d, rejected: blocks } : d;
  }

  async function tryReserve(
    purpose: RequestPurpose,
    meta?: Parameters<GitHubClient['reserve']>[1],
  ): Promise<PoolDecision> {
    const d = await reserveOrNull(purpose, meta);
    return d.ok ? d : explain(d);
  }

  /**
   * One logical request on the pool. A 401 blocks the credential that got it (the auth
   * ladder) and the same request goes to another credential on a new reservation (the
   * ledger keeps the rejected row and the new one), until one answers or none is left:
   * then PoolRejected names every credential's block. One credential: its 401 stands.
   */
  async function request<T>(req: GitHubRequest): Promise<GitHubResponse<T>> {
    const path = encodePath(req.path);
    let reservation: Reservation | undefined = req.reservation;
    // A held request's 401 (settled by its caller) is this request's first rejection.
    if (req.rejected) logRejected(req, path, req.rejected);
    for (let tried = req.rejected ? 1 : 0; ; tried++) {
      if (!reservation) {
        const d = await tryReserve(req.purpose, { ...req, path });
        if (!d.ok) {
          if (tried > 0 && d.rejected) throw new PoolRejected(path, d.rejected);
          throw new BudgetExhausted(req.purpose, d.retryAt, d.reason, d.blockReason, d.rejected);
        }
        reservation = d.reservation;
      }
      try {
        return await requestOn<T>(req, path, reservation);
      } catch (err) {
        if (!(err instanceof GitHubAuthFailed) || pool.length === 1 || tried >= pool.length) {
          throw err;
        }
        logRejected(req, path, err);
        reservation = undefined;
      }
    }
  }

  /** A credential GitHub rejected (401) for this request; the request goes to another. */
  function logRejected(req: GitHubRequest, path: string, err: GitHubAuthFailed) {
    (req.jobId ? logger.child({ job_id: req.jobId }) : logger).warn(
      {
        event: 'github.credential_rejected',
        credential: err.credential,
        path,
        retry_at: err.retryAt?.toISOString() ?? null,
      },
      `GitHub rejected ${err.credential} (401) on ${path}; it is blocked until ${err.retryAt?.toISOString()}, trying another credential`,
    );
  }

  async function requestOn<T>(
    req: GitHubRequest,
    path: string,
    reservation: Reservation,
  ): Promise<GitHubResponse<T>> {
    const id = reservation.id;
    const cred = byLabel.get(reservation.credential);
    const giveBack = (reason: string) =>
      releaseReservation(db, id, reason, clock.now()).catch(() => {});
    if (!cred) {
      await giveBack('reserved on a credential this process does not hold');
      throw new Error(`reservation ${id} is for ${reservation.credential}, not in this pool`);
    }
    const credential = cred.label;
    const sentAt = { credential, path, method: 'GET', jobId: req.jobId, runId: req.runId };
    let outcome: Sent<T> | Unauthorized;
    try {
      outcome = await gateFor(credential).run<Sent<T> | Unauthorized>(
        async (entered) => {
          const slot = (entered[0]?.slot as Date | null | undefined) ?? null;
          if (!slot) {
            throw new Error(
              `github_requests ${id} is not an open reservation (already used, released or swept)`,
            );
          }
          return sendOnce<T>(cred, path, id, slot, req.etag ?? null);
        },
        {
          // Marked sent (and its pacing slot taken) in the lock's own statement.
          enter: (locked) =>
            sentStatement(locked, id, { ...sentAt, now: clock.now(), spacingMs: spacing }),
          // The usual answer is settled in the unlock's statement; a block (403/429, 401)
          // is written with its settle in a transaction after it.
          leave: (o, unlock) => {
            if ('unauthorized' in o) {
              const reason = (o.unauthorized as Error).message;
              return unsendAndUnlock(id, reason, clock.now(), unlock);
            }
            if (o.error instanceof RateLimited || o.error instanceof GitHubAuthFailed) return null;
            return settleAndUnlock(db, id, o.settlement, credential, o.accepted, unlock);
          },
        },
      );
    } catch (err) {
      // Nothing was sent (gate timeout, or the ledger refused): give the reservation back.
      await giveBack((err as Error).message);
      throw err;
    }
    faultPoint('github.after_settle');
    if ('unauthorized' in outcome) {
      // No token, so nothing was sent: the reservation went back unspent.
      throw await authorizationFailed(cred, path, outcome.unauthorized);
    }
    const { rateLimit, result, accepted } = outcome;
    let { error } = outcome;
    if (isBlock(error)) {
      // Settled with the block, in a transaction after the gate's unlock.
      error = await db.transaction().execute((trx) => writeBlock(trx, cred, id, path, outcome));
    } else if (accepted && !rateLimit) {
      // Settled with the unlock; an accepted answer without x-ratelimit-* (fixtures, some
      // proxies) still clears the auth ladder.
      await clearAuthFailures(db, credential);
    }

    logRequest(req, path, id, credential, outcome, error);
    if (error) throw error;
    return result!;
  }

  /** An answer that blocks its credential: a 403/429 rate limit, or a 401. */
  function isBlock(error: unknown): boolean {
    return error instanceof RateLimited || error instanceof GitHubAuthFailed;
  }

  /**
   * Settle an answer that blocks its credential, with the block, in `trx`. A 403/429 blocks
   * the credential for every process until GitHub's retry-after or reset; a 401 climbs the
   * auth ladder (1, 5, 15, 60 min) so no poll or cycle repeats it every tick. Either block is
   * this credential's: the rest of the pool carries on. Returns the error to throw.
   */
  async function writeBlock(
    trx: Db,
    cred: Credential,
    id: number,
    path: string,
    o: Sent<unknown>,
  ): Promise<unknown> {
    const { settlement, error } = o;
    await settle(trx, id, settlement, cred.label);
    if (error instanceof RateLimited) {
      await recordBlock(trx, cred.label, error.retryAt, cred.defaultQuota);
      return error;
    }
    cred.invalidate();
    const said = errorMessage(o.answer?.body ?? null) || 'Bad credentials';
    const block = await recordAuthFailure(
      trx,
      cred.label,
      settlement.now,
      cred.defaultQuota,
      `HTTP 401: ${said}`,
    );
    return new GitHubAuthFailed(path, block, cred.label);
  }

  /** The debug line every answered request writes (github.request). */
  function logRequest(
    req: { purpose: RequestPurpose; jobId?: string | null },
    path: string,
    id: number,
    credential: string,
    o: Sent<unknown>,
    error: unknown,
  ) {
    const { answer, settlement, durationMs, rateLimit, retried } = o;
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
        ...(retried ? { retried_after_401: true } : {}),
        rate_limit_remaining: rateLimit?.remaining ?? null,
        error: error ? (error as Error).message : undefined,
      },
      `GET ${path} → ${answer?.status ?? 'no answer'}`,
    );
  }

  /**
   * Send with the credential's header, once the gate is held and the row marked sent: what
   * came back, or that no header could be had (nothing sent). Shared by the gate path and the
   * held one.
   */
  async function sendOnce<T>(
    cred: Credential,
    path: string,
    id: number,
    slot: Date,
    etag: string | null,
  ): Promise<Sent<T> | Unauthorized> {
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
      ({ raw, retried } = await sendAs(cred, auth, { path, etag }));
    } catch (err) {
      failure = err;
    }
    return conclude<T>(path, id, cred.label, raw, failure, retried, started);
  }

  /** What a held answer carries for settleHeld. */
  interface HeldInternal {
    cred: Credential;
    outcome: Sent<unknown> | Unauthorized;
    purpose: RequestPurpose;
    jobId: string | null;
  }

  /**
   * Reserve in `trx` and hold the chosen credential's gate. When that gate is busy (another
   * poll chose the same credential from the same snapshot), another credential is tried, up to
   * MAX_BUSY_RETRIES times, never waiting for a budget lock (this transaction already holds
   * one: waiting could deadlock with another doing the same). The one held wins and the
   * reservations it replaced are taken back in the same transaction; none held, the first is
   * kept unheld, for request() to send through the gate as usual.
   */
  async function reserveHeld(
    purpose: RequestPurpose,
    holder: GateHolder,
    trx: Db,
    meta: { path: string; jobId?: string | null; runId?: number | null },
  ): Promise<HeldDecision> {
    const path = encodePath(meta.path);
    const row = { path, jobId: meta.jobId, runId: meta.runId };
    const first = await tryReserve(purpose, { ...row, trx });
    if (!first.ok) return first;
    const held = await hold(holder, trx, first.reservation, meta);
    if (held || pool.length === 1) return { ok: true, reservation: first.reservation, held };
    const busy = new Set<string>([first.reservation.credential]);
    const tried: Reservation[] = [];
    const takeBack = (rs: Reservation[]) =>
      rs.length === 0
        ? Promise.resolve()
        : sql`DELETE FROM github_requests WHERE id = ANY(${rs.map((r) => String(r.id))}::bigint[])
            AND outcome = 'reserved'`.execute(trx);
    while (busy.size < Math.min(MAX_BUSY_RETRIES + 1, pool.length)) {
      const d = await reserveIfFree(trx, policy, purpose, { ...row, now: clock.now() }, busy);
      if (!d?.ok) break;
      const next = await hold(holder, trx, d.reservation, meta);
      if (next) {
        await takeBack([first.reservation, ...tried]);
        return { ok: true, reservation: d.reservation, held: next };
      }
      tried.push(d.reservation);
      busy.add(d.reservation.credential);
    }
    await takeBack(tried);
    return { ok: true, reservation: first.reservation, held: null };
  }

  async function hold(
    holder: GateHolder,
    trx: Db,
    reservation: Reservation,
    meta: { path: string; jobId?: string | null; runId?: number | null },
  ): Promise<HeldRequest | null> {
    if (!byLabel.has(reservation.credential)) return null;
    const path = encodePath(meta.path);
    const gateKey = int4Key(reservation.credential);
    // A session holds one gate at a time: advisory locks are re-entrant, so a second take of
    // the same one would "succeed" and put two requests in flight.
    if (holder.gates.size > 0) {
      throw new Error(`a request gate is already held by this session (${[...holder.gates]})`);
    }
    // Recorded before the try: should the statement fail after taking it, the holder still
    // knows to release it.
    holder.gates.add(gateKey);
    const r = await sentStatement(
      sql`locked AS (SELECT 1 AS l WHERE pg_try_advisory_lock(${LockSpace.gate}, ${gateKey}))`,
      reservation.id,
      {
        credential: reservation.credential,
        path,
        method: 'GET',
        now: clock.now(),
        spacingMs: spacing,
        jobId: meta.jobId,
        runId: meta.runId,
      },
    ).execute(trx);
    if (r.rows.length === 0) {
      holder.gates.delete(gateKey);
      return null;
    }
    const slot = r.rows[0]!.slot;
    if (!slot) throw new Error(`github_requests ${reservation.id} is not an open reservation`);
    return { reservation, path, slot: new Date(slot), gateKey };
  }

  async function sendHeld<T>(
    held: HeldRequest,
    req: { etag?: string | null; jobId?: string | null },
  ): Promise<HeldAnswer<T>> {
    const cred = byLabel.get(held.reservation.credential)!;
    const id = held.reservation.id;
    const outcome = await sendOnce<T>(cred, held.path, id, held.slot, req.etag ?? null);
    const internal: HeldInternal = {
      cred,
      outcome: outcome as Sent<unknown> | Unauthorized,
      purpose: held.reservation.purpose,
      jobId: req.jobId ?? null,
    };
    if ('unauthorized' in outcome)
      return { held, response: null, error: outcome.unauthorized, internal };
    return {
      held,
      response: outcome.error ? null : outcome.result!,
      error: outcome.error,
      internal,
    };
  }

  async function settleHeld<T>(
    holder: GateHolder,
    trx: Db,
    answer: HeldAnswer<T>,
  ): Promise<{ response: GitHubResponse<T>; error: null } | { response: null; error: unknown }> {
    const { held } = answer;
    const { cred, outcome, purpose, jobId } = answer.internal as HeldInternal;
    const id = held.reservation.id;
    const credential = cred.label;
    const path = held.path;
    const unlock = sql`pg_advisory_unlock(${LockSpace.gate}, ${held.gateKey})`;
    const released = () => holder.gates.delete(held.gateKey);
    if ('unauthorized' in outcome) {
      await unsendAndUnlock(
        id,
        (outcome.unauthorized as Error).message,
        clock.now(),
        unlock,
      ).execute(trx);
      released();
      return { response: null, error: await authorizationFailed(cred, path, outcome.unauthorized) };
    }
    const { settlement, accepted, rateLimit } = outcome;
    let error = outcome.error;
    if (isBlock(error)) {
      error = await writeBlock(trx, cred, id, path, outcome);
      await sql`SELECT ${unlock}`.execute(trx);
    } else {
      await settleAndUnlock(trx, id, settlement, credential, accepted, unlock).execute(trx);
      if (accepted && !rateLimit) await clearAuthFailures(trx, credential);
    }
    released();
    logRequest({ purpose, jobId }, path, id, credential, outcome, error);
    return error
      ? { response: null, error }
      : { response: outcome.result as GitHubResponse<T>, error: null };
  }

  return {
    credential: pool[0]!.label,
    credentials: pool.map((c) => c.label),
    mode,
    async reserve(purpose, meta) {
      const d = await reserveOrNull(purpose, meta);
      return d.ok ? d.reservation : null;
    },
    tryReserve,
    reserveHeld,
    hold,
    sendHeld,
    settleHeld,
    async release(reservation) {
      await releaseReservation(db, reservation.id, 'released unused', clock.now());
    },
    request,
    budget: () => budgetSnapshot(db, policy, clock.now()),
    async close() {
      closed = true;
      await Promise.all([...gates.values()].map((g) => g.close()));
      gates.clear();
    },
  };
}
