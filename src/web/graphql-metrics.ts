import { sql } from 'kysely';
import type { Counter, Gauge } from 'prom-client';
import { SPENDS_QUOTA } from '../budget/ledger.ts';
import type { BudgetSnapshot } from '../budget/types.ts';
import { BLOCK_REASONS } from '../platform/db/columns.ts';
import type { Db } from '../platform/db/pool.ts';

/**
 * Each credential's GraphQL points window on /metrics (ADR 0114), labelled
 * by the credential's label (never `#graphql`: the window is the credential's, not another
 * credential): its quota, what is left, its reset, the points spent in it, whether a block
 * stops it, and every point GraphQL ever spent (live ledger rows plus what retention pruned).
 */

type Make<T> = (name: string, help: string, labelNames?: string[]) => T;

export async function collectGraphQL(
  db: Db,
  counter: Make<Counter>,
  gauge: Make<Gauge>,
  credentials: readonly BudgetSnapshot[] | null,
): Promise<void> {
  const total = counter(
    'gpi_github_graphql_points_total',
    'GraphQL points spent (rateLimit.cost of each answered query, else its estimate), by credential',
    ['credential'],
  );
  const r = await sql<{ credential: string; n: string }>`
    SELECT credential, sum(n)::bigint AS n FROM (
      SELECT left(credential, -length('#graphql')) AS credential, sum(coalesce(points, 1)) AS n
      FROM github_requests
      WHERE credential LIKE '%#graphql' AND outcome NOT IN ('reserved', 'sent') AND ${SPENDS_QUOTA}
      GROUP BY credential
      UNION ALL
      SELECT labels->>'credential', n FROM metric_tallies
      WHERE metric = 'gpi_github_graphql_points_total'
    ) t GROUP BY credential`.execute(db);
  for (const row of r.rows) total.inc({ credential: row.credential }, Number(row.n));
  if (!credentials) return;

  const quota = gauge(
    'gpi_github_graphql_quota',
    'GraphQL points an hour, by credential (x-ratelimit-limit of its GraphQL answers)',
    ['credential'],
  );
  const remaining = gauge(
    'gpi_github_graphql_remaining',
    "GraphQL points the credential has left in its window (GitHub's last remaining minus spent since)",
    ['credential'],
  );
  const reset = gauge(
    'gpi_github_graphql_reset_timestamp_seconds',
    "When the credential's GraphQL window resets (Unix time)",
    ['credential'],
  );
  const spent = gauge(
    'gpi_github_graphql_points_spent',
    "GraphQL points spent or reserved by commits in the credential's current window",
    ['credential'],
  );
  const blocked = gauge(
    'gpi_github_graphql_blocked',
    "1 while a 403/429 (reason rate_limit) or a 401 on either of the credential's keys (reason auth) blocks its GraphQL",
    ['credential', 'reason'],
  );
  for (const c of credentials) {
    const g = c.graphql;
    if (!g) continue;
    const credential = c.credential;
    quota.set({ credential }, g.quota);
    if (g.remaining !== null) remaining.set({ credential }, g.remaining);
    if (g.resetAt) reset.set({ credential }, g.resetAt.getTime() / 1000);
    spent.set({ credential }, g.spent);
    for (const reason of BLOCK_REASONS) {
      blocked.set({ credential, reason }, g.blocked?.reason === reason ? 1 : 0);
    }
  }
}

/**
 * Pushes a point over the last hour (by UTC minute, from commitsStatus): the pushes GraphQL
 * batches settled, the points every GraphQL window spent, and their ratio (0 while no point
 * was spent: a gauge has no "unknown"). For a longer range, divide the two gauges' sums.
 */
export function collectPushesPerPoint(
  gauge: Make<Gauge>,
  g: { pushes: number; points: number; pushesPerPoint: number | null },
): void {
  gauge(
    'gpi_github_graphql_pushes_last_hour',
    'Pushes whose commits GraphQL batches settled (complete, partial or gone) in the last hour',
  ).set(g.pushes);
  gauge(
    'gpi_github_graphql_points_last_hour',
    'GraphQL points spent or reserved, over every credential, in the last hour',
  ).set(g.points);
  gauge(
    'gpi_github_graphql_pushes_per_point',
    'Pushes GraphQL settled per GraphQL point in the last hour (0 while no point was spent)',
  ).set(g.pushesPerPoint ?? 0);
}
