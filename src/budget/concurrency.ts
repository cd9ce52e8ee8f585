import type { ConnectionHeadroom } from '../platform/db/connections.ts';

/**
 * How much one process does at once, from the credentials it holds (ADR 0110 §7):
 * polls in flight, background fetchers in flight, and the database pool those need. The one
 * place that turns the pool of credentials into numbers; the runners and createApp read it
 * instead of constants. GitHub's limits are not enforced here: they bind through the request
 * gates and the pacing rows, which every process shares (src/budget/gate.ts, pacing.ts), so
 * more in flight than the limits carry only waits, it never overspends.
 *
 * Pure: no database, no config. createApp (src/app.ts) calls it with the credentials' labels,
 * the process's role and the pool it may have (DATABASE_POOL_MAX, or what max_connections
 * leaves), and keeps the plan on the App.
 */

/**
 * Polls in flight per REST credential. A credential's gate carries one request at a time and
 * its pacing slots are a spacing apart (66.7 ms at 900 a minute); a poll holds the gate from
 * its opening commit, through its wait for the slot and the answer, to the first statement of
 * its finalize. One poll at that gate, one more doing its database work (opening, storing,
 * finalizing) so that it is ready when the gate frees: two keep every gate busy up to its
 * pacing, whatever GitHub's latency (at 100-300 ms an answer the gate, not the pacing, binds).
 */
export const POLLS_PER_CREDENTIAL = 2;

/**
 * The fewest polls a process plans, whatever its credentials (a cap may still take it lower):
 * with one credential the work of a page — the store, the run's bookkeeping — is what a third
 * poll overlaps (measured: three polls as fast as six for one token).
 */
export const MIN_POLLS = 3;

/**
 * Pool connections one poll may hold at once: its source lock's session for the whole run,
 * and one more for a moment — a read outside its transaction (the horizon, a page's commit
 * targets), or a request whose gate was busy (it goes through request(), which gives back or
 * writes a block through the pool). Counting both means no poll ever waits for a connection
 * while it holds locks another holder of a connection may wait for.
 */
export const CONNECTIONS_PER_POLL = 2;

/** Pool connections one background fetcher holds at once: its claim or apply transaction. */
export const CONNECTIONS_PER_FETCHER = 1;

/** What each role does, and how many more connections its other work needs. */
interface RoleWork {
  polls: boolean;
  /** Fetchers over REST (enrichment, commits' compare). */
  rest: boolean;
  /** Fetchers over GraphQL (commits). */
  graphql: boolean;
  /**
   * Connections beside polls and fetchers: a worker's reconcile and maintenance jobs and the
   * poll pass's own reads (the due sources, the deferral of the rest); bin/start's web
   * server (status reads, webhook transactions) on the same pool.
   */
  spare: number;
  /** Connections beside the pool and the gates: pg-boss's pool, the liveness session. */
  besides: number;
}

const WEB_CONNECTIONS = 4;
/** pg-boss's pool in a worker (src/jobs/boss.ts) and the jobs' liveness session. */
const WORKER_BESIDES = 4 + 1;
/** bin/ingest's hint sender (src/jobs/dispatch.ts). */
const HINT_SENDER = 2;

export const PLAN_ROLES = {
  worker: { polls: true, rest: true, graphql: true, spare: 3, besides: WORKER_BESIDES },
  start: {
    polls: true,
    rest: true,
    graphql: true,
    spare: 3 + WEB_CONNECTIONS,
    besides: WORKER_BESIDES,
  },
  ingest: { polls: true, rest: false, graphql: false, spare: 1, besides: HINT_SENDER },
  enrich: { polls: false, rest: true, graphql: false, spare: 2, besides: 0 },
  commits: { polls: false, rest: true, graphql: true, spare: 2, besides: 0 },
} as const satisfies Record<string, RoleWork>;

export type PlanRole = keyof typeof PLAN_ROLES;

export function isPlanRole(role: string): role is PlanRole {
  return Object.hasOwn(PLAN_ROLES, role);
}

export interface InFlightPlanInput {
  /**
   * The labels of the credentials this process holds (GitHubClient.credentials, or
   * credentialLabels(config)). A budget key (`token:…#graphql`) counts as its credential.
   */
  credentials: readonly string[];
  role: PlanRole;
  /**
   * The most pool connections this process may have (DATABASE_POOL_MAX, or what
   * max_connections leaves): the counts shrink to fit it, never below one of each.
   */
  poolMax?: number;
}

export interface InFlightPlan {
  role: PlanRole;
  /** Distinct credentials: every one has a REST budget; `graphql` those that may call GraphQL. */
  credentials: { rest: number; graphql: number };
  /** Sources polled at once (0: this role does not poll). */
  polls: number;
  /** Background fetches at once, by the budget they spend (0: this role does not fetch them). */
  fetchers: { rest: number; graphql: number };
  /** The pool size: CONNECTIONS_PER_POLL a poll, CONNECTIONS_PER_FETCHER a fetcher, and spare. */
  dbPool: number;
  /** The pool the credentials ask for, before any cap. */
  wantedPool: number;
  /**
   * 'credentials': the counts are what the credentials ask for; 'pool_cap': smaller, to fit
   * poolMax; 'role_minimum': poolMax is below the least this role needs (one poll, one fetcher
   * a resource, its spare), so the pool is that least instead.
   */
  limitedBy: 'credentials' | 'pool_cap' | 'role_minimum';
}

