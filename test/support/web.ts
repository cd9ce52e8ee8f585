import { sign } from '@octokit/webhooks-methods';
import { createGitHubClient } from '../../src/budget/client.ts';
import type { GitHubClient } from '../../src/budget/client-types.ts';
import type { Clock } from '../../src/platform/clock.ts';
import type { Config } from '../../src/platform/config/config.ts';
import type { Db } from '../../src/platform/db/pool.ts';
import { createWebPools } from '../../src/web/pools.ts';
import type { WebDeps } from '../../src/web/respond.ts';
import { startWebServer, type WebServer } from '../../src/web/server.ts';
import type { TestDatabase } from './db.ts';
import { memoryLogger, testConfig } from './github-client.ts';

/**
 * The web server on a free loopback port, wired to the test's database, a real (fixture
 * mode, never networked) GitHub client and an in-memory logger. `close()` stops the server
 * and the client's gate pool.
 */

export const TEST_WEBHOOK_SECRET = "It's a Secret to Everybody";

export interface TestWeb {
  url: string;
  config: Config;
  deps: WebDeps;
  /** Every log line the server wrote (JSON). */
  logs: string[];
  close(): Promise<void>;
}

export interface TestWebOptions {
  env?: Record<string, string>;
  /** Serve from another database handle (e.g. a pool the test takes down). */
  db?: Db;
  boss?: WebDeps['boss'];
  /** 'live' without a token: an anonymous process (default 'fixture', which has a credential). */
  mode?: 'live' | 'fixture';
  /** Pools of their own for webhook intake and /archive, of these sizes, as bin/web has. */
  pools?: { intake: number; archive: number };
  /**
   * /readyz's deadline (default READINESS_TIMEOUT_MS, 2 s). A test that asserts what the
   * checks find, not that they end in time, sets one no loaded machine reaches: at load 25 on
   * 2 cores the checks (a connection of their own and three queries) took over 2 s, and the
   * answer was the deadline's 503 instead of the checks'.
   */
  readinessTimeoutMs?: number;
  /** The server's now (the status page's and /status's "ago" and "due"); the system's by default. */
  clock?: Clock;
}

export async function startTestWeb(t: TestDatabase, o: TestWebOptions = {}): Promise<TestWeb> {
  const config = testConfig(t, {
    apiUrl: 'http://127.0.0.1:9',
    mode: o.mode ?? 'fixture',
    token: null,
    env: { WEBHOOK_SECRET: TEST_WEBHOOK_SECRET, ...o.env },
  });
  const { logger, lines } = memoryLogger('debug');
  const github: GitHubClient = createGitHubClient({
    config,
    db: t.db,
    databaseUrl: t.url,
    logger,
  });
  const pools = o.pools ? createWebPools(t.url, o.pools, logger) : undefined;
  const deps: WebDeps = {
    config,
    db: o.db ?? t.db,
    logger,
    github,
    boss: o.boss,
    databaseUrl: t.url,
    pools,
    readinessTimeoutMs: o.readinessTimeoutMs,
    clock: o.clock,
  };
  let server: WebServer;
  try {
    server = await startWebServer(deps, { host: '127.0.0.1', port: 0 });
  } catch (err) {
    await pools?.close();
    await github.close();
    throw err;
  }
  return {
    url: server.url,
    config,
    deps,
    logs: lines,
    async close() {
      await server.close();
      await pools?.close();
      await github.close();
    },
  };
}

let seq = 0;

/** A `push` webhook payload as GitHub sends it (trimmed to what matters); fields overridable. */
export function pushPayload(
  o: {
    repositoryId?: number;
    fullName?: string;
    senderId?: number;
    login?: string;
    ref?: string;
    before?: string;
    after?: string;
    commits?: number;
  } = {},
) {
  seq++;
  const after = o.after ?? `${seq.toString(16)}`.padStart(40, 'c');
  const commits = Array.from({ length: o.commits ?? 1 }, (_, i) => ({
    id: i === (o.commits ?? 1) - 1 ? after : `${seq}${i}`.padStart(40, 'd'),
    message: `commit ${i}`,
    distinct: true,
    url: `https://github.com/o/r/commit/${i}`,
    author: { name: 'Octo Cat', email: 'octocat@example.com' },
  }));
  return {
    ref: o.ref ?? 'refs/heads/main',
    before: o.before ?? '0'.repeat(39) + '1',
    after,
    created: false,
    deleted: false,
    forced: false,
    compare: 'https://github.com/o/r/compare/x...y',
    commits,
    head_commit: commits.at(-1) ?? null,
    repository: {
      id: o.repositoryId ?? 7_000_000 + seq,
      full_name: o.fullName ?? `hook-owner/repo-${seq}`,
      pushed_at: 1_764_403_200 + seq,
    },
    pusher: { name: o.login ?? `pusher${seq}`, email: 'pusher@example.com' },
    sender: { id: o.senderId ?? 8_000_000 + seq, login: o.login ?? `pusher${seq}` },
  };
}

export interface Delivery {
  event?: string;
  deliveryId?: string | null;
  body: string;
  /** Default: signed with TEST_WEBHOOK_SECRET. null: no signature header. */
  signature?: string | null;
  contentType?: string;
}

/** POSTs a delivery the way GitHub does. */
export async function deliver(
  url: string,
  d: Delivery,
): Promise<{ status: number; json: unknown }> {
  const headers: Record<string, string> = {
    'content-type': d.contentType ?? 'application/json',
    'x-github-event': d.event ?? 'push',
    'user-agent': 'GitHub-Hookshot/test',
    'x-github-hook-id': '123456',
  };
  if (d.deliveryId !== null) headers['x-github-delivery'] = d.deliveryId ?? crypto.randomUUID();
  const signature =
    d.signature === undefined ? await sign(TEST_WEBHOOK_SECRET, d.body) : d.signature;
  if (signature !== null) headers['x-hub-signature-256'] = signature;
  const res = await fetch(`${url}/webhooks/github`, { method: 'POST', headers, body: d.body });
  const text = await res.text();
  let json: unknown = text;
  try {
    json = JSON.parse(text);
  } catch {}
  return { status: res.status, json };
}
