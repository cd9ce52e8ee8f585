import { sql } from 'kysely';
import { countAwaitingStatement } from '../commits/awaiting.ts';
import { commitsOffFor, credentialInUseSql, sourceWantsCommitsSql } from '../commits/deployment.ts';
import { graphqlSettledSinceSql } from '../commits/graphql/settled.ts';
import {
  COMMITS_STATES,
  type CommitsState,
  PUSH_ORIGINS,
  type PushOrigin,
} from '../platform/db/columns.ts';
import type { Db } from '../platform/db/pool.ts';
import { pushTallyCounts } from '../store/push-tallies.ts';

/**
 * Commits as an operator sees them (ADR 0070): pushes by commits_state, the fetch backlog
 * (pending pushes due now), the fetch rate (commits requests reserved in the last hour,
 * from the ledger) and the commits stored. The pushes by state and the backlog by origin
 * are the push tallies; the due backlog reads the fetcher's partial index; the total of a
 * big commits table is Postgres's estimate, said so by storedEstimated.
 */
export interface CommitsStatus {
  byState: Record<CommitsState, number>;
  /** Pushes for the fetcher (pending, or unverified and covered) whose next attempt has come. */
  pendingDue: number;
  /** The backlog (pending pushes) by the origin each push first arrived from. */
  pendingByOrigin: Record<PushOrigin, number>;
  /** Requests of purpose 'commits' reserved in the last hour. */
  requestsLastHour: number;
  /**
   * GraphQL over the last hour (by UTC minute): the pushes its batches settled (complete,
   * partial or gone, proven by GraphQL; REST fallbacks are in requestsLastHour), the points
   * spent (or reserved) on every `#graphql` key, and pushes ÷ points — null while no point
   * was spent.
   */
  graphql: { pushes: number; points: number; pushesPerPoint: number | null };
  stored: number;
  /** true: `stored` is pg_class.reltuples (the table is too big to count on every status). */
  storedEstimated: boolean;
  /**
   * Why no push that arrives now gets its commits fetched, in one line, or null when some
   * do: no credential used by any process of the deployment in the last hour (whatever the
   * asking process has), or no enabled source with commits on.
   */
  off: string | null;
  /**
   * Pushes a source covers that a process without a credential stored `skipped`: they wait
   * for one, and a worker that has one fetches them, newest first, when nothing else is due.
   */
  awaitingCredential: number;
}

/** Below this estimate the commits are counted exactly. */
const EXACT_BELOW = 200_000;

/** Pushes by commits_state and origin: the push tallies (store/push-tallies.ts), not a count. */
export function commitsStateCounts() {
  return pushTallyCounts();
}

/**
 * The backlog due, the fetch rate, and GraphQL's pushes and points of the last hour, in one
 * statement: the points from the budget's per-minute counters (github_request_minutes, kept
 * 2 hours), the pushes from commits_graphql_minutes (8 rows a minute at most).
 */
export function commitsBacklogStatement(now: Date) {
  const hourAgo = new Date(now.getTime() - 3_600_000);
  return sql<{ due: string; requests: string; graphql_pushes: string; graphql_points: string }>`
    SELECT (SELECT count(*) FROM push_events
            WHERE commits_state IN ('pending', 'unverified')
              AND commits_next_attempt_at <= ${now}) AS due,
           (SELECT count(*) FROM github_requests
            WHERE purpose = 'commits' AND reserved_at > ${hourAgo}) AS requests,
           ${graphqlSettledSinceSql(hourAgo)} AS graphql_pushes,
           (SELECT coalesce(sum(commits), 0) FROM github_request_minutes
            WHERE credential LIKE '%#graphql'
              AND minute >= date_trunc('minute', ${hourAgo}::timestamptz, 'UTC')) AS graphql_points`;
}

/** Pushes a point, to two decimals; null when nothing was spent. */
export function pushesPerPoint(pushes: number, points: number): number | null {
  return points > 0 ? Math.round((pushes / points) * 100) / 100 : null;
}

/**
 * Whether the deployment uses a credential and a source asks for commits, and the pushes
 * waiting for a credential (an index-only count of push_events_commits_awaiting): one
 * statement.
 */
function deploymentStatement(now: Date) {
  return sql<{ credential: boolean; wants: boolean; awaiting: string }>`
    SELECT ${credentialInUseSql(now)} AS credential, ${sourceWantsCommitsSql()} AS wants,
      (${countAwaitingStatement()}) AS awaiting`;
}

export async function commitsStatus(db: Db, now: Date): Promise<CommitsStatus> {
  const d = (await deploymentStatement(now).execute(db)).rows[0]!;
  const out: CommitsStatus = {
    byState: Object.fromEntries(COMMITS_STATES.map((s) => [s, 0])) as Record<CommitsState, number>,
    pendingDue: 0,
    pendingByOrigin: Object.fromEntries(PUSH_ORIGINS.map((o) => [o, 0])) as Record<
      PushOrigin,
      number
    >,
    requestsLastHour: 0,
    graphql: { pushes: 0, points: 0, pushesPerPoint: null },
    stored: 0,
    storedEstimated: false,
    off: commitsOffFor({ credentialInUse: d.credential, sourceWants: d.wants }),
    awaitingCredential: Number(d.awaiting),
  };
  for (const row of (await commitsStateCounts().execute(db)).rows) {
    const n = Number(row.n);
    out.byState[row.commits_state] += n;
    if (row.commits_state === 'pending' && row.origin in out.pendingByOrigin) {
      out.pendingByOrigin[row.origin] += n;
    }
  }
  const b = (await commitsBacklogStatement(now).execute(db)).rows[0]!;
  out.pendingDue = Number(b.due);
  out.requestsLastHour = Number(b.requests);
  const pushes = Number(b.graphql_pushes);
  const points = Number(b.graphql_points);
  out.graphql = { pushes, points, pushesPerPoint: pushesPerPoint(pushes, points) };
  const estimate = await sql<{ n: number }>`
    SELECT reltuples::float8 AS n FROM pg_class WHERE oid = 'stored_commits'::regclass`.execute(db);
  const n = estimate.rows[0]?.n ?? -1;
  if (n >= EXACT_BELOW) {
    out.stored = Math.round(n);
    out.storedEstimated = true;
  } else {
    const exact = await sql<{ n: string }>`SELECT count(*) AS n FROM stored_commits`.execute(db);
    out.stored = Number(exact.rows[0]!.n);
  }
  return out;
}
