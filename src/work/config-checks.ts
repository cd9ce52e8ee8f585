import { credentialLabels } from '../github/credentials.ts';
import { type Config, leastPointsPerMinute } from '../platform/config/config.ts';
import { defaultQuota } from '../platform/config/credential-label.ts';
import type { Logger } from '../platform/log.ts';
import { splitOf } from './split.ts';

/**
 * Settings that are each valid but, at an end of their range or together, starve a function
 * or switch it off (ADR 0181; docs/configuration.md, "Settings that warn at start"): said at
 * the start of every process that spends the budget, one warning line naming the variable
 * (`config.warning`), and the process runs as told. One that contradicts itself is refused
 * by loadConfig like a bad value (exit 2).
 */

/** A token's hourly quota: the reference for what a share leaves polls. */
const TOKEN_QUOTA = 5000;
/** Requests an hour one source needs at GitHub's usual X-Poll-Interval of 60 s. */
const ONE_SOURCE_AN_HOUR = 60;
/** A batch's queries in the daemon (3 to 6 on 50 pushes): what must fit in a claim's lease. */
const BATCH_QUERIES = 4;

export interface ConfigWarning {
  variable: string;
  message: string;
}

function secondsText(n: number): string {
  return Number.isInteger(n) ? String(n) : n.toFixed(1);
}

/** What the configuration switches off or starves, each in one line naming the variable. */
export function configWarnings(config: Config): ConfigWarning[] {
  const out: ConfigWarning[] = [];
  const share = config.enrichment.share;
  const polls = TOKEN_QUOTA - Math.floor(TOKEN_QUOTA * share);
  if (polls < ONE_SOURCE_AN_HOUR) {
    out.push({
      variable: 'ENRICH_SHARE',
      message: `ENRICH_SHARE=${share} leaves polls ${polls} request(s) an hour of a token's 5,000: fewer than one source polled every 60 s needs (60); sources fall behind and record gaps`,
    });
  }
  const labels = credentialLabels(config);
  const starved = labels.filter((l) => Math.floor(defaultQuota(l) * share) === 0);
  if (starved.length > 0) {
    out.push({
      variable: 'ENRICH_SHARE',
      message: `ENRICH_SHARE=${share} leaves ${starved.join(', ')} no background request an hour (floor(${defaultQuota(starved[0]!)} × ${share}) = 0): no profile, and no commit by REST, is fetched on it`,
    });
  }
  const background = labels.reduce((n, l) => n + Math.floor(defaultQuota(l) * share), 0);
  const floors = splitOf(background, config.commits.share);
  if (background > 0 && floors.commits === 0) {
    out.push({
      variable: 'COMMITS_SHARE',
      message: `COMMITS_SHARE=${config.commits.share} gives commits no floor of the background allowance: a REST compare (every push by REST, or a push GraphQL cannot prove) is sent only while no profile is due for enrichment`,
    });
  }
  if (background > 0 && floors.enrich === 0) {
    out.push({
      variable: 'COMMITS_SHARE',
      message: `COMMITS_SHARE=${config.commits.share} gives enrichment no floor of the background allowance: profiles are fetched only while commits wait for no REST request (by REST: while no push is due)`,
    });
  }
  const rate = config.github.graphqlPointsPerMinute;
  const lease = config.enrichment.leaseSeconds;
  if (rate > 0 && (BATCH_QUERIES * 60) / rate >= lease) {
    out.push({
      variable: 'GRAPHQL_POINTS_PER_MINUTE',
      message: `GRAPHQL_POINTS_PER_MINUTE=${rate} spaces GraphQL queries ${secondsText(60 / rate)} s apart a point: a batch of ${BATCH_QUERIES} queries outlives its claims' lease (ENRICH_LEASE_SECONDS ${lease} s), and another fetcher may take its pushes; ${leastPointsPerMinute(lease, BATCH_QUERIES)} or more keeps it within`,
    });
  }
  return out;
}

/** Says each warning once, at start, as `config.warning` (warn) with its variable. */
export function logConfigWarnings(logger: Logger, config: Config): void {
  for (const w of configWarnings(config)) {
    logger.warn({ event: 'config.warning', variable: w.variable }, w.message);
  }
}