/** `token:1a2b#graphql` → `token:1a2b`: a budget key is its credential's. */
function credentialOf(label: string): string {
  const hash = label.indexOf('#');
  return hash < 0 ? label : label.slice(0, hash);
}

/** GraphQL needs a credential: GitHub refuses it anonymously. */
function mayUseGraphql(label: string): boolean {
  return label !== 'anonymous';
}

function poolOf(work: RoleWork, polls: number, fetchers: { rest: number; graphql: number }) {
  return (
    polls * CONNECTIONS_PER_POLL +
    (fetchers.rest + fetchers.graphql) * CONNECTIONS_PER_FETCHER +
    work.spare
  );
}

/** `wanted` scaled by `k`, at least 1 when anything was wanted. */
function scaled(wanted: number, k: number): number {
  return wanted === 0 ? 0 : Math.max(1, Math.floor(wanted * k));
}

export function inFlightPlan(input: InFlightPlanInput): InFlightPlan {
  const work: RoleWork = PLAN_ROLES[input.role];
  const distinct = [...new Set(input.credentials.map(credentialOf))];
  // A process always has a credential to spend (anonymous at least).
  const credentials = {
    rest: Math.max(1, distinct.length),
    graphql: distinct.filter(mayUseGraphql).length,
  };
  const wanted = {
    polls: work.polls ? Math.max(MIN_POLLS, POLLS_PER_CREDENTIAL * credentials.rest) : 0,
    fetchers: {
      rest: work.rest ? credentials.rest : 0,
      graphql: work.graphql ? credentials.graphql : 0,
    },
  };
  const wantedPool = poolOf(work, wanted.polls, wanted.fetchers);
  const base = { role: input.role, credentials, wantedPool };
  const cap = input.poolMax;
  if (cap === undefined || wantedPool <= cap) {
    return { ...base, ...wanted, dbPool: wantedPool, limitedBy: 'credentials' };
  }
  // Every count shrinks by the same factor, so the pool's connections are shared as the credentials
  // would share it; what the floors leave goes to polls first (the feeds' freshness), then
  // to fetchers. A minimum of one keeps every kind of work going.
  const k = Math.max(0, cap - work.spare) / (wantedPool - work.spare);
  let polls = scaled(wanted.polls, k);
  const fetchers = {
    rest: scaled(wanted.fetchers.rest, k),
    graphql: scaled(wanted.fetchers.graphql, k),
  };
  const size = () => poolOf(work, polls, fetchers);
  // A minimum pushed past the cap: the largest count gives back, down to one of each.
  while (size() > cap) {
    if (polls > 1 && polls * CONNECTIONS_PER_POLL >= fetchers.rest + fetchers.graphql) polls--;
    else if (fetchers.rest > 1 && fetchers.rest >= fetchers.graphql) fetchers.rest--;
    else if (fetchers.graphql > 1) fetchers.graphql--;
    else if (polls > 1) polls--;
    else break;
  }
  while (polls < wanted.polls && size() + CONNECTIONS_PER_POLL <= cap) polls++;
  while (fetchers.rest < wanted.fetchers.rest && size() + CONNECTIONS_PER_FETCHER <= cap)
    fetchers.rest++;
  while (fetchers.graphql < wanted.fetchers.graphql && size() + CONNECTIONS_PER_FETCHER <= cap)
    fetchers.graphql++;
  const dbPool = size();
  return {
    ...base,
    polls,
    fetchers,
    dbPool,
    limitedBy: dbPool > cap ? 'role_minimum' : 'pool_cap',
  };
}

/**
 * Left for everything that starts after this process — a web server, bin/status, a worker
 * restarting beside the old one's last sessions: a tenth of max_connections, at least 5.
 */
export function headroom(maxConnections: number): number {
  return Math.max(5, Math.ceil(maxConnections / 10));
}

/**
 * Connections a process opens beside its pool, at most: a gate a credential and resource
 * it sends on (each its own connection, closed after 30 s idle; src/budget/gate.ts), one for
 * an App's token requests, and its role's others (pg-boss, liveness, the hint sender).
 */
export function connectionsBesidePool(plan: InFlightPlan, opts: { app?: boolean } = {}): number {
  const work: RoleWork = PLAN_ROLES[plan.role];
  const rest = work.polls || work.rest ? plan.credentials.rest : 0;
  const graphql = work.graphql ? plan.credentials.graphql : 0;
  return rest + graphql + (opts.app ? 1 : 0) + work.besides;
}

/**
 * The plan that fits the server as this process finds it: its pool, beside its other
 * connections, within what max_connections leaves once the reserved slots, the sessions
 * already open and the headroom are set aside — and within DATABASE_POOL_MAX (`poolMax`).
 * `headroomCap` is that number, for the log line that says why a plan is smaller.
 */
export function fitToServer(
  input: InFlightPlanInput & { app?: boolean },
  server: ConnectionHeadroom,
): { plan: InFlightPlan; headroomCap: number } {
  const unlimited = inFlightPlan({ credentials: input.credentials, role: input.role });
  // Our own first session (the one that asked) is counted in inUse, and is part of the pool.
  const free =
    server.maxConnections - server.reserved - (server.inUse - 1) - headroom(server.maxConnections);
  const headroomCap = Math.max(1, free - connectionsBesidePool(unlimited, input));
  const poolMax = Math.min(input.poolMax ?? Number.POSITIVE_INFINITY, headroomCap);
  return { plan: inFlightPlan({ ...input, poolMax }), headroomCap };
}
