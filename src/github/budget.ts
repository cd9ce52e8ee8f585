import { sql } from 'kysely';
import { int4Key, LockSpace } from '../db/locks.ts';
import type { Db } from '../db/pool.ts';
import type { BlockReason, RequestPurpose } from '../db/schema.ts';
import { AppError } from '../errors.ts';
import { defaultQuota } from './credential.ts';
import { ASYNC_COMMIT, type ReservationRow, SPENDS_QUOTA, UNSPECIFIED_PATH } from './ledger.ts';
import { readRateLimit, type StoredRateLimit } from './rate-limit.ts';
import type { BudgetSnapshot, Reservation } from './types.ts';

/**
 * The hourly budget (DESIGN §6), computed from the ledger every time so that every
 * process on every machine sees the same numbers:
 * - the window is GitHub's current rate-limit hour (reset_at − 1 h) when we know it,
 *   else the last 60 minutes;
 * - enrichment may spend floor(quota × share) of it, polls the rest;
 * - nobody spends once the observed remaining (last x-ratelimit-remaining minus what
 *   was spent since) reaches 0 before the reset, or while a 403/429 block lasts.
 */

const HOUR_MS = 3600_000;
/**
 * GitHub starts the hour when it receives the first request, and reports the reset in
 * whole seconds; we reserve before sending (and may wait for the gate first). Counting
 * from a minute earlier keeps that first request in its own window: it can only
 * over-count, never let us spend a request GitHub has already counted.
 */
const WINDOW_SLACK_MS = 60_000;

export interface BudgetPolicy {
  credential: string;
  /** ENRICH_SHARE: enrichment's part of the hourly quota. */
  share: number;
}

export type BudgetRefusal = {
  ok: false;
  /** allowance: this purpose's share is spent; remaining: the quota is; blocked: GitHub said wait. */
  reason: 'allowance' | 'remaining' | 'blocked';
  /** When the budget frees: the reset, the oldest spend leaving the window, or the block's end. */
  retryAt: Date;
  /** For 'blocked': a 403/429 (rate_limit) or a 401 (auth). */
  blockReason?: BlockReason | null;
};

export type BudgetDecision = { ok: true; reservation: Reservation } | BudgetRefusal;

interface Window {
  start: Date;
  /** When the oldest spend leaves the window (the reset, when known). */
  end: Date;
}

export function allowanceFor(quota: number, share: number): { poll: number; enrich: number } {
  const enrich = Math.floor(quota * share);
  return { enrich, poll: quota - enrich };
}

interface Spend {
  poll: number;
  enrich: number;
  /** Spent after the rate-limit observation (not yet reflected in its remaining). */
  sinceObservation: number;
  /** The oldest spend in the window, per purpose and in all: when it leaves, room opens. */
  oldest: { poll: Date | null; enrich: Date | null; any: Date | null };
}

interface State {
  rl: StoredRateLimit | null;
  quota: number;
  window: Window;
  spent: Spend;
  /** null when GitHub never told us. */
  remaining: number | null;
}

interface StateRow {
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
  since_observation: number;
  oldest_poll: Date | null;
  oldest_enrich: Date | null;
  oldest_any: Date | null;
  remaining: number | null;
}

/**
 * The budget state as CTEs ending in `st` (one row), so reading it is one round trip and
 * a reservation can decide and insert in the same statement:
 * - rl: the stored rate-limit row, if any;
 * - w: the window: GitHub's current hour (reset_at − 1 h − slack) while the reset is
 *   ahead, else the last 60 minutes, starting no earlier than the last known reset;
 * - c: what the window spent (index-only on github_requests_spend), and how much of it
 *   came after the observation (not yet reflected in its remaining).
 */
