/**
 * The GitHub layer's contract, shared by ingestion and enrichment. Implemented in
 * src/github/client.ts (live: octokit over HTTP; fixture: files) — every request passes
 * the request gate and has a github_requests ledger row reserved before it is sent.
 */
import type { BlockReason, RequestPurpose } from '../db/schema.ts';
import type { BudgetDecision } from './budget.ts';

export type EntityClass = 'actor' | 'repository';

export interface RateLimitState {
  limit: number;
  remaining: number;
  resetAt: Date;
}

/** A reserved ledger row: permission to send one request. */
export interface Reservation {
  id: number;
  purpose: RequestPurpose;
  credential: string;
}

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
}

export interface GitHubResponse<T = unknown> {
  /** 200, 304, 404, 410, 422 ...; 301/302/307 are followed and never returned. */
  status: number;
  /** Parsed JSON body for 2xx; undefined for 304. */
  data: T | undefined;
  etag: string | null;
  /** X-Poll-Interval in seconds, when GitHub sent one. */
  pollInterval: number | null;
  rateLimit: RateLimitState | null;
  /** The final URL after redirects (a renamed repo answers 301 to its new location). */
  url: string;
  /** The ledger row of this request. */
  requestId: number;
  /** True when the quota was spent (false for 304). */
  counted: boolean;
}

export interface BudgetSnapshot {
  credential: string;
  /** Hourly quota as last seen in x-ratelimit-limit (60 unauthenticated, 5000 with a token). */
  quota: number;
  /** Last seen x-ratelimit-remaining minus counted requests since; null when never seen. */
  remaining: number | null;
  resetAt: Date | null;
  /**
   * Requests per hour each purpose may spend: enrich = floor(quota * ENRICH_SHARE), the
   * background allowance that enrich and commits spend together (ADR 0071); poll the rest.
   */
  allowance: { poll: number; enrich: number };
  /** Counted-or-open reservations in the current window per purpose. */
  spent: { poll: number; enrich: number; commits: number };
  /** Set while a 403/429 told us to wait, or a 401 blocked the credential. */
  blockedUntil: Date | null;
  /** Why it is blocked: rate_limit (403/429) or auth (401). */
  blockReason: BlockReason | null;
}

/** Every credential's budget, and the pool's total in the BudgetSnapshot fields. */
export interface PoolBudget extends BudgetSnapshot {
  /** One per credential, in configuration order ('pool' is the total's label when there are several). */
  credentials: BudgetSnapshot[];
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
    },
  ): Promise<Reservation | null>;
  /**
   * reserve() with the reason when the pool says no: which rule (allowance, remaining,
   * blocked — and for a block, rate_limit or auth) and when the first credential frees
   * (retryAt).
   */
  tryReserve(
    purpose: RequestPurpose,
    meta?: Parameters<GitHubClient['reserve']>[1],
  ): Promise<BudgetDecision>;
  /** Give back a reservation that will not be used (claim released, shutdown). */
  release(reservation: Reservation): Promise<void>;
  /**
   * Send one request through the gate. Throws BudgetExhausted (no reservation and the
   * budget says no), GateTimeout, RateLimited (403/429 budget events, never data),
   * GitHubUnavailable (5xx, timeout, connection error), MalformedResponse (2xx with a
   * body that is not JSON), GitHubAuthFailed (401), FixtureMiss (fixture mode).
   */
  request<T = unknown>(req: GitHubRequest): Promise<GitHubResponse<T>>;
  /** The pool's total (BudgetSnapshot fields) and each credential's budget (`credentials`). */
  budget(): Promise<PoolBudget>;
  close(): Promise<void>;
}
