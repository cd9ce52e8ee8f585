import { type RawBuilder, sql } from 'kysely';
import { defaultQuota } from '../platform/config/credential-label.ts';
import type { BlockReason } from '../platform/db/columns.ts';
import { int4Key } from '../platform/db/locks.ts';
import { SPENDS_QUOTA } from './ledger.ts';
import type { StoredRateLimit } from './types.ts';

/**
 * The hourly budget of each budget key, computed from the ledger every time so
 * that every process on every machine sees the same numbers:
 * - the window is GitHub's current rate-limit hour (reset_at − 1 h) when we know it,
 *   else the last 60 minutes;
 * - the background purposes (enrich and commits, together) may spend floor(quota × share)
 *   of it, polls the rest: a commits reservation counts exactly like an enrich one;
 * - nobody spends once the observed remaining (last x-ratelimit-remaining minus what
 *   was spent since) reaches 0 before the reset, or while a 403/429 or 401 block lasts.
 * One set of CTEs computes it for any number of credentials at once (one row each), so a
 * reservation, the pool's choice of credential and every snapshot read the same rules.
 */

export const HOUR_MS = 3600_000;

/**
 * What a set of ledger rows `g` spent: each row its points (a GraphQL query's), NULL being 1
 * (every REST request) — so one window sums requests and points alike.
 */
export const POINTS = sql<number>`COALESCE(sum(COALESCE(g.points, 1)), 0)::int`;
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
  /** ENRICH_SHARE: the background purposes' (enrich + commits) part of each credential's hourly quota. */
  share: number;
}

/** A policy for one credential by its label (tests, the bench, status of a single label). */
export function singleCredential(label: string, share = 2 / 3): BudgetPolicy {
  return { credentials: [{ label, defaultQuota: defaultQuota(label) }], share };
}

/** The poll allowance and the background one (`enrich`: spent by enrich and commits together). */
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
  /** The oldest spend in the window, polls', the background's and in all: when it leaves, room opens. */
  oldest: { poll: Date | null; background: Date | null; any: Date | null };
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
  oldest_background: Date | null;
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
 * - c: what each window spent, without reading the window's rows: the whole
 *   minutes from the counters in github_request_minutes (kept exact by triggers on the
 *   ledger), the first, partial minute counted from github_requests_spend; the oldest spend
 *   of each purpose by a probe of the first minute that has one; the requests still open from
 *   github_requests_unfinished; and what came after the rate-limit observation (not yet
 *   reflected in its remaining) from github_requests_finished. The same numbers the count of
 *   every row of the window gave (test/integration/budget-counters.test.ts holds that count
 *   as its oracle).
 */
/**
 * The first two of the state's CTEs, `creds` and `w` (each credential's rate-limit row and
 * window), also what the pool's cheap pick starts from (src/budget/reserve.ts).
 */
