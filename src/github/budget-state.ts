import { sql } from 'kysely';
import { int4Key } from '../db/locks.ts';
import type { BlockReason, RequestPurpose } from '../db/schema.ts';
import { defaultQuota } from './credential.ts';
import { SPENDS_QUOTA } from './ledger.ts';
import type { StoredRateLimit } from './rate-limit.ts';

/**
 * The hourly budget of each credential (DESIGN §6), computed from the ledger every time so
 * that every process on every machine sees the same numbers:
 * - the window is GitHub's current rate-limit hour (reset_at − 1 h) when we know it,
 *   else the last 60 minutes;
 * - the background purposes (enrich and commits, together) may spend floor(quota × share)
 *   of it, polls the rest (commits count against that allowance exactly like enrich: ADR 0071);
 * - nobody spends once the observed remaining (last x-ratelimit-remaining minus what
 *   was spent since) reaches 0 before the reset, or while a 403/429 or 401 block lasts.
 * One set of CTEs computes it for any number of credentials at once (one row each), so a
 * reservation, the pool's choice of credential and every snapshot read the same rules.
 */

export const HOUR_MS = 3600_000;
/**
 * GitHub starts the hour when it receives the first request, and reports the reset in
 * whole seconds; we reserve before sending (and may wait for the gate first). Counting
 * from a minute earlier keeps that first request in its own window: it can only
 * over-count, never let us spend a request GitHub has already counted.
 */
const WINDOW_SLACK_MS = 60_000;

export interface CredentialPolicy {
  label: string;
  /** The quota assumed until GitHub's first x-ratelimit-limit for it. */
  defaultQuota: number;
}

export interface BudgetPolicy {
  /** The pool, in configuration order (never empty). */
  credentials: readonly CredentialPolicy[];
  /** ENRICH_SHARE: enrichment's part of each credential's hourly quota. */
  share: number;
}

/** A policy for one credential by its label (tests, the bench, status of a single label). */
export function singleCredential(label: string, share = 2 / 3): BudgetPolicy {
  return { credentials: [{ label, defaultQuota: defaultQuota(label) }], share };
}

/**
 * Which allowance a purpose spends: commits share the background allowance with enrichment
 * (agreement of issue 18, ADR 0070). Counting commits spends into it is commits-fetch's.
 */
export function allowanceOf(purpose: RequestPurpose): 'poll' | 'enrich' {
  return purpose === 'poll' ? 'poll' : 'enrich';
}

export function allowanceFor(quota: number, share: number): { poll: number; enrich: number } {
  const enrich = Math.floor(quota * share);
  return { enrich, poll: quota - enrich };
}

interface Window {
  start: Date;
  /** When the oldest spend leaves the window (the reset, when known). */
  end: Date;
}

interface Spend {
  poll: number;
  enrich: number;
  commits: number;
  /** Spent after the rate-limit observation (not yet reflected in its remaining). */
  sinceObservation: number;
  /** The oldest spend in the window, per purpose and in all: when it leaves, room opens. */
  oldest: { poll: Date | null; enrich: Date | null; commits: Date | null; any: Date | null };
}

export interface State {
  credential: string;
  rl: StoredRateLimit | null;
  quota: number;
  window: Window;
  spent: Spend;
  /** null when GitHub never told us. */
  remaining: number | null;
}

export interface StateRow {
  credential: string;
  ord: number;
  rl_quota: number | null;
  rl_remaining: number | null;
  reset_at: Date | null;
  blocked_until: Date | null;
  block_reason: BlockReason | null;
  auth_failures: number | null;
  observed_at: Date | null;
  quota: number;
  window_start: Date;
  window_end: Date;
  poll: number;
  enrich: number;
  commits: number;
  since_observation: number;
  open: number;
  oldest_poll: Date | null;
  oldest_enrich: Date | null;
  oldest_commits: Date | null;
  oldest_any: Date | null;
  remaining: number | null;
}

/**
 * Where a credential's budget window starts, as an expression over its github_rate_limits
 * row `rl`: GitHub's current hour (reset_at − 1 h − slack) while the reset is ahead, else
 * the last 60 minutes, starting no earlier than the last known reset.
 */
export function windowStartSql(now: Date) {
  return sql`CASE WHEN rl.reset_at > ${now}::timestamptz
          THEN rl.reset_at - make_interval(secs => ${(HOUR_MS + WINDOW_SLACK_MS) / 1000})
          ELSE GREATEST(${now}::timestamptz - make_interval(secs => ${HOUR_MS / 1000}),
                        COALESCE(rl.reset_at, '-infinity'))
        END`;
}

