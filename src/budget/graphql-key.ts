import type { CredentialKind } from '../github/credentials.ts';

/**
 * A credential's GraphQL budget key (ADR 0110 §1): its label with `#graphql`
 * appended (`token:1a2b3c4d#graphql`, `installation:42#graphql`). Everything keyed by
 * credential — ledger rows, github_rate_limits, the minute counters, blocks, the gate's lock,
 * the pacing row — works unchanged per key, so GitHub's GraphQL points window is computed by
 * the code that computes its REST window, and never mixes with it.
 */
export const GRAPHQL_KEY_SUFFIX = '#graphql';

/** GitHub's GraphQL points an hour before an answer tells: a token's 5,000 (an installation's answer may say up to 12,500). */
export const GRAPHQL_DEFAULT_QUOTA = 5000;

export function graphqlKey(label: string): string {
  return `${label}${GRAPHQL_KEY_SUFFIX}`;
}

export function isGraphQLKey(key: string): boolean {
  return key.endsWith(GRAPHQL_KEY_SUFFIX);
}

/** The credential's label of a budget key (the key itself for a REST one). */
export function labelOf(key: string): string {
  return isGraphQLKey(key) ? key.slice(0, -GRAPHQL_KEY_SUFFIX.length) : key;
}

/** GitHub's GraphQL API refuses anonymous requests: every other kind has a GraphQL window. */
export function hasGraphQL(kind: CredentialKind): boolean {
  return kind !== 'anonymous';
}
