import { sql } from 'kysely';
import { Counter, collectDefaultMetrics, Gauge, Registry } from 'prom-client';
import type { GitHubClient } from '../budget/client-types.ts';
import type { BudgetSnapshot } from '../budget/types.ts';
import type { Config } from '../platform/config/config.ts';
import {
  BACKFILL_FILE_STATES,
  BLOCK_REASONS,
  COMMITS_STATES,
  ENRICHMENT_STATES,
  EVENT_ID_CLASH_KINDS,
  GAP_STATES,
  PUSH_ORIGINS,
  REQUEST_PURPOSES,
  RUN_STATUSES,
} from '../platform/db/columns.ts';
import type { Db } from '../platform/db/pool.ts';
import { pgBossInstalled } from '../platform/db/setup-state.ts';
import { commitsStatus } from '../status/commits.ts';
import { deploymentBudget } from '../status/credentials.ts';
import { gapStatus } from '../status/gaps.ts';
import { queueStatuses } from '../status/queues.ts';
import { readPushTallies } from '../store/push-tallies.ts';
import { REJECTION_REASONS } from '../store/rules.ts';
import { routingLabel } from '../webhooks/events.ts';
import { backlog } from '../work/enrichment-due.ts';
import type { ByteBudget } from './body-budget.ts';
import { collectGraphQL, collectPushesPerPoint } from './graphql-metrics.ts';
import { jobDurationHistogram, type Labels } from './job-metrics.ts';

/** The allowances a budget reports: polls', and the background one (enrich and commits share it). */
const ALLOWANCES = [
  'poll',
  'enrich',
] as const satisfies readonly (keyof BudgetSnapshot['allowance'])[];

/** Live rows + tallies of pruned rows, per label set, for one counter. */
async function tallied(
  db: Db,
  metric: string,
  live: ReturnType<typeof sql<{ labels: Labels; n: string }>>,
): Promise<{ labels: Labels; n: number }[]> {
  const r = await sql<{ labels: Labels; n: string }>`
    SELECT labels, sum(n)::bigint AS n FROM (
      ${live}
      UNION ALL
      SELECT labels, n FROM metric_tallies WHERE metric = ${metric}
    ) t (labels, n) GROUP BY labels`.execute(db);
  return r.rows.map((row) => ({ labels: row.labels, n: Number(row.n) }));
}

/** A label value from the database, folded into a fixed set. */
function label(value: string | undefined, known: readonly string[]): string {
  return value !== undefined && known.includes(value) ? value : 'other';
}

/**
 * The pool, per credential (labels: `token:<sha256 prefix>`, `installation:<id>`, never a
 * secret): what each may spend and has spent in its window, what it has left, and whether
 * a 403/429 (rate_limit) or a 401 (auth) blocks it. The totals above are their sums.
 */
function credentialGauges(
  gauge: (name: string, help: string, labelNames?: string[]) => Gauge,
  credentials: BudgetSnapshot[],
): void {
  const spent = gauge(
    'gpi_github_credential_spent',
    "Requests that spent quota in the credential's current window, by credential and purpose",
    ['credential', 'purpose'],
  );
  const allowance = gauge(
    'gpi_github_credential_allowance',
    'Requests the credential may spend per window, by purpose (ENRICH_SHARE of its quota)',
    ['credential', 'purpose'],
  );
  const remaining = gauge(
    'gpi_github_credential_remaining',
    "What the credential has left in its window (GitHub's last remaining minus spent since)",
    ['credential'],
  );
  const blocked = gauge(
    'gpi_github_credential_blocked',
    '1 while a 403/429 (reason rate_limit) or a 401 (reason auth) blocks the credential',
    ['credential', 'reason'],
  );
  for (const c of credentials) {
    const credential = c.credential;
    for (const purpose of REQUEST_PURPOSES) spent.set({ credential, purpose }, c.spent[purpose]);
    for (const purpose of ALLOWANCES) allowance.set({ credential, purpose }, c.allowance[purpose]);
    if (c.remaining !== null) remaining.set({ credential }, c.remaining);
    for (const reason of BLOCK_REASONS) {
      blocked.set(
        { credential, reason },
        c.blockedUntil !== null && c.blockReason === reason ? 1 : 0,
      );
    }
  }
}

export interface MetricsDeps {
  db: Db;
  config: Config;
  /**
   * Present: the request budget's gauges too, of the deployment's credentials as the
   * database knows them (the same numbers /status and bin/status show), not only this
   * process's.
   */
  github?: Pick<GitHubClient, 'budget'>;
}

export interface MetricsEndpoint {
  contentType: string;
  /** Reads everything and renders the Prometheus text exposition. */
  scrape(): Promise<string>;
}

