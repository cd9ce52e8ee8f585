import type { Db } from '../platform/db/pool.ts';
import { graphqlKey } from './graphql-key.ts';
import { poolTotal, snapshotOf } from './snapshot.ts';
import type { BudgetSnapshot, GraphQLBudget, PoolBudget } from './types.ts';
import { type BudgetPolicy, budgetStateStatement } from './window.ts';

/**
 * budget() with each credential's GraphQL window inside its entry (ADR 0110 §1):
 * both keys' states in one statement (the same CTEs), the `#graphql` one shown as
 * `graphql: { quota, remaining, resetAt, blocked, spent }`, never as a credential of its own —
 * so everything that sums or picks credentials (the poll floor, COMMITS_SHARE, /status's
 * pool) reads REST only, as before.
 */

function graphqlOf(s: BudgetSnapshot): GraphQLBudget {
  return {
    quota: s.quota,
    remaining: s.remaining,
    resetAt: s.resetAt,
    blocked:
      s.blockedUntil && s.blockReason ? { until: s.blockedUntil, reason: s.blockReason } : null,
    // Only commits spend a #graphql key (polls and enrichment are REST).
    spent: s.spent.poll + s.spent.enrich + s.spent.commits,
  };
}

/** The pool's GraphQL total: summed, the earliest reset, blocked only when every key is. */
export function graphqlTotal(windows: readonly (GraphQLBudget | null)[]): GraphQLBudget | null {
  const known = windows.filter((w): w is GraphQLBudget => w !== null);
  if (known.length === 0) return null;
  if (known.length === 1) return known[0]!;
  const sum = (f: (w: GraphQLBudget) => number) => known.reduce((n, w) => n + f(w), 0);
  const resets = known.map((w) => w.resetAt).filter((d): d is Date => d !== null);
  const allBlocked = known.every((w) => w.blocked !== null);
  const first = allBlocked
    ? known.reduce((a, b) => (a.blocked!.until <= b.blocked!.until ? a : b)).blocked
    : null;
  return {
    quota: sum((w) => w.quota),
    remaining: known.every((w) => w.remaining === null)
      ? null
      : sum((w) => w.remaining ?? Math.max(0, w.quota - w.spent)),
    resetAt: resets.length ? new Date(Math.min(...resets.map((d) => d.getTime()))) : null,
    blocked: first
      ? {
          until: first.until,
          reason: known.every((w) => w.blocked!.reason === 'auth') ? 'auth' : 'rate_limit',
        }
      : null,
    spent: sum((w) => w.spent),
  };
}

/** Every credential's budget with its GraphQL window (one statement), and the pool's total. */
export async function budgetWithGraphQL(
  db: Db,
  policy: BudgetPolicy,
  graphql: BudgetPolicy | null,
  now: Date,
): Promise<PoolBudget> {
  const all = [...policy.credentials, ...(graphql?.credentials ?? [])];
  const r = await budgetStateStatement(all, now).execute(db);
  const byKey = new Map(r.rows.map((row) => [row.credential, row]));
  const credentials = policy.credentials.map((c) => {
    const rest = snapshotOf(byKey.get(c.label)!, policy.share, now);
    const g = graphql ? byKey.get(graphqlKey(c.label)) : undefined;
    return { ...rest, graphql: g && graphql ? graphqlOf(snapshotOf(g, graphql.share, now)) : null };
  });
  const total = poolTotal(credentials);
  return {
    ...total,
    graphql: graphqlTotal(credentials.map((c) => c.graphql)),
    credentials,
  };
}

/**
 * Would this GraphQL window refuse a 1-point query right now — the reservation's own test
 * (blocked, GitHub's remaining gone, or the window's points spent; the whole window is
 * commits', share 1), read from a snapshot so a caller deciding whether to start work asks
 * without reserving. A credential without a window (null) cannot send a query at all.
 */
export function graphqlWindowRefuses(g: GraphQLBudget | null | undefined): boolean {
  if (!g) return true;
  if (g.blocked !== null) return true;
  // GitHub's remaining, once known, wins over the ledger's sum (budget-state.ts wholeWindow).
  return g.remaining !== null ? g.remaining <= 0 : g.spent >= g.quota;
}
