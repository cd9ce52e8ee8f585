import { inFlightPlan, PLAN_ROLES, type PlanRole } from '../budget/concurrency.ts';
import type { Deps } from './deps.ts';

/**
 * How many steps a fetch cycle runs at once (ADR 0170): the process's in-flight plan's
 * fetchers for the budget the steps spend — `rest` for enrichment and REST compare,
 * `graphql` for commits by GraphQL batches (src/budget/concurrency.ts: one a credential that
 * may spend it). A caller without a plan (tests, benches) plans from its client's
 * credentials the way pollsInFlight does, within its pool when it has one, so a process with
 * one credential runs one lane: one entity at a time, as before there were lanes.
 *
 * More lanes than credentials would only wait at the request gates (one request in flight
 * a credential, every process): the plan gives one a credential and no more.
 */
export type LaneDeps = Pick<Deps, 'github'> & Partial<Pick<Deps, 'inFlight' | 'pool'>>;

export function fetchLanes(
  deps: LaneDeps,
  budget: 'rest' | 'graphql',
  role: Extract<PlanRole, 'enrich' | 'commits'>,
): number {
  const plan =
    deps.inFlight ??
    inFlightPlan({
      credentials: deps.github.credentials,
      role,
      poolMax: deps.pool?.options?.max,
    });
  const fetchers = Math.max(1, plan.fetchers[budget]);
  // A worker (and bin/start) runs both enrichment classes' cycles at once on the same REST
  // fetchers: each class takes half, so the two together hold what the plan sized the pool
  // and the gates for, not twice that.
  if (role === 'enrich' && PLAN_ROLES[plan.role].polls)
    return Math.max(1, Math.floor(fetchers / 2));
  return fetchers;
}
