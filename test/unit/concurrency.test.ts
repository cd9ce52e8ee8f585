import { describe, expect, it } from 'vitest';
import {
  CONNECTIONS_PER_FETCHER,
  CONNECTIONS_PER_POLL,
  connectionsBesidePool,
  fitToServer,
  headroom,
  type InFlightPlan,
  inFlightPlan,
  isPlanRole,
  MIN_POLLS,
  PLAN_ROLES,
  type PlanRole,
  POLLS_PER_CREDENTIAL,
} from '../../src/budget/concurrency.ts';
import { buildCredentials, credentialLabels } from '../../src/github/credentials.ts';
import { loadConfig } from '../../src/platform/config/config.ts';
import { createLogger } from '../../src/platform/log.ts';
import { appKeys } from '../support/github-app-keys.ts';

/**
 * ADR 0110 §7 / ADR 0140: the numbers a process works with follow the credentials it holds,
 * and the pool follows those numbers, within a cap.
 */

const tokens = (n: number) => Array.from({ length: n }, (_, i) => `token:${i.toString(16)}`);
const ROLES = Object.keys(PLAN_ROLES) as PlanRole[];

/** The pool a plan's own counts need: the invariant every plan keeps. */
function poolFor(p: InFlightPlan): number {
  return (
    p.polls * CONNECTIONS_PER_POLL +
    (p.fetchers.rest + p.fetchers.graphql) * CONNECTIONS_PER_FETCHER +
    PLAN_ROLES[p.role].spare
  );
}

