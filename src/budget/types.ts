/**
 * The budget's vocabulary (ADR 0080), read by every module of the budget layer and by the
 * layers above it. It imports no module of src/budget/, so none imports one that imports it
 * back: the ledger, the rate-limit rows, the window and the reservations all read their
 * shared types from here.
 */
import type { BlockReason, RequestPurpose } from '../platform/db/columns.ts';

export type EntityClass = 'actor' | 'repository';

/** A credential's github_rate_limits row, as the budget reads it. */
export interface StoredRateLimit {
  quota: number;
  remaining: number;
  resetAt: Date;
  blockedUntil: Date | null;
  blockReason: BlockReason | null;
  authFailures: number;
  observedAt: Date;
}

/** A reserved ledger row: permission to send one request. */
export interface Reservation {
  id: number;
  purpose: RequestPurpose;
  credential: string;
}

/**
 * The purposes that spend a credential's background allowance, floor(quota × ENRICH_SHARE):
 * enrichment and commit fetching share it (a commits request counts exactly like an enrich
 * one); polls spend the rest and are never starved by either.
 */
export const BACKGROUND_PURPOSES = [
  'enrich',
  'commits',
] as const satisfies readonly RequestPurpose[];

export function isBackground(purpose: RequestPurpose): boolean {
  return purpose !== 'poll';
}

export interface BudgetSnapshot {
  credential: string;
  /** Hourly quota as last seen in x-ratelimit-limit (60 unauthenticated, 5000 with a token). */
  quota: number;
  /** Last seen x-ratelimit-remaining minus counted requests since; null when never seen. */
  remaining: number | null;
  resetAt: Date | null;
  /**
   * Requests per hour: `enrich` is the background allowance, floor(quota × ENRICH_SHARE),
   * spent by enrich and commits together; `poll` is the rest.
   */
  allowance: { poll: number; enrich: number };
  /** Counted-or-open reservations in the current window per purpose. */
  spent: { poll: number; enrich: number; commits: number };
  /** Set while a 403/429 told us to wait, or a 401 blocked the credential. */
  blockedUntil: Date | null;
  /** Why it is blocked: rate_limit (403/429) or auth (401). */
  blockReason: BlockReason | null;
  /**
   * The credential's GraphQL window (its `#graphql` budget key); null when it has
   * none (anonymous). Absent where only the REST budget was read.
   */
  graphql?: GraphQLBudget | null;
}

/** A credential's GraphQL points window, as budget(), /status and /metrics show it. */
export interface GraphQLBudget {
  /** Points an hour (5,000 for a token; an installation's x-ratelimit-limit, up to 12,500). */
  quota: number;
  /** Last seen remaining less the points spent since; null when GitHub never told us. */
  remaining: number | null;
  resetAt: Date | null;
  /** Set while a 403/429 (rate_limit) or a 401 on either key (auth) blocks it. */
  blocked: { until: Date; reason: BlockReason } | null;
  /** Points spent (or reserved) by commits in the current window. */
  spent: number;
}

/** Every credential's budget, and the pool's total in the BudgetSnapshot fields. */
export interface PoolBudget extends BudgetSnapshot {
  /** One per credential, in configuration order ('pool' is the total's label when there are several). */
  credentials: BudgetSnapshot[];
}

export type Refusal = {
  ok: false;
  /** allowance: this purpose's share is spent; remaining: the quota is; blocked: GitHub said wait. */
  reason: 'allowance' | 'remaining' | 'blocked';
  /** When the budget frees: the reset, the oldest spend leaving the window, or the block's end. */
  retryAt: Date;
  /** For 'blocked': a 403/429 (rate_limit) or a 401 (auth). */
  blockReason?: BlockReason | null;
  /** The credential this refusal is about (for a pool: the one that frees first). */
  credential: string;
};

/** The pool said no: every credential refuses. The reported one is the first to free. */
export type BudgetRefusal = Refusal;

export type BudgetDecision = { ok: true; reservation: Reservation } | BudgetRefusal;
