import { sql } from 'kysely';
import { int4Key, LockSpace } from '../db/locks.ts';
import type { Db } from '../db/pool.ts';
import type { RequestPurpose } from '../db/schema.ts';
import { defaultQuota } from './credential.ts';
import { insertReservation, type ReservationRow, SPENDS_QUOTA } from './ledger.ts';
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

export type BudgetDecision =
  | { ok: true; reservation: Reservation }
  | { ok: false; reason: 'allowance' | 'remaining' | 'blocked'; retryAt: Date | null };

interface Window {
  start: Date;
  /** When the oldest spend leaves the window (the reset, when known). */
  end: Date;
}

function currentWindow(rl: StoredRateLimit | null, now: Date): Window {
  const t = now.getTime();
  if (rl && rl.resetAt.getTime() > t) {
    return { start: new Date(rl.resetAt.getTime() - HOUR_MS - WINDOW_SLACK_MS), end: rl.resetAt };
  }
  // The last known hour has ended: a new one began at its reset, at most an hour ago.
  const start = new Date(Math.max(t - HOUR_MS, rl ? rl.resetAt.getTime() : 0));
  return { start, end: new Date(start.getTime() + HOUR_MS) };
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
}

async function spend(
  db: Db,
  credential: string,
  since: Date,
  observedAt: Date | null,
): Promise<Spend> {
  const r = await sql<{ poll: number; enrich: number; since_observation: number }>`
    SELECT
      count(*) FILTER (WHERE purpose = 'poll')::int AS poll,
      count(*) FILTER (WHERE purpose = 'enrich')::int AS enrich,
      count(*) FILTER (
        WHERE finished_at IS NULL OR finished_at > ${observedAt ?? new Date(0)}
      )::int AS since_observation
    FROM github_requests
    WHERE credential = ${credential} AND reserved_at >= ${since} AND ${SPENDS_QUOTA}`.execute(db);
  const row = r.rows[0]!;
  return { poll: row.poll, enrich: row.enrich, sinceObservation: row.since_observation };
}

interface State {
  rl: StoredRateLimit | null;
  quota: number;
  window: Window;
  spent: Spend;
  /** null when GitHub never told us. */
  remaining: number | null;
}

async function readState(db: Db, credential: string, now: Date): Promise<State> {
  const rl = await readRateLimit(db, credential);
  const quota = rl?.quota ?? defaultQuota(credential);
  const window = currentWindow(rl, now);
  const fresh = rl !== null && rl.resetAt.getTime() > now.getTime();
  const spent = await spend(db, credential, window.start, fresh ? rl.observedAt : null);
  let remaining: number | null = null;
  if (rl) {
    remaining = fresh ? rl.remaining - spent.sinceObservation : quota - spent.sinceObservation; // a new hour: everything since its start
  }
  return { rl, quota, window, spent, remaining };
}

function decide(state: State, policy: BudgetPolicy, purpose: RequestPurpose, now: Date) {
  const { rl, window } = state;
  if (rl?.blockedUntil && rl.blockedUntil.getTime() > now.getTime()) {
    return { ok: false as const, reason: 'blocked' as const, retryAt: rl.blockedUntil };
  }
  if (state.remaining !== null && state.remaining <= 0) {
    return { ok: false as const, reason: 'remaining' as const, retryAt: window.end };
  }
  const allowance = allowanceFor(state.quota, policy.share);
  if (state.spent[purpose] >= allowance[purpose]) {
    return { ok: false as const, reason: 'allowance' as const, retryAt: window.end };
  }
  return null;
}

/**
 * Reserve one request of `purpose`: count and insert under a transaction-scoped
 * advisory lock per credential, so two processes cannot both take the last request.
 */
export async function reserve(
  db: Db,
  policy: BudgetPolicy,
  purpose: RequestPurpose,
  meta: Omit<ReservationRow, 'credential' | 'purpose'>,
): Promise<BudgetDecision> {
  return db.transaction().execute(async (trx) => {
    await sql`SELECT pg_advisory_xact_lock(${LockSpace.budget}, ${int4Key(policy.credential)})`.execute(
      trx,
    );
    const state = await readState(trx, policy.credential, meta.now);
    const no = decide(state, policy, purpose, meta.now);
    if (no) return no;
    const id = await insertReservation(trx, { ...meta, credential: policy.credential, purpose });
    return { ok: true as const, reservation: { id, purpose, credential: policy.credential } };
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
  };
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