describe('inFlightPlan', () => {
  it('a worker: two polls and one fetcher per resource for every credential', () => {
    for (const n of [1, 2, 8, 16]) {
      const p = inFlightPlan({ credentials: tokens(n), role: 'worker' });
      expect(p.polls).toBe(Math.max(MIN_POLLS, POLLS_PER_CREDENTIAL * n));
      expect(p.fetchers).toEqual({ rest: n, graphql: n });
      expect(p.dbPool).toBe(2 * p.polls + 2 * n + PLAN_ROLES.worker.spare);
      expect(p.dbPool).toBe(poolFor(p));
      expect(p.wantedPool).toBe(p.dbPool);
      expect(p.limitedBy).toBe('credentials');
    }
  });

  it('what each role does: ingest polls only, enrich fetches REST only, commits both APIs', () => {
    const c = tokens(4);
    expect(inFlightPlan({ credentials: c, role: 'ingest' })).toMatchObject({
      polls: 8,
      fetchers: { rest: 0, graphql: 0 },
      dbPool: 8 * 2 + PLAN_ROLES.ingest.spare,
    });
    expect(inFlightPlan({ credentials: c, role: 'enrich' })).toMatchObject({
      polls: 0,
      fetchers: { rest: 4, graphql: 0 },
    });
    expect(inFlightPlan({ credentials: c, role: 'commits' })).toMatchObject({
      polls: 0,
      fetchers: { rest: 4, graphql: 4 },
    });
    const start = inFlightPlan({ credentials: c, role: 'start' });
    const worker = inFlightPlan({ credentials: c, role: 'worker' });
    expect(start.polls).toBe(worker.polls);
    // bin/start serves the web from the same pool.
    expect(start.dbPool).toBeGreaterThan(worker.dbPool);
  });

  it('anonymous has no GraphQL; a budget key counts as its credential; none is anonymous', () => {
    expect(inFlightPlan({ credentials: ['anonymous'], role: 'worker' })).toMatchObject({
      credentials: { rest: 1, graphql: 0 },
      polls: MIN_POLLS,
      fetchers: { rest: 1, graphql: 0 },
    });
    expect(
      inFlightPlan({
        credentials: ['token:aa', 'token:aa#graphql', 'installation:42', 'installation:42#graphql'],
        role: 'worker',
      }),
    ).toMatchObject({ credentials: { rest: 2, graphql: 2 }, polls: 4 });
    expect(inFlightPlan({ credentials: [], role: 'ingest' }).polls).toBe(MIN_POLLS);
    expect(inFlightPlan({ credentials: ['fixture'], role: 'commits' }).fetchers.graphql).toBe(1);
  });

  it('a cap: every plan fits it, keeps one of each kind of work, and uses the room it has', () => {
    for (const role of ROLES) {
      for (const n of [1, 2, 3, 8, 16, 40]) {
        const credentials = tokens(n);
        const full = inFlightPlan({ credentials, role });
        const least = inFlightPlan({ credentials: tokens(1), role, poolMax: 1 });
        let before: InFlightPlan | null = null;
        for (let cap = 1; cap <= full.wantedPool + 3; cap++) {
          const p = inFlightPlan({ credentials, role, poolMax: cap });
          expect(p.dbPool).toBe(poolFor(p));
          if (p.limitedBy === 'role_minimum') {
            expect(cap).toBeLessThan(least.dbPool);
            expect(p.dbPool).toBe(least.dbPool);
          } else {
            expect(p.dbPool).toBeLessThanOrEqual(cap);
          }
          if (cap >= full.wantedPool) expect(p).toEqual(full);
          else expect(p.limitedBy).not.toBe('credentials');
          // One of each kind the role does, whatever the cap.
          expect(p.polls).toBe(PLAN_ROLES[role].polls ? Math.max(1, p.polls) : 0);
          if (PLAN_ROLES[role].rest) expect(p.fetchers.rest).toBeGreaterThanOrEqual(1);
          if (PLAN_ROLES[role].graphql) expect(p.fetchers.graphql).toBeGreaterThanOrEqual(1);
          // Never more than the credentials ask for.
          expect(p.polls).toBeLessThanOrEqual(full.polls);
          expect(p.fetchers.rest).toBeLessThanOrEqual(full.fetchers.rest);
          expect(p.fetchers.graphql).toBeLessThanOrEqual(full.fetchers.graphql);
          // Room for another poll is never left unused while polls are short.
          if (p.limitedBy === 'pool_cap' && p.polls < full.polls) {
            expect(p.dbPool + CONNECTIONS_PER_POLL).toBeGreaterThan(cap);
          }
          // More room never means fewer polls.
          if (before) expect(p.polls).toBeGreaterThanOrEqual(before.polls);
          before = p;
        }
      }
    }
  });

  it('a worker of 16 tokens capped at 60 connections still polls at most of its width', () => {
    const p = inFlightPlan({ credentials: tokens(16), role: 'worker', poolMax: 60 });
    expect(p.limitedBy).toBe('pool_cap');
    expect(p.dbPool).toBeLessThanOrEqual(60);
    // The room is shared as the credentials would share it: polls keep their proportion.
    expect(p.polls).toBeGreaterThanOrEqual(Math.floor((32 * (60 - 3)) / (98 - 3)));
  });

  it('fits the server: the room max_connections leaves, less headroom and what is open', () => {
    const c = tokens(16);
    const full = inFlightPlan({ credentials: c, role: 'worker' });
    const besides = connectionsBesidePool(full);
    // 16 REST gates, 16 GraphQL gates, pg-boss and liveness.
    expect(besides).toBe(16 + 16 + 5);
    const big = fitToServer(
      { credentials: c, role: 'worker' },
      { maxConnections: 1000, reserved: 3, inUse: 1 },
    );
    expect(big.plan).toEqual(full);
    // Postgres's default 100, 20 sessions open elsewhere: 100 − 3 − 20 − 10 − 37 = 30.
    const small = fitToServer(
      { credentials: c, role: 'worker' },
      { maxConnections: 100, reserved: 3, inUse: 21 },
    );
    expect(small.headroomCap).toBe(100 - 3 - 20 - headroom(100) - besides);
    expect(small.plan.limitedBy).toBe('pool_cap');
    expect(small.plan.dbPool).toBeLessThanOrEqual(small.headroomCap);
    expect(small.plan.dbPool + besides + 20 + 3 + headroom(100)).toBeLessThanOrEqual(100);
    // DATABASE_POOL_MAX below the room wins.
    const capped = fitToServer(
      { credentials: c, role: 'worker', poolMax: 12 },
      { maxConnections: 1000, reserved: 3, inUse: 1 },
    );
    expect(capped.plan.dbPool).toBeLessThanOrEqual(12);
    // A server with no room at all still gets the least the role needs (and says so).
    const none = fitToServer(
      { credentials: c, role: 'worker' },
      { maxConnections: 100, reserved: 3, inUse: 100 },
    );
    expect(none.plan.limitedBy).toBe('role_minimum');
    expect(none.plan.polls).toBe(1);
    // An App's token requests have a gate of their own.
    expect(connectionsBesidePool(full, { app: true })).toBe(besides + 1);
    expect(connectionsBesidePool(inFlightPlan({ credentials: c, role: 'ingest' }))).toBe(16 + 2);
  });

  it('names its roles', () => {
    expect(isPlanRole('worker')).toBe(true);
    expect(isPlanRole('web')).toBe(false);
    expect(isPlanRole('toString')).toBe(false);
  });
});

describe('credentialLabels', () => {
  it('names the pool buildCredentials builds, in its order, for every kind of configuration', () => {
    const { privateKey } = appKeys();
    const envs: Record<string, string>[] = [
      {},
      { GITHUB_MODE: 'fixture', GITHUB_TOKEN: 'ghp_one' },
      { GITHUB_TOKEN: 'ghp_one' },
      { GITHUB_TOKEN: 'ghp_one', GITHUB_TOKENS: 'ghp_two,ghp_three' },
      {
        GITHUB_TOKENS: 'ghp_two',
        GITHUB_APP_ID: '123456',
        GITHUB_APP_PRIVATE_KEY: privateKey,
        GITHUB_APP_INSTALLATION_IDS: '11,22',
      },
    ];
    const o = {
      logger: createLogger('silent'),
      fetch: globalThis.fetch,
      gate: () => ({ run: <T>(fn: () => Promise<T>) => fn() }),
    };
    for (const env of envs) {
      const config = loadConfig(env);
      expect(credentialLabels(config)).toEqual(buildCredentials(config, o).map((c) => c.label));
    }
    expect(credentialLabels(loadConfig({}))).toEqual(['anonymous']);
  });
});