/**
 * No window starts earlier than this. Implied by windowStartSql, but the planner cannot see
 * into a CTE: a constant bound beside it is what makes it choose a short range scan.
 */
export function windowFloor(now: Date): Date {
  return new Date(now.getTime() - HOUR_MS - WINDOW_SLACK_MS);
}

/**
 * The budget state as CTEs ending in `st` (one row per credential), so reading it is one
 * round trip and a reservation can decide and insert in the same statement:
 * - creds: the credentials asked about, with their default quota, order and budget lock key;
 * - w: each one's stored rate-limit row and window: GitHub's current hour (reset_at − 1 h −
 *   slack) while the reset is ahead, else the last 60 minutes, starting no earlier than
 *   the last known reset;
 * - c: what each window spent (index-only on github_requests_spend), and how much of it
 *   came after the observation (not yet reflected in its remaining).
 */
export function stateCtes(creds: readonly CredentialPolicy[], now: Date) {
  const rows = creds.map(
    (c, i) => sql`(${c.label}::text, ${c.defaultQuota}::int, ${i}::int, ${int4Key(c.label)}::int)`,
  );
  return sql`
    creds (credential, default_quota, ord, lock_key) AS (VALUES ${sql.join(rows)}),
    w AS (
      SELECT creds.credential, creds.ord, creds.lock_key,
        rl.quota AS rl_quota, rl.remaining AS rl_remaining, rl.reset_at,
        rl.blocked_until, rl.block_reason, rl.auth_failures, rl.observed_at,
        COALESCE(rl.reset_at > ${now}::timestamptz, false) AS fresh,
        COALESCE(rl.quota, creds.default_quota) AS quota,
        ${windowStartSql(now)} AS window_start
      FROM creds LEFT JOIN github_rate_limits rl ON rl.credential = creds.credential
    ),
    c AS (
      SELECT w.credential, n.* FROM w CROSS JOIN LATERAL (
        SELECT
          count(*) FILTER (WHERE purpose = 'poll')::int AS poll,
          count(*) FILTER (WHERE purpose = 'enrich')::int AS enrich,
          count(*) FILTER (WHERE purpose = 'commits')::int AS commits,
          count(*) FILTER (
            WHERE finished_at IS NULL
               OR finished_at > CASE WHEN w.fresh THEN w.observed_at ELSE '-infinity' END
          )::int AS since_observation,
          -- reserved or sent, no answer yet: in flight, or waiting for the credential's gate
          count(*) FILTER (WHERE finished_at IS NULL)::int AS open,
          min(reserved_at) FILTER (WHERE purpose = 'poll') AS oldest_poll,
          min(reserved_at) FILTER (WHERE purpose = 'enrich') AS oldest_enrich,
          min(reserved_at) FILTER (WHERE purpose = 'commits') AS oldest_commits,
          min(reserved_at) AS oldest_any
        FROM github_requests g
        WHERE g.credential = w.credential AND g.reserved_at >= w.window_start
          -- Implied by the line above (a window never starts earlier), but the planner cannot
          -- see into w: this bound is what makes it choose a short range scan.
          AND g.reserved_at >= ${windowFloor(now)}::timestamptz
          AND ${SPENDS_QUOTA}
      ) n
    ),
    st AS (
      SELECT w.credential, w.ord, w.lock_key, w.rl_quota, w.rl_remaining, w.reset_at,
        w.blocked_until, w.block_reason, w.auth_failures, w.observed_at, w.quota, w.window_start,
        CASE WHEN w.fresh THEN w.reset_at ELSE w.window_start + make_interval(secs => ${HOUR_MS / 1000}) END
          AS window_end,
        c.poll, c.enrich, c.commits, c.since_observation, c.open, c.oldest_poll, c.oldest_enrich,
        c.oldest_commits, c.oldest_any,
        -- in a new hour (reset passed), everything since its start came off the quota
        CASE WHEN w.rl_quota IS NULL THEN NULL
             WHEN w.fresh THEN w.rl_remaining - c.since_observation
             ELSE w.quota - c.since_observation END AS remaining
      FROM w JOIN c ON c.credential = w.credential
    )`;
}

/** The budget state as a statement, one row per credential in pool order (a test EXPLAINs it). */
export function budgetStateStatement(credentials: string | readonly CredentialPolicy[], now: Date) {
  const creds =
    typeof credentials === 'string' ? singleCredential(credentials).credentials : credentials;
  return sql<StateRow>`WITH ${stateCtes(creds, now)} SELECT * FROM st ORDER BY ord`;
}