function stateCtes(credential: string, now: Date) {
  return sql`
    rl AS (
      SELECT quota, remaining, reset_at, blocked_until, block_reason, auth_failures, observed_at,
             reset_at > ${now}::timestamptz AS fresh
      FROM github_rate_limits WHERE credential = ${credential}
    ),
    w AS (
      SELECT rl.quota AS rl_quota, rl.remaining AS rl_remaining, rl.reset_at,
        rl.blocked_until, rl.block_reason, rl.auth_failures, rl.observed_at, rl.fresh,
        COALESCE(rl.quota, ${defaultQuota(credential)}::int) AS quota,
        CASE WHEN rl.fresh
          THEN rl.reset_at - make_interval(secs => ${(HOUR_MS + WINDOW_SLACK_MS) / 1000})
          ELSE GREATEST(${now}::timestamptz - make_interval(secs => ${HOUR_MS / 1000}),
                        COALESCE(rl.reset_at, '-infinity'))
        END AS window_start
      FROM (SELECT) AS one LEFT JOIN rl ON true
    ),
    c AS (
      SELECT
        count(*) FILTER (WHERE purpose = 'poll')::int AS poll,
        count(*) FILTER (WHERE purpose = 'enrich')::int AS enrich,
        count(*) FILTER (
          WHERE finished_at IS NULL
             OR finished_at > (SELECT CASE WHEN fresh THEN observed_at ELSE '-infinity' END FROM w)
        )::int AS since_observation,
        min(reserved_at) FILTER (WHERE purpose = 'poll') AS oldest_poll,
        min(reserved_at) FILTER (WHERE purpose = 'enrich') AS oldest_enrich,
        min(reserved_at) AS oldest_any
      FROM github_requests
      WHERE credential = ${credential} AND reserved_at >= (SELECT window_start FROM w)
        -- Implied by the line above (a window never starts earlier), but the planner cannot
        -- see into w: this bound is what makes it choose a short range scan.
        AND reserved_at >= ${new Date(now.getTime() - HOUR_MS - WINDOW_SLACK_MS)}::timestamptz
        AND ${SPENDS_QUOTA}
    ),
    st AS (
      SELECT w.rl_quota, w.rl_remaining, w.reset_at, w.blocked_until, w.block_reason,
        w.auth_failures, w.observed_at, w.quota,
        w.window_start,
        CASE WHEN w.fresh THEN w.reset_at ELSE w.window_start + make_interval(secs => ${HOUR_MS / 1000}) END
          AS window_end,
        c.poll, c.enrich, c.since_observation, c.oldest_poll, c.oldest_enrich, c.oldest_any,
        -- in a new hour (reset passed), everything since its start came off the quota
        CASE WHEN w.rl_quota IS NULL THEN NULL
             WHEN w.fresh THEN w.rl_remaining - c.since_observation
             ELSE w.quota - c.since_observation END AS remaining
      FROM w, c
    )`;
}

function toState(row: StateRow): State {
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
    rl,
    quota: row.quota,
    window: { start: row.window_start, end: row.window_end },
    spent: {
      poll: row.poll,
      enrich: row.enrich,
      sinceObservation: row.since_observation,
      oldest: { poll: row.oldest_poll, enrich: row.oldest_enrich, any: row.oldest_any },
    },
    remaining: row.remaining,
  };
}

/** The budget state as a statement (exported so a test can EXPLAIN it). */
export function budgetStateStatement(credential: string, now: Date) {
  return sql<StateRow>`WITH ${stateCtes(credential, now)} SELECT * FROM st`;
}

