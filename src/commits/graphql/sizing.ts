import type { PoolBudget } from '../../budget/types.ts';
import { GRAPHQL_MAX_PUSHES_A_QUERY } from './batch.ts';
import { PAGE_MAX } from './proof.ts';

/**
 * How many pushes a GraphQL batch takes and how deep its first round reads (ADR 0183).
 *
 * GitHub charges a query round(requests / 100) points, at least 1, where a history walk of
 * `first` n costs 1 + n requests and a page of the base's history or a count 1. A batch is
 * proven in rounds, and each round's last query is part empty: a batch of 50 pushes spends
 * most of its points on the rounds, not on the pushes (8.5 pushes a point), one of 1,000 on
 * the pushes (25). So a batch takes what is due, as much as the points left and the step's
 * room allow; and its first round fills its queries: each push is read as deep
 * as its share of them, or deeper where the commits per push GitHub's pushes have (learned
 * from the pushes this process settled) say one more query settles more of them at once
 * than the rounds after it would cost.
 */

/** Pushes one batch claims at most. */
export const GRAPHQL_MAX_BATCH = 1_000;
/** 149 requests round to 1 point (GitHub divides by 100 and rounds). */
export const GRAPHQL_MAX_REQUESTS = 149;
/** Expected points this close count as a tie (the model is not finer than that). */
const NEAR_TIE = 0.05;
/** A batch is sized to the points left with this margin (merges, first pushes cost more). */
const POINTS_MARGIN = 0.8;

/**
 * Commits per push on github.com, from whole GH Archive hours that still said `size`
 * (2013–2021: 78% one commit, 11% two, 3.5% three, 97% at most ten): the prior the
 * learned distribution starts from. Index k: pushes of k commits (1..100); `over` those of
 * more, counted at OVER_SIZE (the cap's order).
 */
const PRIOR: Record<number, number> = {
  1: 0.78,
  2: 0.11,
  3: 0.035,
  4: 0.015,
  5: 0.01,
  6: 0.007,
  7: 0.004,
  8: 0.004,
  9: 0.003,
  10: 0.003,
};
const PRIOR_11_TO_20 = 0.014;
const PRIOR_21_TO_100 = 0.01;
const PRIOR_OVER = 0.005;
const OVER_SIZE = 250;
/** The prior counts as this many pushes: a few batches of this process's own outweigh it. */
const PRIOR_WEIGHT = 500;
/** Past this many pushes counted, the counts are halved: the distribution follows the mix. */
const HALVE_AT = 20_000;

/** A running distribution of commits per push settled (1..100, and over 100). */
export class CommitsPerPush {
  readonly counts = new Float64Array(PAGE_MAX + 2);
  total = 0;

  constructor(prior = true) {
    if (!prior) return;
    for (let k = 1; k <= PAGE_MAX; k++) {
      const p = PRIOR[k] ?? (k <= 20 ? PRIOR_11_TO_20 / 10 : k <= 100 ? PRIOR_21_TO_100 / 80 : 0);
      this.counts[k] = p * PRIOR_WEIGHT;
    }
    this.counts[PAGE_MAX + 1] = PRIOR_OVER * PRIOR_WEIGHT;
    this.total = this.counts.reduce((a, b) => a + b, 0);
  }

  /** One push settled with `commits` commits (0, a push behind its base, counts as 1). */
  add(commits: number): void {
    const k = Math.max(1, Math.min(PAGE_MAX + 1, Math.floor(commits)));
    this.counts[k]! += 1;
    this.total += 1;
    if (this.total > HALVE_AT) {
      for (let i = 0; i < this.counts.length; i++) this.counts[i]! /= 2;
      this.total /= 2;
    }
  }

  /** [k, probability] for every k seen (k = PAGE_MAX + 1 stands for OVER_SIZE). */
  entries(): [number, number][] {
    const out: [number, number][] = [];
    if (this.total <= 0) return [[1, 1]];
    this.counts.forEach((n, k) => {
      if (n > 0) out.push([k > PAGE_MAX ? OVER_SIZE : k, n / this.total]);
    });
    return out;
  }
}

/** The first round's asks for every push: a walk of `walk` from its head, and its base's first page. */
export interface FirstRound {
  walk: number;
  withBase: boolean;
}

/**
 * Expected points of a round of `requests` asked by `pushes` in all: a query holds
 * `maxRequests` of them and GRAPHQL_MAX_PUSHES_A_QUERY pushes (its last query half full on
 * average).
 */
function roundPoints(requests: number, pushes: number, maxRequests: number): number {
  if (requests <= 0) return 0;
  const x = Math.max(requests / maxRequests, pushes / GRAPHQL_MAX_PUSHES_A_QUERY);
  return x <= 1 ? 1 : x + 0.5;
}

/**
 * Expected points for a batch of `n` pushes whose first round reads `walk` deep, with or
 * without the base's page, over the distribution. A walk of 1 is the head alone without
 * its history count (1 request; a walk of n is 1 + n). A push of k ≤ walk commits is
 * proven in the first round (its walk reaches its base); one of more needs its base (and,
 * read without it, its head) counted — the first round or a second — and the rest of its
 * commits walked in the round after. A later round is only paid for when some push of the
 * batch needs it.
 */
