import { describe, expect, it } from 'vitest';
import { createApp } from '../../src/app.ts';
import { type InFlightPlan, inFlightPlan } from '../../src/budget/concurrency.ts';
import { credentialLabels } from '../../src/github/credentials.ts';
import { loadConfig } from '../../src/platform/config/config.ts';
import { connectionHeadroom } from '../../src/platform/db/connections.ts';
import { pollsInFlight } from '../../src/poll/poll-due.ts';
import { captureLogger } from '../recovery/helpers.ts';
import { useTestDatabase } from '../support/db.ts';

/**
 * ADR 0140: createApp sizes a polling or fetching process's pool from its credentials, within
 * DATABASE_POOL_MAX and what the server has free, and the poll runner takes its width from the
 * same plan. The server's connection headroom is injected where a figure depends on it (the shared test
 * server's other sessions come and go); one test reads the real one.
 */

const t = useTestDatabase();
const BIG = { maxConnections: 10_000, reserved: 3, inUse: 1 };

function tokens(n: number): string {
  return Array.from({ length: n }, (_, i) => `ghp_app_pool_${i}_not_a_secret`).join(',');
}

function config(env: Record<string, string>) {
  return loadConfig({ DATABASE_URL: t.url, LOG_LEVEL: 'silent', ...env });
}

async function withApp<T>(
  opts: Parameters<typeof createApp>[0],
  fn: (app: Awaited<ReturnType<typeof createApp>>) => T | Promise<T>,
): Promise<T> {
  const app = await createApp(opts);
  try {
    return await fn(app);
  } finally {
    await app.close();
  }
}

describe('createApp: the pool follows the credentials', () => {
  it('a worker of 8 tokens polls 16 at once on the pool that plan needs', async () => {
    const cfg = config({ GITHUB_TOKENS: tokens(8) });
    const { logger, events } = captureLogger();
    await withApp({ config: cfg, logger, role: 'worker', connectionHeadroom: BIG }, (app) => {
      expect(app.inFlight).toEqual(
        inFlightPlan({ credentials: credentialLabels(cfg), role: 'worker' }),
      );
      expect(app.inFlight!.polls).toBe(16);
      expect(app.pool.options.max).toBe(app.inFlight!.dbPool);
      expect(pollsInFlight(app)).toBe(16);
    });
    expect(events('app.in_flight_plan')).toMatchObject([
      { level: 'debug', polls: 16, db_pool: 16 * 2 + 8 + 8 + 3, limited_by: 'credentials' },
    ]);
  });

  it('DATABASE_POOL_MAX caps it, the polls shrink to fit, and the log says why', async () => {
    const cfg = config({ GITHUB_TOKENS: tokens(8), DATABASE_POOL_MAX: '20' });
    const { logger, events } = captureLogger();
    const plan = await withApp(
      { config: cfg, logger, role: 'worker', connectionHeadroom: BIG },
      (app) => {
        expect(app.pool.options.max).toBe(app.inFlight!.dbPool);
        expect(pollsInFlight(app)).toBe(app.inFlight!.polls);
        return app.inFlight as InFlightPlan;
      },
    );
    expect(plan.dbPool).toBeLessThanOrEqual(20);
    expect(plan.polls).toBeGreaterThanOrEqual(1);
    expect(plan.polls).toBeLessThan(16);
    const [line] = events('app.in_flight_plan');
    expect(line).toMatchObject({ level: 'warn', limited_by: 'pool_cap', pool_cap: 20 });
    expect(line!.msg).toMatch(/DATABASE_POOL_MAX=20/);
  });

  it('a server short of connections: the pool fits what it has free, and the log names it', async () => {
    const cfg = config({ GITHUB_TOKENS: tokens(16) });
    const { logger, events } = captureLogger();
    const room = { maxConnections: 100, reserved: 3, inUse: 41 };
    const plan = await withApp(
      { config: cfg, logger, role: 'worker', connectionHeadroom: room },
      (app) => {
        expect(app.pool.options.max).toBe(app.inFlight!.dbPool);
        return app.inFlight as InFlightPlan;
      },
    );
    // 100 − 3 reserved − 40 others − 10 headroom − (32 gates + pg-boss 4 + liveness 1) = 10.
    expect(plan.dbPool).toBeLessThanOrEqual(10);
    expect(events('app.in_flight_plan')[0]!.msg).toMatch(/max_connections=100 with 41 open/);
  });

  it('reads the real server when it is not told, and stays within it', async () => {
    const cfg = config({ GITHUB_TOKENS: tokens(2) });
    await withApp({ config: cfg, role: 'ingest' }, async (app) => {
      const room = await connectionHeadroom(app.db);
      expect(app.pool.options.max).toBe(app.inFlight!.dbPool);
      expect(app.inFlight!.dbPool).toBeLessThanOrEqual(Math.max(room.maxConnections, 1));
      expect(pollsInFlight(app)).toBe(app.inFlight!.polls);
    });
  });

  it('a role with no plan keeps the pool it asks for', async () => {
    await withApp({ config: config({}), role: 'web', poolMax: 6, requires: 'none' }, (app) => {
      expect(app.inFlight).toBeNull();
      expect(app.pool.options.max).toBe(6);
    });
    await withApp(
      { config: config({ DATABASE_POOL_MAX: '4' }), role: 'web', poolMax: 6, requires: 'none' },
      (app) => expect(app.pool.options.max).toBe(4),
    );
  });
});
