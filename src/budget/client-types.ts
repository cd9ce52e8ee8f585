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
import type { Logger } from '../platform/log.ts';
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
 * One GraphQL query: POST /graphql on a credential's `#graphql` budget
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
   * caller records as in flight is in flight from here (a batch's pushes). Not run
   * when the query never leaves (the budget, the gate, no token).
   */
  beforeSend?: () => Promise<void>;
}

/** The pool said no; `rejected` lists every credential's auth block when a 401 blocks each. */
export type PoolRefusal = BudgetRefusal & { rejected?: readonly AuthBlock[] };

export type PoolDecision = Extract<BudgetDecision, { ok: true }> | PoolRefusal;

/**
 * A request reserved in the caller's transaction whose credential's gate the caller's
 * session now holds, marked sent with its pacing slot in that same transaction:
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

/** The session a held request's gate lives on, and the keys it holds (poll-session.ts owns it). */
export interface GateHolder {
  db: Db;
  gates: Set<number>;
}

/** What a poll request's ledger row records. */
export type PollRequestMeta = { path: string; jobId?: string | null; runId?: number | null };

export interface PollSession {
  /**
   * Reserve one poll request in `trx` (a transaction on this session) and, when its
   * credential's gate is free, take that gate on this session and mark the request sent with
   * its pacing slot in the same transaction. `held: null`: every gate tried was busy; send()
   * then goes through the gate as any request does.
   */
  reserveAndHold(trx: Db, meta: PollRequestMeta): Promise<HeldDecision>;
  /**
   * The opening transaction committed with a request held: from here the first time this
   * session holds no gate (that answer settled) gives its pass ticket back.
   */
  watchGates(): void;
  /**
   * Send one request. Held: on the gate its reservation's transaction took; an answer
   * `keep(status)` calls data is kept for this session's next transaction to write (settle),
   * anything else is written at once in a transaction of its own and thrown (a 401 in a pool:
   * the request goes to another credential, as request() does). Not held: request().
   */
  send(
    req: GitHubRequest,
    held: HeldRequest | null,
    keep: (status: number) => boolean,
  ): Promise<GitHubResponse>;
  /**
   * In a transaction of this session: write the kept answer (its gate released in the same
   * statement), and release any other gate the session still holds — one a rolled-back
   * transaction took for a request it never made. Returns the kept answer's error, if any.
   * `tolerant` (a failing run's last transaction): an answer the database refuses is left
   * `sent` for the sweep, in a savepoint, so the failure itself still commits.
   */
  settle(trx: Db, opts?: { tolerant?: boolean }): Promise<unknown>;
  /** The transaction that settled committed: the kept answer is written, forget it. */
  settled(): void;
  /**
   * The poll's end, outside any transaction: release every gate still held (a finalize that
   * could not run). Throws when the session cannot: the caller then drops its connection,
   * which ends the session and its locks with it.
   */
  release(): Promise<void>;
}

export interface PollSessionOptions {
  /** Where a kept answer the database refused is reported (`github.settle_failed`). */
  logger: Logger;
  /** This poll's ticket of its pass (pollPass), given back once it no longer holds a gate. */
  ticket?: (() => void) | null;
}

/** A pass of polls' places at the request gates: one a credential (src/budget/gate-tickets.ts). */
export interface PollPass {
  /** Waits for a place; the function returned gives it back (once, however often called). */
  take(): Promise<() => void>;
}

/** Where a reservation's ledger row says it is from. */
export interface ReserveMeta {
  jobId?: string | null;
  runId?: number | null;
  entity?: { class: EntityClass; id: string | number };
  path?: string;
  /**
   * Reserve inside this transaction of the caller's (it holds the budget lock until it
   * commits, and the row is undone if it rolls back).
   */
  trx?: Db;
}

export interface GitHubClient {
  /** The first credential's label: with a single credential (the usual case), the one. */
  readonly credential: string;
  /** Every credential of the pool, in configuration order (labels, never secrets). */
  readonly credentials: readonly string[];
  readonly mode: 'live' | 'fixture';
  /**
   * Reserve budget for one request of `purpose` on the credential with the most of that
   * purpose's allowance left; when every credential says no, the reason: which rule
   * (allowance, remaining, blocked — and for a block, rate_limit or auth) and when the first
   * credential frees (retryAt); when every credential is blocked by a 401, `rejected` says
   * which, since when and until when.
   */
  tryReserve(purpose: RequestPurpose, meta?: ReserveMeta): Promise<PoolDecision>;
  /**
   * Send one request through the gate. Throws BudgetExhausted (no reservation and the
   * budget says no), GateTimeout, RateLimited (403/429 budget events, never data),
   * GitHubUnavailable (5xx, timeout, connection error), MalformedResponse (2xx with a
   * body that is not JSON), GitHubAuthFailed (401; in a pool only once no other credential
   * is left to try: PoolRejected), FixtureMiss (fixture mode).
   */
  request<T = unknown>(req: GitHubRequest): Promise<GitHubResponse<T>>;
  /**
   * A poll's requests on `db`, a connection the poll keeps for its whole run (its session):
   * reserve-and-hold, send, settle and release, the gates owned by the session.
   */
  pollSession(db: Db, opts: PollSessionOptions): PollSession;
  /** A new pass of polls: one place at the request gates a credential of the pool. */
  pollPass(): PollPass;
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
