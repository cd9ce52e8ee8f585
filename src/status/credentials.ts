import { sql } from 'kysely';
import { GRAPHQL_DEFAULT_QUOTA, graphqlKey, labelOf } from '../budget/graphql-key.ts';
import { budgetWithGraphQL } from '../budget/graphql-window.ts';
import type { PoolBudget } from '../budget/types.ts';
import type { BudgetPolicy } from '../budget/window.ts';
import { credentialLabels } from '../github/credentials.ts';
import type { Config } from '../platform/config/config.ts';
import { defaultQuota } from '../platform/config/credential-label.ts';
import type { Db } from '../platform/db/pool.ts';
import { type BackgroundReading, readBackground, shareRule } from '../work/split.ts';

/**
 * Whose budget the status surfaces show: the deployment's, read from the database, not the
 * credentials of the process that happens to ask. A `bin/status` in a shell
 * without the worker's GitHub App variables would otherwise report `anonymous 60 ? never`
 * while the workers spend on four installations.
 *
 * A credential belongs to the deployment when the database has heard of it lately: a
 * rate-limit answer (github_rate_limits) in the last day, a block still running, or requests
 * that spent in the window counters (github_request_minutes, kept 2 h: every reservation adds
 * to them; a credential that only got 304s has a fresh rate-limit row). A GraphQL budget key (`token:1a2b#graphql`) is its credential's, never a credential
 * of its own. The asking process's own credentials are shown too (a token configured but not
 * used yet), in its configuration order first — except its fallback `anonymous` (or
 * `fixture`), which stands for "nothing configured here", not for a credential anyone uses,
 * once the database knows of a real one.
 */

/** A rate-limit row older than this (and not blocking) is a credential no longer in use. */
const SEEN_WITHIN_MS = 24 * 3_600_000;
/** The window counters' retention (migration 2026-12-01T1300): what they can say. */
const COUNTED_WITHIN_MS = 2 * 3_600_000;

/** Only the fallback of a process with nothing configured. */
function isFallback(label: string): boolean {
  return label === 'anonymous' || label === 'fixture';
}

/** The labels the database knows, each once, without budget-key suffixes, sorted. */
export async function knownCredentials(db: Db, now: Date): Promise<string[]> {
  const seen = new Date(now.getTime() - SEEN_WITHIN_MS);
  const counted = new Date(now.getTime() - COUNTED_WITHIN_MS);
  const r = await sql<{ credential: string }>`
    SELECT credential FROM github_rate_limits
    WHERE observed_at > ${seen} OR blocked_until > ${now}
    UNION
    SELECT DISTINCT credential FROM github_request_minutes
    WHERE minute >= ${counted} AND poll + enrich + commits > 0`.execute(db);
  return [...new Set(r.rows.map((row) => labelOf(row.credential)))].sort();
}

/** This process's credentials first (configuration order), then the rest the database knows. */
export function mergeCredentials(
  configured: readonly string[],
  known: readonly string[],
): string[] {
  const knownSet = new Set(known);
  const realKnown = known.some((k) => !isFallback(k));
  const mine = configured.filter((c) => knownSet.has(c) || !isFallback(c) || !realKnown);
  const out = [...mine];
  for (const k of known) if (!out.includes(k)) out.push(k);
  return out;
}

export async function deploymentPolicy(db: Db, config: Config, now: Date): Promise<BudgetPolicy> {
  const labels = mergeCredentials(credentialLabels(config), await knownCredentials(db, now));
  return {
    credentials: labels.map((label) => ({ label, defaultQuota: defaultQuota(label) })),
    share: config.enrichment.share,
  };
}

/** Each credential's GraphQL key (anonymous has none), the whole window commits'. */
export function graphqlPolicyFor(policy: BudgetPolicy): BudgetPolicy | null {
  const credentials = policy.credentials
    .filter((c) => c.label !== 'anonymous')
    .map((c) => ({ label: graphqlKey(c.label), defaultQuota: GRAPHQL_DEFAULT_QUOTA }));
  return credentials.length > 0 ? { credentials, share: 1 } : null;
}

/**
 * Every credential of the deployment with its GraphQL window (one statement) and their total,
 * as github.budget() gives them for one process's credentials.
 */
export async function deploymentBudget(
  db: Db,
  config: Config,
  now: Date,
  known?: BudgetPolicy,
): Promise<PoolBudget> {
  const policy = known ?? (await deploymentPolicy(db, config, now));
  return budgetWithGraphQL(db, policy, graphqlPolicyFor(policy), now);
}

/**
 * The deployment's background allowance by the share rule, over the credentials of
 * `policy` (deploymentPolicy's): commits go by REST when this configuration says so or no
 * credential has a GraphQL window.
 */
export function deploymentBackground(
  db: Db,
  config: Config,
  policy: BudgetPolicy,
  now: Date,
): Promise<BackgroundReading> {
  const credentials = policy.credentials.map((c) => c.label);
  const rule = shareRule(config, { graphqlEnabled: graphqlPolicyFor(policy) !== null });
  return readBackground(db, { credentials }, rule, now);
}
