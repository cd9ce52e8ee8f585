import { createGitHubClient } from '../../src/budget/client.ts';
import type { GitHubClient } from '../../src/budget/client-types.ts';
import { type Config, loadConfig } from '../../src/platform/config/config.ts';
import { createLogger } from '../../src/platform/log.ts';
import type { Deps } from '../../src/work/deps.ts';
import type { BenchDatabase } from './database.ts';

/**
 * The real GitHub client, pointed at a fake on loopback. A token is configured (a
 * sentinel, never a real one) so the client budgets for a token's quota, and the fake is
 * started with a limit high enough that the quota never stops a throughput benchmark.
 */

export const BENCH_TOKEN = 'bench-sentinel-token-not-a-secret';

export function benchConfig(
  database: BenchDatabase,
  apiUrl: string,
  env: Record<string, string> = {},
): Config {
  return loadConfig({
    DATABASE_URL: database.url,
    GITHUB_API_URL: apiUrl,
    GITHUB_TOKEN: BENCH_TOKEN,
    LOG_LEVEL: 'silent',
    // The throughput benchmarks measure our path against a zero-latency fake: one token's
    // 15 requests a second per endpoint (GitHub's secondary limit) would be all they measured.
    // The watch benchmark sets the limit and measures against it.
    GITHUB_ENDPOINT_RATE_PER_MINUTE: '0',
    ...env,
  });
}

export interface BenchDeps extends Deps {
  github: GitHubClient;
}

export function benchDeps(
  database: BenchDatabase,
  config: Config,
  workerId = 'bench:1',
  db = database.db,
): BenchDeps {
  const logger = createLogger('silent');
  const github = createGitHubClient({ config, db, databaseUrl: database.url, logger });
  return { config, db, pool: database.pool, github, logger, workerId };
}