export function windowCtes(creds: readonly CredentialPolicy[], now: Date) {
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
    )`;
}

export function stateCtes(creds: readonly CredentialPolicy[], now: Date) {
  // Implied by each window's own start (a window never starts earlier), but the planner
  // cannot see into w: this bound is what makes it choose short range scans.
  const floor = sql`${windowFloor(now)}::timestamptz`;
  /** The first spend of `purpose` in the minute `minute` (NULL when that is NULL). */
  const firstIn = (minute: RawBuilder<unknown>, purpose: RawBuilder<boolean>) => sql`(
    SELECT g.reserved_at FROM github_requests g
    WHERE g.credential = w.credential AND g.reserved_at >= ${minute}
      AND g.reserved_at < ${minute} + interval '1 minute' AND g.reserved_at >= ${floor}
      AND ${purpose} AND ${SPENDS_QUOTA}
    ORDER BY g.reserved_at LIMIT 1)`;
  const poll = sql<boolean>`g.purpose = 'poll'`;
  const background = sql<boolean>`g.purpose <> 'poll'`;
  return sql`
    ${windowCtes(creds, now)},
    c AS (
      SELECT w.credential,
        m.poll + h.poll AS poll, m.enrich + h.enrich AS enrich, m.commits + h.commits AS commits,
        CASE WHEN w.fresh THEN o.open + a.answered
             -- every spend of the window, but one answered at '-infinity' (> '-infinity' is false)
             ELSE m.poll + h.poll + m.enrich + h.enrich + m.commits + h.commits - z.answered
        END AS since_observation,
        o.open, p.oldest_poll, p.oldest_background,
        LEAST(p.oldest_poll, p.oldest_background) AS oldest_any
      FROM w
      -- the window's first whole minute
      CROSS JOIN LATERAL (
        SELECT date_trunc('minute', w.window_start, 'UTC') + interval '1 minute' AS first
      ) b
      -- the whole minutes, from the counters (no upper bound: nor had the count of rows)
      CROSS JOIN LATERAL (
        SELECT COALESCE(sum(n.poll), 0)::int AS poll, COALESCE(sum(n.enrich), 0)::int AS enrich,
          COALESCE(sum(n.commits), 0)::int AS commits,
          min(n.minute) FILTER (WHERE n.poll > 0) AS poll_minute,
          min(n.minute) FILTER (WHERE n.enrich > 0 OR n.commits > 0) AS background_minute
        FROM github_request_minutes n
        WHERE n.credential = w.credential AND n.minute >= b.first AND n.minute >= ${floor}
      ) m
      -- the partial minute before them, row by row (at most a minute of rows)
      CROSS JOIN LATERAL (
        SELECT COALESCE(sum(COALESCE(g.points, 1)) FILTER (WHERE g.purpose = 'poll'), 0)::int AS poll,
          COALESCE(sum(COALESCE(g.points, 1)) FILTER (WHERE g.purpose = 'enrich'), 0)::int AS enrich,
          COALESCE(sum(COALESCE(g.points, 1)) FILTER (WHERE g.purpose = 'commits'), 0)::int AS commits,
          min(g.reserved_at) FILTER (WHERE g.purpose = 'poll') AS oldest_poll,
          min(g.reserved_at) FILTER (WHERE g.purpose <> 'poll') AS oldest_background
        FROM github_requests g
        WHERE g.credential = w.credential AND g.reserved_at >= w.window_start
          AND g.reserved_at < b.first AND g.reserved_at >= ${floor} AND ${SPENDS_QUOTA}
      ) h
      -- the oldest spend of each: in the partial minute, else in the first whole minute
      -- that has one (COALESCE probes only when the partial minute has none)
      CROSS JOIN LATERAL (
        SELECT COALESCE(h.oldest_poll, ${firstIn(sql`m.poll_minute`, poll)}) AS oldest_poll,
          COALESCE(h.oldest_background, ${firstIn(sql`m.background_minute`, background)})
            AS oldest_background
        OFFSET 0 -- once each: oldest_any reads them again
      ) p
      -- reserved or sent, no answer yet: in flight, or waiting for the credential's gate
      CROSS JOIN LATERAL (
        SELECT ${POINTS} AS open FROM github_requests g
        WHERE g.credential = w.credential AND g.reserved_at >= w.window_start
          AND g.reserved_at >= ${floor} AND ${SPENDS_QUOTA} AND g.finished_at IS NULL
      ) o
      -- answered after the observation, in GitHub's hour. The upper bound is always true;
      -- with it the planner estimates a range and takes github_requests_finished.
      CROSS JOIN LATERAL (
        SELECT ${POINTS} AS answered FROM github_requests g
        WHERE w.fresh AND g.credential = w.credential AND g.finished_at > w.observed_at
          AND g.finished_at <= 'infinity' AND g.finished_at IS NOT NULL
          AND g.reserved_at >= w.window_start AND ${SPENDS_QUOTA}
      ) a
      -- past the reset, what the count of rows left out: none but a row answered at '-infinity'
      CROSS JOIN LATERAL (
        SELECT ${POINTS} AS answered FROM github_requests g
        WHERE NOT w.fresh AND g.credential = w.credential AND g.finished_at <= '-infinity'
          AND g.finished_at IS NOT NULL AND g.reserved_at >= w.window_start AND ${SPENDS_QUOTA}
      ) z
    ),
    st AS (
      SELECT w.credential, w.ord, w.lock_key, w.rl_quota, w.rl_remaining, w.reset_at,
        w.blocked_until, w.block_reason, w.auth_failures, w.observed_at, w.quota, w.window_start,
        CASE WHEN w.fresh THEN w.reset_at ELSE w.window_start + make_interval(secs => ${HOUR_MS / 1000}) END
          AS window_end,
        c.poll, c.enrich, c.commits, c.since_observation, c.open, c.oldest_poll, c.oldest_background,
        c.oldest_any,
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
      oldest: { poll: row.oldest_poll, background: row.oldest_background, any: row.oldest_any },
    },
    remaining: row.remaining,
  };
}
