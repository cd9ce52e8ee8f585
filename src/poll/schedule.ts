import { sql } from 'kysely';
import { allowanceFor } from '../budget/window.ts';
import { defaultQuota } from '../platform/config/credential-label.ts';
import type { GithubMode, SourceKind } from '../platform/db/columns.ts';
import type { Db } from '../platform/db/pool.ts';
import type { EventSource } from '../platform/db/schema.ts';
import type { Deps } from '../work/deps.ts';

/**
 * When a source is polled next: after a success, planNextPoll (below: X-Poll-Interval, the
 * quota its expected cost allows, the secondary limit); after a failure, the poll ladder
 * (src/platform/attempts.ts).
 */

export function addSeconds(at: Date, seconds: number): Date {
  return new Date(at.getTime() + seconds * 1000);
}

/** Why a source is not to be polled now, or null when it is. */
export function notDueReason(
  source: Pick<EventSource, 'enabled' | 'mode' | 'next_poll_at'>,
  mode: GithubMode,
  now: Date,
  force: boolean,
): string | null {
  if (!source.enabled) return 'disabled';
  if (source.mode !== mode) return `a ${source.mode} source (this process is ${mode})`;
  if (!force && source.next_poll_at.getTime() > now.getTime()) {
    return `not due until ${source.next_poll_at.toISOString()}`;
  }
  return null;
}

/**
 * The poll plan. A 304 is free of GitHub's quota, so a source is
 * planned with its expected counted cost `c` — `poll_cost`, a weighted mean of the counted
 * requests its recent polls spent — not as if every poll cost one. A source polling every T
 * seconds spends c / T a second. The pool's poll allowance B (a second) is shared by
 * water-filling: every source may spend up to a level L, a source that needs less at its
 * X-Poll-Interval X (c / X <= L) leaves the rest to the others, so
 *     T = max(X, c / L)   and   Σ c / T = Σ min(c / X, L) <= B.
 * Idle feeds (c ≈ 0) poll at X; busy ones share what is left and never overspend. The same
 * rule, with requests r = max(1, c) (a 304 is still a request) and the pool's secondary
 * limit R = credentials × GITHUB_ENDPOINT_RATE_PER_MINUTE / 60 per endpoint template (a
 * kind: every repo feed is `/repos/{o}/{r}/events`), gives a level M and T >= r / M.
 * L is one water-filling step from B / n (see fillLevel), read by one statement per run.
 */

/**
 * How much a poll's outcome moves poll_cost: three 304s take a new source (cost 1) to 0.125,
 * so an imported fleet of idle feeds reaches its X-Poll-Interval within a few passes. A busy
 * source's estimate is noisy; the fleet's sum, which the quota level reads, is not.
 */
export const POLL_COST_WEIGHT = 0.5;
/** poll_cost's bounds (the column's CHECK): a run reads at most a few pages. */
export const POLL_COST_MAX = 100;

/** The weighted mean after one more poll that spent `counted` quota-counted requests. */
export function nextPollCost(previous: number, counted: number): number {
  const c = Math.min(POLL_COST_MAX, Math.max(0, counted));
  const mixed = POLL_COST_WEIGHT * c + (1 - POLL_COST_WEIGHT) * previous;
  // Far below any cost that matters: 0 keeps the sums exact and the column readable.
  return mixed < 1e-6 ? 0 : Math.min(POLL_COST_MAX, mixed);
}

/** poll_cost_samples saturates here: past a few answers the count only says "learned". */
export const POLL_COST_SAMPLES_MAX = 1_000_000;

/** A source's expected cost per poll and how many conditional answers it rests on. */
export interface PollCostEstimate {
  cost: number;
  samples: number;
}

/**
 * What one successful poll teaches. Only a conditional poll (it sent an ETag) is
 * evidence: an unconditional one is a 200 whatever the feed does. The first conditional
 * answer replaces the prior outright — a 304 is believed: the feed is idle until it says
 * otherwise — and every later one moves the weighted mean (nextPollCost), so a feed that turns
 * busy is re-planned from its own answers within a poll or two.
 */
export function learnPollCost(
  known: PollCostEstimate,
  poll: { counted: number; conditional: boolean },
): PollCostEstimate {
  if (!poll.conditional) return known;
  if (known.samples <= 0) {
    return { cost: Math.min(POLL_COST_MAX, Math.max(0, poll.counted)), samples: 1 };
  }
  return {
    cost: nextPollCost(known.cost, poll.counted),
    samples: Math.min(POLL_COST_SAMPLES_MAX, known.samples + 1),
  };
}

/** Requests a poll sends, counted or not: at least page 1 (a 304 is one request). */
export function expectedRequests(cost: number): number {
  return Math.max(1, cost);
}

/**
 * The sums one water-filling step needs, over the sources sharing a budget: how many there
 * are, and the rate (per second, at their X-Poll-Interval) and number of those needing no
 * more than the equal share budget / n.
 */