export function createMetrics(
  deps: MetricsDeps,
  local: { bodyBudget?: ByteBudget } = {},
): MetricsEndpoint {
  // The web process's own health (memory, event loop lag, open handles); process-local by nature.
  const processRegistry = new Registry();
  collectDefaultMetrics({ register: processRegistry });
  const budget = local.bodyBudget;
  if (budget) {
    new Gauge({
      name: 'gpi_webhook_body_bytes_buffered',
      help: `Request body bytes this process holds in memory right now (capped at ${budget.limit}, of which ${budget.reserve} only for bodies up to 1 MiB)`,
      registers: [processRegistry],
      collect() {
        this.set(budget.inUse);
      },
    });
    new Gauge({
      name: 'gpi_webhook_bodies_reading',
      help: 'Webhook request bodies being read right now (charged only for bytes received)',
      registers: [processRegistry],
      collect() {
        this.set(budget.reading);
      },
    });
    new Counter({
      name: 'gpi_webhook_busy_total',
      help: 'Webhook requests this process answered 503 because the body cap was reached',
      registers: [processRegistry],
      collect() {
        this.reset();
        this.inc(budget.refused);
      },
    });
  }

  return {
    contentType: Registry.PROMETHEUS_CONTENT_TYPE,
    async scrape() {
      const registry = new Registry();
      await collectDb(deps, registry);
      return Registry.merge([processRegistry, registry]).metrics();
    },
  };
}

type MakeMetric<T> = (name: string, help: string, labelNames?: string[]) => T;

/** Gap records by state, what the archive recovered, and the backfill imports. */
async function collectGaps(
  db: Db,
  counter: MakeMetric<Counter>,
  gauge: MakeMetric<Gauge>,
): Promise<void> {
  const g = await gapStatus(db);
  const records = gauge('gpi_gap_records', 'Recorded gaps by state (open, filled, unavailable)', [
    'state',
  ]);
  for (const state of GAP_STATES) records.set({ state }, g.byState[state]);
  counter(
    'gpi_gap_events_recovered_total',
    'Pushes the archive fills stored for recorded gaps',
  ).inc(g.eventsRecovered);
  const files = await sql<{ state: string; n: string; created: string; last: Date | null }>`
    SELECT state, count(*) AS n, coalesce(sum(pushes_created), 0) AS created, max(updated_at) AS last
    FROM backfill_files GROUP BY state`.execute(db);
  const byState = gauge('gpi_backfill_files', 'Archive file imports by state', ['state']);
  for (const state of BACKFILL_FILE_STATES) byState.set({ state }, 0);
  const stored = counter(
    'gpi_backfill_pushes_stored_total',
    'Pushes stored by archive imports (bin/backfill and gap fills)',
  );
  stored.inc(0);
  let last = 0;
  for (const row of files.rows) {
    byState.set({ state: row.state }, Number(row.n));
    stored.inc(Number(row.created));
    last = Math.max(last, row.last ? row.last.getTime() / 1000 : 0);
  }
  gauge(
    'gpi_backfill_last_activity_timestamp_seconds',
    'When an archive import last committed (Unix time; 0 if never)',
  ).set(last);
}

