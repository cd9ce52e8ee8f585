import type http from 'node:http';
import type { FakeCommit, Graph } from './fake-commit-graph.ts';
import type { FakeAppOptions, MintedToken } from './fake-github-app.ts';
import type { GraphQLBucket, GraphQLFault, GraphQLKnobs, GraphQLRecord } from './fake-graphql.ts';
import type { GitHubEvent, Json } from './github-factories.ts';

/** The fake GitHub's interface and options (fake-github.ts implements them). */

export type FeedKey = string;

export interface RateLimitSetting {
  limit?: number;
  remaining?: number;
  resetAt?: Date;
}

export interface Fault {
  /** Exact pathname (e.g. `/users/octocat`), pathname + query, or a RegExp on pathname + query. */
  path: string | RegExp;
  method?: string;
  /** Status to answer (default 500 unless only delayMs is given: then the normal answer, late). */
  status?: number;
  /** How many requests this fault applies to (default 1; Infinity for all). */
  times?: number;
  /** Wait this long before answering (or before the normal answer). */
  delayMs?: number;
  /** Never answer (the client must time out). */
  hang?: boolean;
  /** Destroy the socket without an answer (ECONNRESET on the client). */
  reset?: boolean;
  /** Raw body to send (e.g. truncated JSON); default a GitHub-style error JSON. */
  body?: string;
  headers?: Record<string, string>;
}

export interface RecordedRequest {
  method: string;
  /** Decoded pathname, e.g. `/users/dependabot[bot]`. */
  path: string;
  /** Raw pathname + query as sent on the wire. */
  rawUrl: string;
  query: Record<string, string>;
  headers: http.IncomingHttpHeaders;
  /**
   * Whose request: 'anonymous', 'token:<sha256 prefix>' (the client's label),
   * 'installation:<id>', 'app:<id>' (a token request), 'invalid' (a token GitHub rejects).
   */
  credential: string;
  /** null while in flight, or when the fault reset/hung the connection. */
  status: number | null;
  counted: boolean;
  startedAt: Date;
  endedAt: Date | null;
}

export interface FakeGitHubOptions {
  port?: number;
  /** Default hourly limit for anonymous callers (60) and for token callers (5000). */
  anonymousLimit?: number;
  tokenLimit?: number;
  /** X-Poll-Interval for feeds without their own setting (default 60). */
  pollInterval?: number;
  /** Extra latency for every request, so concurrency is observable (default 0). */
  latencyMs?: number;
  /** Answer concurrent requests with a secondary-limit 403 (default true). */
  enforceSerial?: boolean;
  /** Hourly GraphQL points of a token (5000); an installation's is its REST limit. */
  graphqlLimit?: number;
  /**
   * GitHub's per-endpoint secondary limit: a credential's request past this many to one
   * route template in the last 60 s is a secondary-limit 403 (retry-after: 60). Default off.
   */
  endpointRatePerMinute?: number;
}

export interface FakeGitHub {
  readonly url: string;
  readonly requests: RecordedRequest[];
  /** Requests that spent quota (not 304s, not primary-limit 403s, not resets/hangs). */
  readonly countedRequests: number;
  /** Most requests in flight at once, any credentials. */
  readonly maxInFlight: number;
  /** Most requests in flight at once for one credential, per credential. */
  readonly maxInFlightByCredential: Readonly<Record<string, number>>;
  readonly inFlight: number;
  readonly secondaryLimitHits: number;
  /** Called with each request after it is recorded and before it is answered. */
  onRequest: ((req: RecordedRequest) => void | Promise<void>) | null;
  addEvents(feed: FeedKey, events: GitHubEvent[]): void;
  /** The feed's current events, newest first (all of them, not only the newest 300). */
  feed(feed: FeedKey): GitHubEvent[];
  setUser(profile: Json & { id: number; login: string }): void;
  setRepo(profile: Json & { id: number; full_name: string }): void;
  removeUser(login: string): void;
  removeRepo(fullName: string): void;
  renameRepo(oldFullName: string, newFullName: string): void;
  setPollInterval(feed: FeedKey, seconds: number): void;
  /** Commits of a repository, parents first (see fake-commit-graph.ts). */
  addCommits(fullName: string, commits: FakeCommit[]): void;
  setBranch(fullName: string, branch: string, sha: string): void;
  deleteBranch(fullName: string, branch: string): void;
  /** Renames a branch; the old name stops resolving; a default branch stays the default. */
  renameBranch(fullName: string, from: string, to: string): void;
  /** The repository's commit graph, to read with fake-commit-graph.ts (undefined: none). */
  commitGraph(fullName: string): Graph | undefined;
  /** The default branch the fake serves for the repository (its profile's, or `main`). */
  defaultBranch(fullName: string): string;
  /** `POST /graphql`: its knobs, faults, points window and the queries it answered. */
  readonly graphql: FakeGraphQLControls;
  /**
   * Without `token`/`installation`: every bucket now and every new one; with one: that
   * token's (or installation's) bucket.
   */
  setRateLimit(setting: RateLimitSetting, opts?: BucketOf): void;
  rateLimit(opts?: BucketOf): {
    limit: number;
    remaining: number;
    resetAt: Date;
    used: number;
  };
  fail(fault: Fault): void;
  /** Register a GitHub App (its public key) and its installations. */
  addApp(app: FakeAppOptions): void;
  /** The installation is gone: its token requests answer 404. */
  removeInstallation(installationId: number): void;
  /** Every token minted so far for the installation answers 401 from now on. */
  revokeInstallationTokens(installationId: number): void;
  /** This personal token answers 401 ("Bad credentials") from now on, as a revoked one does. */
  revokeToken(token: string): void;
  /** Installation tokens minted, in order (the tests' sentinels). */
  readonly mintedTokens: readonly MintedToken[];
  /** Every App JWT received by the token endpoint (the tests' sentinels). */
  readonly jwtsSeen: readonly string[];
  /** Back to the state right after start: no data, faults, hook, requests or counters. */
  reset(): void;
  close(): Promise<void>;
}

export interface BucketOf {
  token?: string | null;
  installation?: number;
}

export interface FakeGraphQLControls {
  /** Change knobs (fake-graphql.ts DEFAULT_KNOBS); reset() restores the defaults. */
  configure(knobs: Partial<GraphQLKnobs>): void;
  /** The next `times` queries (default 1) answer this instead (default a 502). */
  fail(fault: GraphQLFault): void;
  /** A credential's GraphQL points window (a token's, an installation's). */
  rateLimit(opts?: BucketOf): GraphQLBucket;
  /** Without `token`/`installation`: every window now and every new one. */
  setRateLimit(setting: RateLimitSetting & { used?: number }, opts?: BucketOf): void;
  /** Every POST /graphql, in order. */
  readonly queries: readonly GraphQLRecord[];
  /** Points charged, over all credentials or for one. */
  pointsSpent(opts?: BucketOf): number;
}