export interface FillSums {
  budget: number;
  n: number;
  lowRate: number;
  lowN: number;
}

/**
 * The level every source may spend up to: Infinity when all fit at their X-Poll-Interval,
 * else (budget − what the low ones need) shared by the rest — never below budget / n. Valid
 * by construction: Σ min(rate, level) <= lowRate + (n − lowN) × level = budget.
 */
export function fillLevel(s: FillSums): number {
  if (s.n === 0 || s.lowN >= s.n) return Number.POSITIVE_INFINITY;
  return Math.max(s.budget / s.n, (s.budget - s.lowRate) / (s.n - s.lowN));
}

/** FillSums from every source's rate at its X-Poll-Interval (what the statement computes). */
export function fillSums(budget: number, rates: readonly number[]): FillSums {
  const share = budget / Math.max(1, rates.length);
  const low = rates.filter((r) => r <= share);
  return { budget, n: rates.length, lowRate: low.reduce((a, b) => a + b, 0), lowN: low.length };
}

export interface PollPlanInput {
  /** GitHub's X-Poll-Interval for this feed (its floor). */
  pollIntervalSeconds: number;
  /** This source's expected counted requests per poll (its new poll_cost). */
  cost: number;
  /** Counted requests a second each source may spend (fillLevel of the poll allowance). */
  quotaLevel: number;
  /** Requests a second each source of this endpoint may send (fillLevel of the limit). */
  requestLevel: number;
}

export type PollLimit = 'poll_interval' | 'quota' | 'secondary_limit';

export interface PollPlan {
  seconds: number;
  nextPollAt: Date;
  /** Which floor decided (the first of equals, in this order). */
  limitedBy: PollLimit;
}

export function planNextPoll(input: PollPlanInput, now: Date): PollPlan {
  const floors: [PollLimit, number][] = [
    ['poll_interval', Math.max(1, input.pollIntervalSeconds)],
    ['quota', input.cost / input.quotaLevel],
    ['secondary_limit', expectedRequests(input.cost) / input.requestLevel],
  ];
  let [limitedBy, best] = floors[0]!;
  for (const [why, s] of floors) {
    if (s > best) [limitedBy, best] = [why, s];
  }
  const seconds = Math.ceil(best);
  return { seconds, nextPollAt: addSeconds(now, seconds), limitedBy };
}

/** The pool's poll allowance in counted requests a second, from each credential's last quota. */
export async function pollAllowancePerSecond(
  db: Db,
  credentials: readonly string[],
  share: number,
): Promise<number> {
  const rows = credentials.length
    ? await db
        .selectFrom('github_rate_limits')
        .select(['credential', 'quota'])
        .where('credential', 'in', [...credentials])
        .execute()
    : [];
  const quota = new Map(rows.map((r) => [r.credential, r.quota]));
  const hourly = credentials.reduce(
    (n, label) => n + allowanceFor(quota.get(label) ?? defaultQuota(label), share).poll,
    0,
  );
  return hourly / 3600;
}

/**
 * Both water-filling sums in one statement over the enabled sources of `mode`: the quota's
 * (every kind) and the secondary limit's (the sources of `kind`, which share its endpoint).
 * Every source at its stored term; planSourcePoll moves the polled one's (moveTerm).
 */
export async function fleetSums(
  db: Db,
  opts: {
    mode: GithubMode;
    kind: SourceKind;
    quotaBudget: number;
    requestBudget: number;
  },
): Promise<{ quota: FillSums; requests: FillSums }> {
  const r = await sql<{
    n: string;
    ne: string;
    q_rate: number;
    q_n: string;
    r_rate: number;
    r_n: string;
  }>`
    WITH s AS (
      SELECT kind = ${opts.kind} AS same,
             poll_cost::float8 / greatest(1, poll_interval_seconds) AS q,
             greatest(1, poll_cost::float8) / greatest(1, poll_interval_seconds) AS rq
      FROM event_sources WHERE enabled AND mode = ${opts.mode}
    ),
    n AS (SELECT count(*) AS n, count(*) FILTER (WHERE same) AS ne FROM s)
    SELECT n.n, n.ne,
           coalesce(sum(s.q) FILTER (WHERE s.q <= ${opts.quotaBudget}::float8 / greatest(1, n.n)), 0)::float8 AS q_rate,
           count(*) FILTER (WHERE s.q <= ${opts.quotaBudget}::float8 / greatest(1, n.n)) AS q_n,
           coalesce(sum(s.rq) FILTER (WHERE s.same AND s.rq <= ${opts.requestBudget}::float8 / greatest(1, n.ne)), 0)::float8 AS r_rate,
           count(*) FILTER (WHERE s.same AND s.rq <= ${opts.requestBudget}::float8 / greatest(1, n.ne)) AS r_n
    FROM n LEFT JOIN s ON true GROUP BY n.n, n.ne`.execute(db);
  const row = r.rows[0]!;
  return {
    quota: {
      budget: opts.quotaBudget,
      n: Number(row.n),
      lowRate: Number(row.q_rate),
      lowN: Number(row.q_n),
    },
    requests: {
      budget: opts.requestBudget,
      n: Number(row.ne),
      lowRate: Number(row.r_rate),
      lowN: Number(row.r_n),
    },
  };
}

