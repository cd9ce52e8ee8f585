import type {
  BigId,
  BlockReason,
  Generated,
  NullableTimestamp,
  RequestOutcome,
  RequestPurpose,
  Timestamp,
} from './columns.ts';

/** The budget's tables (src/budget/): the request ledger, rate limits, pacing, minute counters. */

export interface GithubRequestsTable {
  id: Generated<BigId>;
  credential: string;
  purpose: RequestPurpose;
  method: Generated<string>;
  path: string;
  outcome: Generated<RequestOutcome>;
  status: number | null;
  counted: boolean | null;
  reserved_at: Generated<Timestamp>;
  sent_at: NullableTimestamp;
  finished_at: NullableTimestamp;
  duration_ms: number | null;
  rate_limit_limit: number | null;
  rate_limit_remaining: number | null;
  rate_limit_reset: NullableTimestamp;
  error: string | null;
  job_id: string | null;
  run_id: BigId | null;
  entity_class: string | null;
  entity_id: BigId | null;
  /**
   * GraphQL points this row spends (migration 2026-12-02T0100): the estimate when
   * reserved, the answer's rateLimit.cost once settled. NULL is 1: every REST row.
   */
  points: number | null;
}

export interface GithubRateLimitsTable {
  credential: string;
  quota: number;
  remaining: number;
  reset_at: Timestamp;
  blocked_until: NullableTimestamp;
  /** Why blocked_until is set: a 403/429 from GitHub, or a 401 (the auth ladder). */
  block_reason: BlockReason | null;
  /** 401s in a row; the first answer that is not a 401 resets it. */
  auth_failures: Generated<number>;
  /** When the current run of 401s began (null when auth_failures is 0). */
  auth_failed_since: NullableTimestamp;
  /** What GitHub said with the latest 401 (bounded, never a token). */
  auth_error: string | null;
  observed_at: Generated<Timestamp>;
}

/** When a credential may next send to an endpoint (route template): GitHub's secondary limit. */
export interface GithubEndpointPaceTable {
  credential: string;
  endpoint: string;
  next_at: Timestamp;
}

/**
 * The ledger's spending rows (SPENDS_QUOTA) reserved in one UTC minute, per purpose: what the
 * budget window sums. Written only by the triggers on github_requests; kept 2 h.
 */
export interface GithubRequestMinutesTable {
  credential: string;
  minute: Timestamp;
  poll: Generated<number>;
  enrich: Generated<number>;
  commits: Generated<number>;
}
