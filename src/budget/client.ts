import { buildCredentials, type Credential } from '../github/credentials.ts';
import { createHttpFetch } from '../github/http-fetch.ts';
import { spacingMs } from '../github/pacing.ts';
import {
  fixtureTransport,
  gitHubFetch,
  liveTransport,
  type Transport,
} from '../github/transport.ts';
import { type Clock, systemClock } from '../platform/clock.ts';
import type { Config } from '../platform/config/config.ts';
import type { Db } from '../platform/db/pool.ts';
import type { Logger } from '../platform/log.ts';
import { type ClientContext, graphqlPolicyOf } from './client-context.ts';
import type { GitHubClient } from './client-types.ts';
import { createRequestGate, type RequestGate } from './gate.ts';
import { createGraphQL } from './graphql.ts';
import { budgetWithGraphQL } from './graphql-window.ts';
import { createHeld } from './held.ts';
import { createPollSession, pollPass } from './poll-session.ts';
import { createRequester } from './request.ts';
import { createSender } from './send.ts';

/**
 * The GitHub client over a pool of credentials (ADR 0003): every request is
 * reserved on one credential's budget (the one with the most of its purpose's allowance
 * left), sent through that credential's request gate with that credential's Authorization,
 * and settled on that credential's ledger row and rate-limit row. With one credential
 * (GITHUB_TOKEN, anonymous, fixture) this is exactly the single-credential client.
 *
 * A credential has two budget keys: REST under its label, GraphQL
 * under `label#graphql`, each with its own window, gate and pacing. The parts: the pool loop
 * of REST requests (request.ts), a poll's session and its held requests (poll-session.ts,
 * held.ts), GraphQL (graphql.ts), all sending
 * through send.ts; answers read by classify.ts and graphql-answer.ts.
 */

export interface GitHubClientOptions {
  config: Config;
  db: Db;
  /** The gate opens its own tiny pool on this URL (session locks need a dedicated connection). */
  databaseUrl: string;
  logger: Logger;
  clock?: Clock;
  /** Tests: replace the HTTP/fixture transport. */
  transport?: Transport;
  /** How to wait for an endpoint's pacing slot (tests pair it with `clock`). */
  sleep?: (ms: number) => Promise<void>;
}

/**
 * Connections to GitHub this client may keep: each request gate has at most one request in
 * flight (a credential's REST and GraphQL keys, an App's token requests), plus a few for
 * redirects and a request that overlaps its predecessor's socket being freed.
 */
export function socketsFor(config: Config): number {
  const { tokens, app } = config.github;
  const credentials = Math.max(1, tokens.length + (app?.installationIds.length ?? 0));
  return 2 * credentials + (app ? 1 : 0) + 4;
}

const realSleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

export function createGitHubClient(opts: GitHubClientOptions): GitHubClient {
  const { config, db, logger } = opts;
  const clock = opts.clock ?? systemClock;
  const mode = config.github.mode;
  const httpFetch = createHttpFetch({
    connectTimeoutMs: config.github.connectTimeoutMs,
    responseTimeoutMs: config.github.responseTimeoutMs,
    maxSockets: socketsFor(config),
  });

  const transport =
    opts.transport ??
    (mode === 'fixture'
      ? fixtureTransport({ dir: config.github.fixturesDir, apiUrl: config.github.apiUrl })
      : liveTransport({
          apiUrl: config.github.apiUrl,
          userAgent: config.github.userAgent,
          fetch: httpFetch,
          // The whole answer, decoded, within the connect and response timeouts.
          deadlineMs: config.github.connectTimeoutMs + config.github.responseTimeoutMs,
        }));
  // One gate per budget key (a credential's REST and GraphQL keys, and one per App for its
  // token requests), opened on first use; each holds one connection of its own.
  const gates = new Map<string, RequestGate>();
  let closed = false;
  const gateFor = (name: string): RequestGate => {
    if (closed) throw new Error('GitHub client is closed');
    let gate = gates.get(name);
    if (!gate) {
      gate = createRequestGate({
        db,
        databaseUrl: opts.databaseUrl,
        credential: name,
        waitSeconds: config.github.gateWaitSeconds,
        logger,
      });
      gates.set(name, gate);
    }
    return gate;
  };
  // App token requests go through the same GitHub fetch: API version, answer cap.
  const pool = buildCredentials(config, {
    logger,
    fetch: gitHubFetch(httpFetch, config.github.apiUrl),
    gate: gateFor,
  });
  const ctx: ClientContext = {
    config,
    db,
    logger,
    clock,
    sleep: opts.sleep ?? realSleep,
    transport,
    gateFor,
    pool,
    byLabel: new Map<string, Credential>(pool.map((c) => [c.label, c])),
    labels: pool.map((c) => c.label),
    policy: {
      credentials: pool.map((c) => ({ label: c.label, defaultQuota: c.defaultQuota })),
      share: config.enrichment.share,
    },
    graphqlPolicy: graphqlPolicyOf(pool),
    spacing: spacingMs(config.github.endpointRatePerMinute),
  };
  const sender = createSender(ctx);
  const requester = createRequester(ctx, sender);
  const held = createHeld(ctx, sender, requester);
  const { graphql } = createGraphQL(ctx, sender, requester);

  return {
    credential: pool[0]!.label,
    credentials: ctx.labels,
    mode,
    graphqlEnabled: ctx.graphqlPolicy !== null,
    tryReserve: requester.tryReserve,
    request: requester.request,
    pollSession: (session, o) => createPollSession(ctx, held, requester, session, o),
    pollPass: () => pollPass(ctx.labels.length),
    graphql,
    budget: () => budgetWithGraphQL(db, ctx.policy, ctx.graphqlPolicy, clock.now()),
    async close() {
      closed = true;
      await Promise.all([...gates.values()].map((g) => g.close()));
      gates.clear();
    },
  };
}
