/**
 * The GitHub layer's contract, shared by ingestion and enrichment. Implemented in
 * src/budget/client.ts (live: octokit over HTTP; fixture: files) — every request passes
 * the request gate and has a github_requests ledger row reserved before it is sent.
 */

import type { GitHubResponse } from '../github/classify.ts';
import type { AuthBlock, GitHubAuthFailed } from '../github/errors.ts';
import type { GraphQLAnswer } from '../github/graphql-answer.ts';
import type { RequestPurpose } from '../platform/db/columns.ts';
import type { Db } from '../platform/db/pool.ts';
import type {
  BudgetDecision,
  BudgetRefusal,
  EntityClass,
  PoolBudget,
  Reservation,
} from './types.ts';

export interface GitHubRequest {
  purpose: RequestPurpose;
  /** Path and query relative to GITHUB_API_URL, e.g. `/repos/octocat/Hello-World/events?per_page=100&page=1`. */
  path: string;
  /** Sent as If-None-Match (verbatim, quotes and W/ included). */
  etag?: string | null;
  /** A reservation made earlier (enrichment reserves before fetching); else one is made now. */
  reservation?: Reservation;
  jobId?: string | null;
  runId?: number | null;
  entity?: { class: EntityClass; id: string | number };
  /**
   * GitHub already rejected this request on another credential (a held request's 401, settled
   * by its caller): logged, and counted as request()'s first try, so a pool then refused for
   * auth blocks is PoolRejected.
   */
  rejected?: GitHubAuthFailed;
}

/**
 * One GraphQL query (ADR 0110, ADR 0114): POST /graphql on a credential's `#graphql` budget
 * key, with `points` (its estimated cost, >= 1) reserved before it is sent. Commits only:
 * polls and enrichment are REST.
 */
export interface GraphQLRequest {
  purpose: 'commits';
  query: string;
  variables?: Record<string, unknown>;
  /** The estimate reserved before sending (an integer >= 1). */
  points: number;
  jobId?: string | null;
  runId?: number | null;
  /**
   * Run once the query is marked sent (its gate held), right before it goes out: what the
   * caller records as in flight is in flight from here (a batch's pushes, ADR 0182). Not run
   * when the query never leaves (the budget, the gate, no token).
   */
  beforeSend?: () => Promise<void>;
}

/** The pool said no; `rejected` lists every credential's auth block when a 401 blocks each. */
export type PoolRefusal = BudgetRefusal & { rejected?: readonly AuthBlock[] };

export type PoolDecision = Extract<BudgetDecision, { ok: true }> | PoolRefusal;

/**
 * A request reserved in the caller's transaction whose credential's gate the caller's
 * session now holds, marked sent with its pacing slot in that same transaction (ADR 0082):
 * once it commits, the request may leave at `slot`. Its answer is settled, and the gate
 * released, by a later transaction of the same session (settleHeld).
 */
export interface HeldRequest {
  reservation: Reservation;
  /** The path as sent (encoded). */
  path: string;
  /** When it may leave (the endpoint's pacing slot on this credential). */
  slot: Date;
  /** The gate's advisory lock key, held by the caller's session until settleHeld. */
  gateKey: number;
}

/** reserveHeld's answer: refused, reserved and held, or reserved only (the gate was busy). */
export type HeldDecision =
  | PoolRefusal
  | { ok: true; reservation: Reservation; held: HeldRequest | null };

/** What came back for a held request, not yet written anywhere (settleHeld writes it). */
export interface HeldAnswer<T = unknown> {
  readonly held: HeldRequest;
  /** The response, when the answer is one (2xx, 304, 404, 410, 422); else null. */
  readonly response: GitHubResponse<T> | null;
  /** The error the answer stands for (5xx, 401, 403/429, timeout, no token...), else null. */
  readonly error: unknown;
  /** @internal what settleHeld needs */
  readonly internal: unknown;
}

/** The session a held request's gate lives on: the keys it may hold (ADR 0082). */
export interface GateHolder {
  db: Db;
  gates: Set<number>;
}