/**
 * The SQL twin of decide(): may `st` (a row of the CTEs above) spend one request of
 * `purpose` now? The reservation inserts only where it holds; decide() explains a no.
 */
export function allowsSql(purpose: RequestPurpose, share: number, now: Date) {
  const enrichAllowance = sql`floor(st.quota * ${share}::float8)`;
  const room =
    allowanceOf(purpose) === 'poll'
      ? sql`st.poll < st.quota - ${enrichAllowance}`
      : sql`st.enrich + st.commits < ${enrichAllowance}`;
  return sql`(st.blocked_until IS NULL OR st.blocked_until <= ${now}::timestamptz)
    AND (st.remaining IS NULL OR st.remaining > 0) AND ${room}`;
}

/** How many requests of `purpose` `st` may still make in its window (its allowance, within what GitHub has left). */
export function roomSql(purpose: RequestPurpose, share: number) {
  const enrichAllowance = sql`floor(st.quota * ${share}::float8)`;
  const left =
    allowanceOf(purpose) === 'poll'
      ? sql`(st.quota - ${enrichAllowance} - st.poll)`
      : sql`(${enrichAllowance} - st.enrich - st.commits)`;
  return sql`LEAST(${left}, COALESCE(st.remaining, ${left}))`;
}

export function toState(row: StateRow): State {
  const rl: StoredRateLimit | null =
    row.rl_quota === null
      ? null
      : {
          quota: row.rl_quota,
          remaining: row.rl_remaining!,
          resetAt: row.reset_at!,
          blockedUntil: row.blocked_until,
          blockReason: row.block_reason,
          authFailures: row.auth_failures ?? 0,
          observedAt: row.observed_at!,
        };
  return {
    credential: row.credential,
    rl,
    quota: row.quota,
    window: { start: row.window_start, end: row.window_end },
    spent: {
      poll: row.poll,
      enrich: row.enrich,
      commits: row.commits,
      sinceObservation: row.since_observation,
      oldest: {
        poll: row.oldest_poll,
        enrich: row.oldest_enrich,
        commits: row.oldest_commits,
        any: row.oldest_any,
      },
    },
    remaining: row.remaining,
  };
}

/**
 * When a spent budget frees. Within GitHub's known hour, at its reset. Past it (or before we
 * ever saw one) the window is the last 60 minutes, which frees when its oldest spend leaves
 * it — not "now", which made every refused source due again at once, tick after tick.
 */
function freesAt(state: State, oldest: Date | null, now: Date): Date {
  if (state.rl && state.rl.resetAt.getTime() > now.getTime()) return state.window.end;
  const at = oldest ? oldest.getTime() + HOUR_MS : now.getTime();
  return new Date(Math.max(at, now.getTime() + 1000));
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

/** Why `state` cannot spend a request of `purpose` now, or null when it can. */
export function decide(
  state: State,
  share: number,
  purpose: RequestPurpose,
  now: Date,
): Refusal | null {
  const { rl, credential } = state;
  if (rl?.blockedUntil && rl.blockedUntil.getTime() > now.getTime()) {
    return {
      ok: false,
      reason: 'blocked',
      retryAt: rl.blockedUntil,
      blockReason: rl.blockReason,
      credential,
    };
  }
  if (state.remaining !== null && state.remaining <= 0) {
    const retryAt = freesAt(state, state.spent.oldest.any, now);
    return { ok: false, reason: 'remaining', retryAt, credential };
  }
  const allowance = allowanceFor(state.quota, share);
  const { spent } = state;
  const bucket = allowanceOf(purpose);
  if (bucket === 'poll' ? spent.poll >= allowance.poll : background(spent) >= allowance.enrich) {
    const oldest =
      bucket === 'poll' ? spent.oldest.poll : earlier(spent.oldest.enrich, spent.oldest.commits);
    const retryAt = freesAt(state, oldest, now);
    return { ok: false, reason: 'allowance', retryAt, credential };
  }
  return null;
}

/** What the background purposes (enrich and commits) spent together: they share one allowance. */
export function background(spent: { enrich: number; commits: number }): number {
  return spent.enrich + spent.commits;
}

function earlier(a: Date | null, b: Date | null): Date | null {
  if (a === null) return b;
  if (b === null) return a;
  return a.getTime() <= b.getTime() ? a : b;
}
