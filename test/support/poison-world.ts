import { afterAll, beforeAll, expect } from 'vitest';
import { createGitHubClient } from '../../src/budget/client.ts';
import type { Deps } from '../../src/work/deps.ts';
import type { TestDatabase } from './db.ts';
import { type FakeGitHub, startFakeGitHub } from './fake-github.ts';
import { memoryLogger, testConfig } from './github-client.ts';
import { startTestWeb, type TestWeb } from './web.ts';

/**
 * What the bad-input tests share: a fake GitHub, the real client and ingestion deps on
 * the file's database (their log lines kept), and, when asked, the web server for
 * webhook deliveries. Registers its own beforeAll/afterAll; read the fields inside tests.
 */
export interface PoisonWorld {
  fake: FakeGitHub;
  deps: Deps;
  logLines: string[];
  /** Set when `web: true`. */
  web: TestWeb;
}

export function usePoisonWorld(
  t: TestDatabase,
  opts: { workerId: string; web?: boolean; logLevel?: string },
): PoisonWorld {
  const world = {} as PoisonWorld;
  let closeClient: (() => Promise<void>) | undefined;
  beforeAll(async () => {
    world.fake = await startFakeGitHub();
    const config = testConfig(t, { apiUrl: world.fake.url });
    const { logger, lines } = memoryLogger(opts.logLevel ?? 'info');
    world.logLines = lines;
    const github = createGitHubClient({ config, db: t.db, databaseUrl: t.url, logger });
    closeClient = () => github.close();
    world.deps = { config, db: t.db, pool: t.pool, github, logger, workerId: opts.workerId };
    if (opts.web) world.web = await startTestWeb(t);
  });
  afterAll(async () => {
    await world.web?.close();
    await closeClient?.();
    await world.fake?.close();
  });
  return world;
}

/** Poison never counts against its source: no failure, no last error. */
export async function expectSourceHealthy(t: TestDatabase, sourceId: string): Promise<void> {
  const src = await t.db
    .selectFrom('event_sources')
    .select(['consecutive_failures', 'last_error'])
    .where('id', '=', sourceId)
    .executeTakeFirstOrThrow();
  expect(src).toEqual({ consecutive_failures: 0, last_error: null });
}