async function collectDb({ db, config, github }: MetricsDeps, registers: Registry): Promise<void> {
  const counter = (name: string, help: string, labelNames: string[] = []) =>
    new Counter({ name, help, labelNames, registers: [registers] });
  const gauge = (name: string, help: string, labelNames: string[] = []) =>
    new Gauge({ name, help, labelNames, registers: [registers] });

  const pushes = counter(
    'gpi_push_events_ingested_total',
    'Push events stored, by how each push first arrived (poll, webhook or archive)',
    ['origin'],
  );
  for (const origin of PUSH_ORIGINS) pushes.inc({ origin }, 0);
  // The push tallies (store/push-tallies.ts): bounded by months, not by the pushes held.
  for (const t of await readPushTallies(db)) {
    if (t.pushes > 0) pushes.inc({ origin: t.origin }, t.pushes);
  }

  // Two stored pushes contending for one event id: reused across eras, or disputed in one.
  const clashes = counter(
    'gpi_event_id_clashes_total',
    'Pushes found claiming an event id another push holds (event_id_clashes), by kind: reused (another era) or disputed (the same era)',
    ['kind'],
  );
  for (const kind of EVENT_ID_CLASH_KINDS) clashes.inc({ kind }, 0);
  const byKind = await sql<{ kind: string; n: string }>`
    SELECT kind, count(*) AS n FROM event_id_clashes GROUP BY kind`.execute(db);
  for (const row of byKind.rows) {
    clashes.inc({ kind: label(row.kind, EVENT_ID_CLASH_KINDS) }, Number(row.n));
  }

  const runs = counter('gpi_ingestion_runs_total', 'Finished ingestion runs by outcome', [
    'outcome',
  ]);
  // Finished runs: every status but 'running'.
  for (const outcome of RUN_STATUSES) if (outcome !== 'running') runs.inc({ outcome }, 0);
  for (const { labels, n } of await tallied(
    db,
    'gpi_ingestion_runs_total',
    sql`SELECT jsonb_build_object('outcome', status), count(*) FROM ingestion_runs
        WHERE status <> 'running' GROUP BY status`,
  )) {
    runs.inc(labels, n);
  }
  const running = await sql<{ n: string }>`
    SELECT count(*) AS n FROM ingestion_runs WHERE status = 'running'`.execute(db);
  gauge('gpi_ingestion_runs_running', 'Ingestion runs in progress').set(Number(running.rows[0]!.n));

  const gaps = counter(
    'gpi_gaps_total',
    'Ingestion runs that recorded a gap (three pages without overlap: events may be missing)',
  );
  gaps.inc(0);
  for (const { n } of await tallied(
    db,
    'gpi_gaps_total',
    sql`SELECT '{}'::jsonb, count(*) FROM ingestion_runs WHERE gap_detected HAVING count(*) > 0`,
  )) {
    gaps.inc(n);
  }

  await collectGaps(db, counter, gauge);

  const requests = counter(
    'gpi_github_requests_total',
    'Finished GitHub requests by purpose and HTTP status (or error / abandoned when none came back)',
    ['purpose', 'status'],
  );
  for (const { labels, n } of await tallied(
    db,
    'gpi_github_requests_total',
    sql`SELECT jsonb_build_object('purpose', purpose, 'status', coalesce(status::text, outcome)), count(*)
        FROM github_requests WHERE outcome NOT IN ('reserved', 'sent')
        GROUP BY purpose, coalesce(status::text, outcome)`,
  )) {
    requests.inc(labels, n);
  }
  const inFlight = await sql<{ purpose: string; n: string }>`
    SELECT purpose, count(*) AS n FROM github_requests WHERE outcome IN ('reserved', 'sent')
    GROUP BY purpose`.execute(db);
  const open = gauge(
    'gpi_github_requests_in_flight',
    'GitHub requests reserved or sent and not yet finished, by purpose',
    ['purpose'],
  );
  for (const purpose of REQUEST_PURPOSES) open.set({ purpose }, 0);
  for (const row of inFlight.rows) open.set({ purpose: row.purpose }, Number(row.n));

  // One row per credential ('anonymous', 'fixture', 'token:<sha256 prefix>': never a token).
  const limits = await sql<{
    credential: string;
    quota: number;
    remaining: number;
    reset_at: Date;
  }>`
    SELECT credential, quota, remaining, reset_at FROM github_rate_limits
    -- a credential's GraphQL window is its own set (gpi_github_graphql_*), never a credential
    WHERE credential NOT LIKE '%#graphql'`.execute(db);
  const remaining = gauge(
    'gpi_github_rate_limit_remaining',
    'x-ratelimit-remaining as GitHub last reported it, by credential',
    ['credential'],
  );
  const quota = gauge('gpi_github_rate_limit_limit', 'x-ratelimit-limit: the hourly quota', [
    'credential',
  ]);
  const reset = gauge(
    'gpi_github_rate_limit_reset_timestamp_seconds',
    'When the rate-limit window resets (Unix time), by credential',
    ['credential'],
  );
  for (const row of limits.rows) {
    remaining.set({ credential: row.credential }, row.remaining);
    quota.set({ credential: row.credential }, row.quota);
    reset.set({ credential: row.credential }, row.reset_at.getTime() / 1000);
  }

  const attempts = counter(
    'gpi_enrichment_attempts_total',
    'Finished enrichment attempts by class and outcome',
    ['class', 'outcome'],
  );
  for (const { labels, n } of await tallied(
    db,
    'gpi_enrichment_attempts_total',
    sql`SELECT jsonb_build_object('class', class, 'outcome', outcome), count(*)
        FROM enrichment_attempts WHERE outcome IS NOT NULL GROUP BY class, outcome`,
  )) {
    attempts.inc(labels, n);
  }

  const now = new Date();
  const backlogGauge = gauge(
    'gpi_enrichment_backlog',
    'Actors and repositories by enrichment state',
    ['class', 'state'],
  );
  const dueGauge = gauge('gpi_enrichment_due', 'Entities due for enrichment now', ['class']);
  for (const [cls, b] of Object.entries(await backlog(db, now, config.enrichment.ttlSeconds))) {
    for (const state of ENRICHMENT_STATES) {
      backlogGauge.set({ class: cls, state }, b[state]);
    }
    dueGauge.set({ class: cls }, b.due);
  }

  const commits = await commitsStatus(db, now);
  const byState = gauge('gpi_push_commits_state', 'Pushes by commits_state', ['state']);
  for (const state of COMMITS_STATES) byState.set({ state }, commits.byState[state]);
  const pendingByOrigin = gauge(
    'gpi_commits_pending_by_origin',
    'Pushes pending their commits, by the origin each first arrived from (the backlog by origin)',
    ['origin'],
  );
  for (const [origin, n] of Object.entries(commits.pendingByOrigin))
    pendingByOrigin.set({ origin }, n);
  gauge(
    'gpi_commits_pending_due',
    'Pushes whose commits fetch is due now (pending, or unverified and covered)',
  ).set(commits.pendingDue);
  gauge(
    'gpi_commits_awaiting_credential',
    'Pushes a source covers, stored skipped by a process without a credential: they wait for one',
  ).set(commits.awaitingCredential);
  gauge(
    'gpi_commits_requests_last_hour',
    'Requests of purpose commits reserved in the last hour (the fetch rate)',
  ).set(commits.requestsLastHour);
  gauge(
    'gpi_commits_stored',
    'Rows in commits (Postgres estimate once the table holds 200,000 or more)',
  ).set(commits.stored);
  collectPushesPerPoint(gauge, commits.graphql);

  const rejected = counter(
    'gpi_events_rejected_total',
    'Polled events set aside in rejected_events instead of stored, by reason (one per event)',
    ['reason'],
  );
  for (const reason of REJECTION_REASONS) rejected.inc({ reason }, 0);
  for (const { labels, n } of await tallied(
    db,
    'gpi_events_rejected_total',
    sql`SELECT jsonb_build_object('reason', reason), count(*) FROM rejected_events GROUP BY reason`,
  )) {
    rejected.inc({ reason: label(labels.reason, REJECTION_REASONS) }, n);
  }

  const deliveries = counter(
    'gpi_webhook_deliveries_total',
    'Webhook deliveries recorded, by routing (push:created, push:known, ping, ignored:<event>, rejected:<reason>)',
    ['routing'],
  );
  const routed = await sql<{ routing: string; n: string }>`
    SELECT routing, count(*) AS n FROM webhook_deliveries GROUP BY routing`.execute(db);
  for (const row of routed.rows) {
    deliveries.inc({ routing: routingLabel(row.routing, REJECTION_REASONS) }, Number(row.n));
  }
  const redeliveries = counter(
    'gpi_webhook_redeliveries_total',
    'Redeliveries of a delivery id already recorded, by whether the body matched the first (same) or not (different)',
    ['body'],
  );
  const redelivered = await sql<{ n: string | null; mismatched: string | null }>`
    SELECT sum(redeliveries) AS n, sum(redelivery_mismatches) AS mismatched
    FROM webhook_deliveries WHERE redeliveries > 0`.execute(db);
  const { n: redeliveredN, mismatched } = redelivered.rows[0] ?? { n: null, mismatched: null };
  redeliveries.inc({ body: 'same' }, Number(redeliveredN ?? 0) - Number(mismatched ?? 0));
  redeliveries.inc({ body: 'different' }, Number(mismatched ?? 0));

  if (await pgBossInstalled(db, config.pgbossSchema)) {
    const jobs = gauge('gpi_queue_jobs', 'pg-boss jobs by queue and state', ['queue', 'state']);
    const oldest = gauge(
      'gpi_queue_oldest_waiting_seconds',
      'Age of the oldest job waiting to start, by queue (0 when none waits)',
      ['queue'],
    );
    for (const q of await queueStatuses(db, config.pgbossSchema, now)) {
      for (const [state, n] of Object.entries(q.jobs)) jobs.set({ queue: q.name, state }, n);
      oldest.set({ queue: q.name }, q.oldestWaitingSeconds ?? 0);
    }
    registers.registerMetric(await jobDurationHistogram(db, config.pgbossSchema));
  }

  if (github) {
    // The budget's own count: only requests that reached GitHub and were not a 304.
    // The deployment's credentials (from the database), as /status shows them.
    const budget = await deploymentBudget(db, config, now);
    const spent = gauge(
      'gpi_github_budget_spent',
      'Requests that spent quota in the current rate-limit window, by purpose (as /status shows)',
      ['purpose'],
    );
    const allowance = gauge(
      'gpi_github_budget_allowance',
      'Requests each purpose may spend per rate-limit window (ENRICH_SHARE of the quota)',
      ['purpose'],
    );
    for (const purpose of REQUEST_PURPOSES) spent.set({ purpose }, budget.spent[purpose]);
    for (const purpose of ALLOWANCES) allowance.set({ purpose }, budget.allowance[purpose]);
    credentialGauges(gauge, budget.credentials);
    await collectGraphQL(db, counter, gauge, budget.credentials);
  } else {
    await collectGraphQL(db, counter, gauge, null);
  }
}