export function expectedPoints(
  n: number,
  plan: FirstRound,
  dist: readonly [number, number][],
  maxRequests = GRAPHQL_MAX_REQUESTS,
): number {
  return pointsOf(n, plan, dist, maxRequests).total;
}

/** expectedPoints, and the first round's part of it. */
function pointsOf(
  n: number,
  plan: FirstRound,
  dist: readonly [number, number][],
  maxRequests: number,
): { total: number; first: number } {
  const head = plan.walk === 1 ? 1 : 1 + plan.walk;
  const asked = n * (head + (plan.withBase ? 1 : 0));
  let settled = 0;
  let rest = 0;
  let tail = 0;
  for (const [k, p] of dist) {
    const left = k - plan.walk;
    if (left <= 0) settled += p;
    else if (k <= PAGE_MAX) rest += p * (left + 1);
    // A push of more than a walk holds is walked in queries of its own size, whatever the
    // batch: its requests are its points, not a round's.
    else tail += p * (left + Math.ceil(left / PAGE_MAX));
  }
  const needed = 1 - settled ** n;
  const open = n * (1 - settled);
  const counts = (plan.withBase ? 0 : 1) + (plan.walk === 1 ? 1 : 0);
  const first = roundPoints(asked, n, maxRequests);
  let total = first;
  if (counts > 0) total += needed * roundPoints(open * counts, open, maxRequests);
  total += needed * roundPoints(n * rest, open, maxRequests);
  total += (n * tail) / maxRequests;
  return { total, first };
}

/**
 * The first round for a batch of `n`: every depth a walk may read (1–100), with and without
 * the base's page, and for each whole number of queries the first round may take (the
 * fewest that hold every push's head, and four more) the depth that fills them; the plan
 * with the fewest expected points wins. A near tie goes to the one whose first round costs
 * less (the later rounds are only expected), then to the one with the base (which settles
 * a merge or a force push a round sooner), then to the deeper read (the same points, sooner).
 */
export function chooseFirstRound(
  n: number,
  dist: CommitsPerPush | readonly [number, number][],
  maxRequests = GRAPHQL_MAX_REQUESTS,
): FirstRound {
  const entries = dist instanceof CommitsPerPush ? dist.entries() : dist;
  const size = Math.max(1, n);
  const walks = new Set<number>();
  for (let d = 1; d <= PAGE_MAX; d++) walks.add(d);
  const least = Math.ceil(size / maxRequests);
  for (let queries = least; queries <= least + 4; queries++) {
    const per = Math.floor((queries * maxRequests) / size);
    for (const d of [per - 1, per - 2]) if (d >= 1 && d <= PAGE_MAX) walks.add(d);
  }
  const scored: { plan: FirstRound; total: number; first: number }[] = [];
  for (const walk of walks) {
    for (const withBase of [true, false]) {
      const plan = { walk, withBase };
      scored.push({ plan, ...pointsOf(size, plan, entries, maxRequests) });
    }
  }
  const lowest = Math.min(...scored.map((x) => x.total));
  const near = scored.filter((x) => x.total <= lowest + NEAR_TIE);
  near.sort(
    (a, b) =>
      a.first - b.first ||
      Number(b.plan.withBase) - Number(a.plan.withBase) ||
      b.plan.walk - a.plan.walk,
  );
  return near[0]?.plan ?? { walk: 1, withBase: false };
}

/**
 * The points the pool's GraphQL windows still have: what GitHub says remains, else each
 * window's quota less its spend; 0 while it is blocked; null when no credential has one.
 */
export function graphqlPointsLeft(b: PoolBudget): number | null {
  const windows = b.credentials.flatMap((c) => (c.graphql ? [c.graphql] : []));
  if (windows.length === 0) return null;
  return windows.reduce((n, g) => {
    if (g.blocked) return n;
    // GitHub's remaining, once known, wins over the ledger's sum.
    return n + (g.remaining === null ? Math.max(0, g.quota - g.spent) : Math.max(0, g.remaining));
  }, 0);
}

/** What this process has learned of its batches: the commits per push they settled. */
export class BatchHistory {
  readonly sizes = new CommitsPerPush();

  /** A batch proven: the commit counts of the pushes it settled. */
  record(settled: readonly number[]): void {
    for (const k of settled) this.sizes.add(k);
  }

  /**
   * Pushes the next batch claims at most: the step's room, within what the points left pay
   * for (with a margin: merges and first pushes cost more than their size says), by the
   * points a batch of that size is expected to take. Null points: no window to read, no
   * bound from it. (The batch holds its claims for as long as it works on them, renewing
   * their leases before each query: the lease does not bound it.)
   */
  batchSize(o: { room: number; pointsLeft: number | null }): number {
    const dist = this.sizes.entries();
    const points = (n: number) => expectedPoints(n, chooseFirstRound(n, dist), dist);
    const affordable =
      o.pointsLeft === null ? Number.POSITIVE_INFINITY : o.pointsLeft * POINTS_MARGIN;
    let lo = 1;
    let hi = Math.max(1, Math.min(o.room, GRAPHQL_MAX_BATCH));
    if (points(hi) <= affordable) return hi;
    // The largest size whose expected points fit (points grow with the size).
    while (lo < hi) {
      const mid = Math.ceil((lo + hi) / 2);
      if (points(mid) <= affordable) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  }
}

/** This process's: every batch it runs sizes from it and teaches it. */
export const batchHistory = new BatchHistory();