/**
 * The fleet's sums as one pass of polls read them once: fleetSums scans every
 * enabled source, which at 10,000 sources cost more than the poll itself. Within a pass each
 * plan takes the pass's sums and moves only its own source's term.
 */
export interface FleetCache {
  entries: Map<string, FleetNow>;
}

export function newFleetCache(): FleetCache {
  return { entries: new Map() };
}

/** `sums` with one source's rate moved from `before` to `after` (same water-filling share). */
function moveTerm(sums: FillSums, before: number, after: number): FillSums {
  const share = sums.budget / Math.max(1, sums.n);
  let { lowRate, lowN } = sums;
  if (before <= share) {
    lowRate -= before;
    lowN -= 1;
  }
  if (after <= share) {
    lowRate += after;
    lowN += 1;
  }
  return { ...sums, lowRate: Math.max(0, lowRate), lowN: Math.max(0, Math.min(sums.n, lowN)) };
}

/** What the fleet's sums are, for one (mode, kind), as a pass read them. */
export interface FleetNow {
  quota: FillSums;
  requests: FillSums;
}

/**
 * The plan itself, pure (planSourcePoll reads `fleetNow`; tests pass it): what the poll
 * teaches (learnPollCost), then the polled source's term moved in the pass's sums from what
 * is stored to what it learned, and the next poll within both water-filling levels.
 */
export function planFromFleet(
  fleetNow: FleetNow,
  source: Pick<EventSource, 'poll_cost' | 'poll_cost_samples' | 'poll_interval_seconds'>,
  run: { requestsSpent: number; pollIntervalSeconds: number; conditional: boolean },
  now: Date,
): PollPlan & PollCostEstimate {
  const { cost, samples } = learnPollCost(
    { cost: source.poll_cost, samples: source.poll_cost_samples },
    { counted: run.requestsSpent, conditional: run.conditional },
  );
  const oldInterval = Math.max(1, source.poll_interval_seconds);
  const newInterval = Math.max(1, run.pollIntervalSeconds);
  const sums = {
    quota: moveTerm(fleetNow.quota, source.poll_cost / oldInterval, cost / newInterval),
    requests: moveTerm(
      fleetNow.requests,
      expectedRequests(source.poll_cost) / oldInterval,
      expectedRequests(cost) / newInterval,
    ),
  };
  const plan = planNextPoll(
    {
      pollIntervalSeconds: run.pollIntervalSeconds,
      cost,
      quotaLevel: fillLevel(sums.quota),
      requestLevel: fillLevel(sums.requests),
    },
    now,
  );
  return { ...plan, cost, samples };
}

/** Requests a second the pool may send to one endpoint: credentials × the per-minute rate. */
export function endpointBudgetPerSecond(credentials: number, perMinute: number): number {
  // GITHUB_ENDPOINT_RATE_PER_MINUTE=0 turns pacing off: no secondary limit to plan within.
  return (Math.max(1, credentials) * (perMinute || 1_000_000_000)) / 60;
}

/**
 * The runner's one call (in a successful run's finalize transaction): the source's new
 * poll_cost (and the answers it rests on) and when it polls next.
 */
export async function planSourcePoll(
  deps: Pick<Deps, 'db' | 'github' | 'config'>,
  source: Pick<
    EventSource,
    'id' | 'kind' | 'poll_cost' | 'poll_cost_samples' | 'poll_interval_seconds'
  >,
  run: { requestsSpent: number; pollIntervalSeconds: number; conditional: boolean },
  now: Date,
  fleet?: FleetCache,
): Promise<PollPlan & PollCostEstimate> {
  const credentials = deps.github.credentials;
  const requestBudget = endpointBudgetPerSecond(
    credentials.length,
    deps.config.github.endpointRatePerMinute,
  );
  const mode = deps.config.github.mode;
  // Outside a pass (bin/ingest --source) the cache is this plan's alone.
  const cache = fleet ?? newFleetCache();
  const key = `${mode}:${source.kind}`;
  let fleetNow = cache.entries.get(key);
  if (!fleetNow) {
    const quotaBudget = await pollAllowancePerSecond(
      deps.db,
      credentials,
      deps.config.enrichment.share,
    );
    fleetNow = await fleetSums(deps.db, { mode, kind: source.kind, quotaBudget, requestBudget });
    cache.entries.set(key, fleetNow);
  }
  return planFromFleet(fleetNow, source, run, now);
}
