import type { Credential } from '../github/credentials.ts';
import type { Transport } from '../github/transport.ts';
import type { Clock } from '../platform/clock.ts';
import type { Config } from '../platform/config/config.ts';
import type { Db } from '../platform/db/pool.ts';
import type { Logger } from '../platform/log.ts';
import type { RequestGate } from './gate.ts';
import { GRAPHQL_DEFAULT_QUOTA, graphqlKey, hasGraphQL, isGraphQLKey } from './graphql-key.ts';
import type { BudgetPolicy } from './window.ts';

/**
 * What the parts of the GitHub client share (client.ts builds it once): the pool of
 * credentials and its two budget policies (REST under each label, GraphQL under each
 * `label#graphql`, ADR 0114), the gates by budget key, the transport, the clock.
 */
export interface ClientContext {
  readonly config: Config;
  readonly db: Db;
  readonly logger: Logger;
  readonly clock: Clock;
  readonly sleep: (ms: number) => Promise<void>;
  readonly transport: Transport;
  /** The request gate of a budget key (or `app:<id>`), opened on first use. */
  gateFor(key: string): RequestGate;
  readonly pool: readonly Credential[];
  readonly byLabel: ReadonlyMap<string, Credential>;
  readonly labels: readonly string[];
  /** REST: each credential's label, background share ENRICH_SHARE. */
  readonly policy: BudgetPolicy;
  /** GraphQL: each `label#graphql` whose credential GraphQL takes, the whole window commits'; null when none. */
  readonly graphqlPolicy: BudgetPolicy | null;
  /** REST endpoint pacing: the least time between two requests of a credential to one endpoint. */
  readonly spacing: number;
}

/** `[` and `]` are legal in a WHATWG path but GitHub wants them encoded (`dependabot%5Bbot%5D`). */
export function encodePath(p: string): string {
  return p.replace(/\[/g, '%5B').replace(/\]/g, '%5D');
}

/**
 * The GraphQL policy of a pool: every credential GraphQL takes, under its
 * `#graphql` key, with the whole window as background allowance (share 1: no poll
 * allowance; only commits spend it).
 */
export function graphqlPolicyOf(pool: readonly Credential[]): BudgetPolicy | null {
  const credentials = pool
    .filter((c) => hasGraphQL(c.kind))
    .map((c) => ({ label: graphqlKey(c.label), defaultQuota: GRAPHQL_DEFAULT_QUOTA }));
  return credentials.length > 0 ? { credentials, share: 1 } : null;
}

/** The budget keys a 401 of this credential blocks: its REST key and its GraphQL key. */
export function keysOf(cred: Credential): string[] {
  return hasGraphQL(cred.kind) ? [cred.label, graphqlKey(cred.label)] : [cred.label];
}

/** The quota a key is assumed to have before GitHub's first answer for it. */
export function defaultQuotaOf(cred: Credential, key: string): number {
  return isGraphQLKey(key) ? GRAPHQL_DEFAULT_QUOTA : cred.defaultQuota;
}
