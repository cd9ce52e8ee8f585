import { randomBytes } from 'node:crypto';
import { Writable } from 'node:stream';
import { createGitHubClient } from '../../src/budget/client.ts';
import type { GitHubClient, ReserveMeta } from '../../src/budget/client-types.ts';
import type { Reservation } from '../../src/budget/types.ts';
import type { Clock } from '../../src/platform/clock.ts';
import { type Config, loadConfig } from '../../src/platform/config/config.ts';
import type { RequestPurpose } from '../../src/platform/db/columns.ts';
import { createLogger, type Logger } from '../../src/platform/log.ts';
import type { TestDatabase } from './db.ts';

/**
 * Real GitHub clients for tests: each gets its own request gate (its own connection,
 * hence its own Postgres session) exactly as a separate process would. Close them with
 * `closeAll()` in afterEach/afterAll; the harness fails the file on a leaked connection.
 */

export interface TestClientOptions {
  apiUrl: string;
  /** Default: a fresh random token, so each test has its own credential and budget. */
  token?: string | null;
  mode?: 'live' | 'fixture';
  fixturesDir?: string;
  gateWaitSeconds?: number;
  responseTimeoutMs?: number;
  connectTimeoutMs?: number;
  logger?: Logger;
  env?: Record<string, string>;
  /** The client's time (its reservations, windows and budget): default the system clock. */
  clock?: Clock;
}

/** A reservation on `gh`'s pool, or null when the pool says no (tryReserve without its reason). */
export async function reserve(
  gh: GitHubClient,
  purpose: RequestPurpose,
  meta?: ReserveMeta,
): Promise<Reservation | null> {
  const d = await gh.tryReserve(purpose, meta);
  return d.ok ? d.reservation : null;
}

export function randomToken(): string {
  return `ghp_test${randomBytes(12).toString('hex')}`;
}

export function testConfig(t: TestDatabase, o: TestClientOptions): Config {
  const token = o.token === undefined ? randomToken() : o.token;
  const base = loadConfig({
    DATABASE_URL: t.url,
    GITHUB_API_URL: o.apiUrl,
    GITHUB_MODE: o.mode ?? 'live',
    ...(token ? { GITHUB_TOKEN: token } : {}),
    ...(o.fixturesDir ? { GITHUB_FIXTURES_DIR: o.fixturesDir } : {}),
    GATE_WAIT_SECONDS: String(o.gateWaitSeconds ?? 5),
    LOG_LEVEL: 'silent',
    // The policy these tests' expectations were written for; a process left unset takes the
    // database's (test/integration/stored-settings.test.ts), which an in-process config skips.
    COMMIT_EMAILS: 'hash',
    ...o.env,
  });
  return {
    ...base,
    github: {
      ...base.github,
      responseTimeoutMs: o.responseTimeoutMs ?? base.github.responseTimeoutMs,
      connectTimeoutMs: o.connectTimeoutMs ?? base.github.connectTimeoutMs,
    },
  };
}

/** A pino logger whose lines are kept in memory (to assert on what would be logged). */
export function memoryLogger(level = 'debug'): { logger: Logger; lines: string[] } {
  const lines: string[] = [];
  const sink = new Writable({
    write(chunk, _enc, cb) {
      lines.push(...String(chunk).split('\n').filter(Boolean));
      cb();
    },
  });
  return { logger: createLogger(level, sink), lines };
}

export function clientFactory(t: TestDatabase) {
  const open: GitHubClient[] = [];
  return {
    make(o: TestClientOptions): GitHubClient {
      const config = testConfig(t, o);
      const client = createGitHubClient({
        config,
        db: t.db,
        databaseUrl: t.url,
        logger: o.logger ?? createLogger('silent'),
        ...(o.clock ? { clock: o.clock } : {}),
      });
      open.push(client);
      return client;
    },
    async closeAll(): Promise<void> {
      await Promise.all(open.splice(0).map((c) => c.close()));
    },
  };
}