async function readState(db: Db, credential: string, now: Date): Promise<State> {
  const r = await budgetStateStatement(credential, now).execute(db);
  return toState(r.rows[0]!);
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

function decide(state: State, policy: BudgetPolicy, purpose: RequestPurpose, now: Date) {
  const { rl } = state;
  if (rl?.blockedUntil && rl.blockedUntil.getTime() > now.getTime()) {
    return {
      ok: false as const,
      reason: 'blocked' as const,
      retryAt: rl.blockedUntil,
      blockReason: rl.blockReason,
    };
  }
  if (state.remaining !== null && state.remaining <= 0) {
    const retryAt = freesAt(state, state.spent.oldest.any, now);
    return { ok: false as const, reason: 'remaining' as const, retryAt };
  }
  const allowance = allowanceFor(state.quota, policy.share);
  if (state.spent[purpose] >= allowance[purpose]) {
    const retryAt = freesAt(state, state.spent.oldest[purpose], now);
    return { ok: false as const, reason: 'allowance' as const, retryAt };
  }
  return null;
}

/** Thrown when the statement's insert and decide() disagree: a bug, never a budget answer. */
export class BudgetRuleMismatch extends AppError {
  constructor(context: Record<string, unknown>) {
    super('BUDGET_RULE_MISMATCH', 'the reservation statement and decide() disagree', context);
  }
}

/**
 * Reserve one request of `purpose`. The per-credential advisory lock serializes
 * reservations across processes; it must be its own statement, because under READ
 * COMMITTED a statement's snapshot is taken before it runs, so a count in the statement
 * that waited for the lock could miss the reservation committed by the lock's previous
 * holder. After it, ONE statement reads the state, applies the rules (the same as
 * decide(), which then explains a no) and inserts the row when they allow it: four round
 * trips (BEGIN, lock, statement, COMMIT) instead of six.
 */
export async function reserve(
  db: Db,
  policy: BudgetPolicy,
  purpose: RequestPurpose,
  meta: Omit<ReservationRow, 'credential' | 'purpose'>,
): Promise<BudgetDecision> {
  const { credential } = policy;
  const now = meta.now;
  const enrichAllowance = sql`floor(st.quota * ${policy.share}::float8)`;
  const room =
    purpose === 'enrich'
      ? sql`st.enrich < ${enrichAllowance}`
      : sql`st.poll < st.quota - ${enrichAllowance}`;
  return db.transaction().execute(async (trx) => {
    // Asynchronous commit (ADR 0010): the row is visible to every other session the moment
    // it commits; only a crash of the Postgres server itself within ~200 ms could lose it.
    await sql`SELECT pg_advisory_xact_lock(${LockSpace.budget}, ${int4Key(credential)}),
                     ${ASYNC_COMMIT}`.execute(trx);
    const r = await sql<StateRow & { id: string | null }>`
      WITH ${stateCtes(credential, now)},
      ins AS (
        INSERT INTO github_requests (credential, purpose, method, path, outcome, reserved_at,
          job_id, run_id, entity_class, entity_id)
        SELECT ${credential}, ${purpose}, ${meta.method ?? 'GET'}, ${meta.path ?? UNSPECIFIED_PATH},
          'reserved', ${now}::timestamptz, ${meta.jobId ?? null}::text, ${meta.runId ?? null}::bigint,
          ${meta.entity?.class ?? null}::text, ${meta.entity?.id ?? null}::bigint
        FROM st
        WHERE (st.blocked_until IS NULL OR st.blocked_until <= ${now}::timestamptz)
          AND (st.remaining IS NULL OR st.remaining > 0)
          AND ${room}
        RETURNING id
      )
      SELECT st.*, (SELECT id FROM ins) AS id FROM st`.execute(trx);
    const row = r.rows[0]!;
    const no = decide(toState(row), policy, purpose, now);
    if ((no === null) !== (row.id !== null)) {
      throw new BudgetRuleMismatch({
        credential,
        purpose,
        inserted: row.id !== null,
        decision: no?.reason ?? 'ok',
      });
    }
    if (no) return no;
    return { ok: true as const, reservation: { id: Number(row.id), purpose, credential } };
  });
}

export async function budgetSnapshot(
  db: Db,
  policy: BudgetPolicy,
  now: Date,
): Promise<BudgetSnapshot> {
  const state = await readState(db, policy.credential, now);
  const blocked = state.rl?.blockedUntil;
  return {
    credential: policy.credential,
    quota: state.quota,
    remaining: state.remaining === null ? null : Math.max(0, state.remaining),
    resetAt: state.rl ? state.window.end : null,
    allowance: allowanceFor(state.quota, policy.share),
    spent: { poll: state.spent.poll, enrich: state.spent.enrich },
    blockedUntil: blocked && blocked.getTime() > now.getTime() ? blocked : null,
    blockReason:
      blocked && blocked.getTime() > now.getTime() ? (state.rl?.blockReason ?? null) : null,
  };
}

/**
 * Would a reservation of `purpose` be refused right now? Read from a snapshot, so a caller
 * that only decides whether to start work (the reconciler) asks without reserving.
 */
export function snapshotRefuses(s: BudgetSnapshot, purpose: RequestPurpose): boolean {
  return (
    s.blockedUntil !== null ||
    (s.remaining !== null && s.remaining <= 0) ||
    s.spent[purpose] >= s.allowance[purpose]
  );
}

/**
 * The shortest poll interval the poll budget allows each of `enabledSources` sources:
 * ceil(3600 × sources / poll allowance). Ingestion takes the larger of this and the
 * feed's X-Poll-Interval for next_poll_at.
 */
export async function pollIntervalFloorSeconds(
  db: Db,
  credential: string,
  enabledSources: number,
  share = 2 / 3,
): Promise<number> {
  const rl = await readRateLimit(db, credential);
  const { poll } = allowanceFor(rl?.quota ?? defaultQuota(credential), share);
  return Math.ceil((3600 * Math.max(1, enabledSources)) / Math.max(1, poll));
}