export interface GitHubClient {
  /** The first credential's label: with a single credential (the usual case), the one. */
  readonly credential: string;
  /** Every credential of the pool, in configuration order (labels, never secrets). */
  readonly credentials: readonly string[];
  readonly mode: 'live' | 'fixture';
  /**
   * Reserve budget for one request of `purpose` on the credential with the most of that
   * purpose's allowance left. Returns null when every credential says no (purpose
   * allowance spent, observed remaining exhausted, or blocked until a reset).
   */
  reserve(
    purpose: RequestPurpose,
    meta?: {
      jobId?: string | null;
      runId?: number | null;
      entity?: { class: EntityClass; id: string | number };
      path?: string;
      /**
       * Reserve inside this transaction of the caller's (it holds the budget lock until it
       * commits, and the row is undone if it rolls back): a poll opens its run with it.
       */
      trx?: Db;
    },
  ): Promise<Reservation | null>;
  /**
   * reserve() with the reason when the pool says no: which rule (allowance, remaining,
   * blocked — and for a block, rate_limit or auth) and when the first credential frees
   * (retryAt); when every credential is blocked by a 401, `rejected` says which, since when
   * and until when.
   */
  tryReserve(
    purpose: RequestPurpose,
    meta?: Parameters<GitHubClient['reserve']>[1],
  ): Promise<PoolDecision>;
  /** Give back a reservation that will not be used (claim released, shutdown). */
  release(reservation: Reservation): Promise<void>;
  /**
   * Send one request through the gate. Throws BudgetExhausted (no reservation and the
   * budget says no), GateTimeout, RateLimited (403/429 budget events, never data),
   * GitHubUnavailable (5xx, timeout, connection error), MalformedResponse (2xx with a
   * body that is not JSON), GitHubAuthFailed (401; in a pool only once no other credential
   * is left to try: PoolRejected), FixtureMiss (fixture mode).
   */
  request<T = unknown>(req: GitHubRequest): Promise<GitHubResponse<T>>;
  /**
   * tryReserve() in `holder`'s transaction `trx` and, when the chosen credential's gate is
   * free, take it on that session and mark the request sent with its pacing slot — so a poll's
   * first transaction also carries its request's sent mark (ADR 0082). The gate is a session
   * lock: it outlives the transaction, and `holder.gates` records it before it is taken.
   * `held: null`: the gate was busy; send the reservation with request() as usual.
   */
  reserveHeld(
    purpose: RequestPurpose,
    holder: GateHolder,
    trx: Db,
    meta: { path: string; jobId?: string | null; runId?: number | null },
  ): Promise<HeldDecision>;
  /**
   * The second half of reserveHeld, for a reservation made earlier in the same transaction
   * (a poll reserves, opens its run, then holds): null when the gate is busy, or when the
   * holder already holds one.
   */
  hold(
    holder: GateHolder,
    trx: Db,
    reservation: Reservation,
    meta: { path: string; jobId?: string | null; runId?: number | null },
  ): Promise<HeldRequest | null>;
  /** Send a held request once its transaction committed: waits for its slot; writes nothing. */
  sendHeld<T = unknown>(
    held: HeldRequest,
    req: { etag?: string | null; jobId?: string | null },
  ): Promise<HeldAnswer<T>>;
  /**
   * Write a held request's answer in `trx` (a transaction of the holder's session): the ledger
   * row, the rate-limit row, any block; and release its gate in the same statement. Nothing
   * is thrown for the answer itself: `error` is what request() would have thrown.
   */
  settleHeld<T>(
    holder: GateHolder,
    trx: Db,
    answer: HeldAnswer<T>,
  ): Promise<{ response: GitHubResponse<T>; error: null } | { response: null; error: unknown }>;
  /** True when the pool has a credential GraphQL accepts (a token, an installation, fixture). */
  readonly graphqlEnabled: boolean;
  /**
   * One GraphQL query on the credential with the most of its `#graphql` window left, through
   * that key's gate, paced by points. Throws like request(): BudgetExhausted, RateLimited
   * (403/429, secondary limits, a 200 of type RATE_LIMITED), GitHubUnavailable (5xx, 502,
   * timeouts), MalformedResponse, GitHubAuthFailed / PoolRejected, FixtureMiss, and
   * GraphQLNeedsCredential when the pool is anonymous. A 200 whose errors include
   * RESOURCE_LIMITS_EXCEEDED is returned with its partial data.
   */
  graphql<T = unknown>(req: GraphQLRequest): Promise<GraphQLAnswer<T>>;
  /** The pool's total (BudgetSnapshot fields) and each credential's budget (`credentials`). */
  budget(): Promise<PoolBudget>;
  close(): Promise<void>;
}
