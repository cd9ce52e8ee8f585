import type { PgBoss } from 'pg-boss';
import { type FillRunner, inlineFill } from '../backfill/fill-run.ts';
import type { EntityClass } from '../budget/types.ts';
import { type CommitsCycleSummary, commitsByGraphQL, fetchCycle } from '../commits/cycle.ts';
import { type CycleSummary, enrichCycle } from '../enrichment/cycle.ts';
import { systemClock } from '../platform/clock.ts';
import { jobFaultPoint } from '../platform/fault.ts';
import { jobLogger, type Logger } from '../platform/log.ts';
import { type StopSignal, stopSignal } from '../platform/service.ts';
import { pollDueSources } from '../poll/poll-due.ts';
import type { RunSummary } from '../poll/run-summary.ts';
import {
  ensurePushMonths,
  MONTHS_AHEAD,
  monthsAhead,
  monthsInDefault,
} from '../store/push-months.ts';
import { foldPushTallies, prunePushMinutes } from '../store/push-tallies.ts';
import type { Deps } from '../work/deps.ts';
import { foldEntityTallies } from '../work/enrichment-due.ts';
import {
  BACKFILL_MAX_SECONDS,
  CYCLE_MAX_ENTITIES,
  CYCLE_MAX_SECONDS,
  MAINTENANCE_MAX_SECONDS,
} from './boss.ts';
import { hintCommits } from './commits-hint.ts';
import { dispatchHints, sendCommitsCycle, sendCycle } from './dispatch.ts';
import { runRetention } from './month-retention.ts';
import { pruneLedgers } from './prune.ts';
import { enrichQueue, QUEUES, type QueueName } from './queue-names.ts';
import { reconcile } from './reconciler.ts';

/**
 * The job handlers. Each one only asks a domain runner to look at the tables: jobs carry
 * no entity ids and no business state, and never open a transaction shared with pg-boss.
 * Every line logged inside a job carries job_id and queue; `job.completed` closes each
 * job with its duration and outcome. A thrown error fails the job (retryLimit 0: no
 * retry — the ledgers and the next tick are the retry).
 */

export interface JobContext {
  deps: Deps;
  boss: PgBoss;
  /** Aborted once the worker is shutting down: cycles stop between entities. */
  signal?: AbortSignal;
  limits?: Partial<JobLimits>;
  /** How gap fills run (default inline; bin/worker: a child process). */
  fill?: FillRunner;
}

export interface JobLimits {
  cycleMaxEntities: number;
  cycleMaxSeconds: number;
  maintenanceMaxSeconds: number;
  backfillMaxSeconds: number;
}

const DEFAULT_LIMITS: JobLimits = {
  cycleMaxEntities: CYCLE_MAX_ENTITIES,
  cycleMaxSeconds: CYCLE_MAX_SECONDS,
  maintenanceMaxSeconds: MAINTENANCE_MAX_SECONDS,
  backfillMaxSeconds: BACKFILL_MAX_SECONDS,
};

/** What a handler needs of a pg-boss job (tests pass plain objects). */
export interface JobLike<T = unknown> {
  id: string;
  data?: T;
  signal?: AbortSignal;
}

export interface JobResult {
  outcome: string;
  [field: string]: unknown;
}

/** The outcomes of a job that found nothing to do (logged at debug). */
export const IDLE_OUTCOMES: ReadonlySet<string> = new Set(['nothing_due', 'nothing_to_do']);

type Handler<R extends JobResult> = (log: Logger, domain: Deps) => Promise<R>;

/**
 * What stops a job's work: the worker stopping, pg-boss giving up on the job, or the job's
 * own time (`seconds`). timedOut() tells a cycle cut by its time (its successor is sent)
 * from one cut by a stop.
 */
function jobStop(ctx: JobContext, job: JobLike, seconds: number): StopSignal {
  return stopSignal([ctx.signal, job.signal], Date.now() + seconds * 1000);
}

/**
 * Runs one job with its logger. Domain runners add job_id to their own lines (they are
 * given the job id), so they get a logger bound to the queue only — binding job_id twice
 * would print the key twice in every line.
 */
async function runJob<R extends JobResult>(
  ctx: JobContext,
  queue: QueueName,
  job: JobLike,
  fn: Handler<R>,
): Promise<R> {
  const log = jobLogger(ctx.deps.logger, queue, job.id);
  const domain: Deps = { ...ctx.deps, logger: ctx.deps.logger.child({ queue }) };
  const started = performance.now();
  const durationMs = () => Math.round(performance.now() - started);
  try {
    const result = await fn(log, domain);
    const fields: Record<string, unknown> = {
      event: 'job.completed',
      duration_ms: durationMs(),
      ...result,
    };
    // A job that found nothing to do says so at debug: the ticks of an idle deployment
    // (poll-sources, reconcile and backfill every TICK_SECONDS) would otherwise be most of
    // its log.
    const level = IDLE_OUTCOMES.has(result.outcome) ? 'debug' : 'info';
    log[level](fields, `${queue} job completed: ${result.outcome}`);
    return result;
  } catch (err) {
    log.error(
      { event: 'job.completed', duration_ms: durationMs(), outcome: 'error', err },
      `${queue} job failed: ${(err as Error)?.message ?? String(err)}`,
    );
    throw err;
  }
}

function countOutcomes(summaries: RunSummary[]) {
  const runs: Record<RunSummary['outcome'], number> = {
    completed: 0,
    not_modified: 0,
    failed: 0,
    busy: 0,
    skipped: 0,
    deferred: 0,
  };
  for (const s of summaries) runs[s.outcome] += 1;
  return runs;
}

/** poll-sources: every due source of this mode (a few at once), each under its lock. */
export function handlePollSources(ctx: JobContext, job: JobLike) {
  return runJob(ctx, QUEUES.pollSources, job, async (log, domain) => {
    const summaries = await pollDueSources(domain, {
      jobId: job.id,
      // After the run committed and its lock was released (the runner's contract).
      afterRun: async (summary) => {
        await dispatchHints(ctx.boss, log, summary);
        await hintCommits(ctx.boss, log, summary.commitsPending ?? 0, {
          cause: `run ${summary.runId}`,
          runId: summary.runId,
        });
      },
    });
    return {
      outcome: summaries.length === 0 ? 'nothing_due' : 'polled',
      sources_due: summaries.length,
      runs: countOutcomes(summaries),
      run_ids: summaries.flatMap((s) => (s.runId === null ? [] : [s.runId])),
      events_created: summaries.reduce((n, s) => n + s.eventsCreated, 0),
    };
  });
}

export interface CycleJobResult extends JobResult {
  outcome: CycleSummary['stoppedBy'];
  class: EntityClass;
  processed: number;
  outcomes: CycleSummary['outcomes'];
  continued: boolean;
}

/**
 * enrich-actor / enrich-repository: drain due entities of the class until nothing is due,
 * the budget says no, GitHub rate-limits us, or the cycle's cap. A cycle cut short by its
 * own cap (not by shutdown) queues its successor, so a backlog drains back to back instead
 * of at the reconciler's cadence.
 */
export function handleEnrichCycle(
  ctx: JobContext,
  cls: EntityClass,
  job: JobLike,
): Promise<CycleJobResult> {
  const limits = { ...DEFAULT_LIMITS, ...ctx.limits };
  return runJob(ctx, enrichQueue(cls), job, async (log, domain) => {
    const stop = jobStop(ctx, job, limits.cycleMaxSeconds);
    const summary = await enrichCycle(domain, cls, {
      jobId: job.id,
      maxEntities: limits.cycleMaxEntities,
      signal: stop.signal,
    }).finally(stop.dispose);
    const shortByCap =
      summary.stoppedBy === 'cap' ||
      (summary.stoppedBy === 'stopped' && stop.timedOut() && !ctx.signal?.aborted);
    let continued = false;
    if (shortByCap && !job.signal?.aborted) {
      const sent = await sendCycle(ctx.boss, cls, { reason: 'continue' });
      continued = sent.status === 'sent';
      log.info(
        {
          event: 'enrichment.dispatched',
          class: cls,
          reason: 'continue',
          status: sent.status,
          enrich_job_id: sent.jobId,
        },
        `${cls} cycle reached its cap with work left; ${continued ? 'next cycle sent' : 'a cycle is already queued'}`,
      );
    }
    return {
      outcome: summary.stoppedBy,
      class: cls,
      processed: summary.processed,
      outcomes: summary.outcomes,
      continued,
      ...(summary.retryAt ? { retry_at: summary.retryAt.toISOString() } : {}),
    };
  });
}

export interface CommitsJobResult extends JobResult {
  outcome: CommitsCycleSummary['stoppedBy'];
  processed: number;
  requests: number;
  outcomes: CommitsCycleSummary['outcomes'];
  continued: boolean;
}

/**
 * fetch-commits: fetch due pending pushes (fair across repositories) until nothing is due,
 * the share or budget says no, GitHub rate-limits us, or the cycle's cap; like an
 * enrichment cycle, one cut short by its cap queues its successor. New branches that wait
 * for their repository's default branch prompt one enrich-repository cycle.
 */
export function handleFetchCommits(ctx: JobContext, job: JobLike): Promise<CommitsJobResult> {
  const limits = { ...DEFAULT_LIMITS, ...ctx.limits };
  return runJob(ctx, QUEUES.fetchCommits, job, async (log, domain) => {
    const stop = jobStop(ctx, job, limits.cycleMaxSeconds);
    const summary = await fetchCycle(domain, {
      jobId: job.id,
      // REST fetches a push a step: the cap bounds the job. A GraphQL batch takes what is
      // due, sized by the points left and the lease: a cap would cut it to 50
      // pushes and make every round's last query the cost; the job's time bounds it.
      maxPushes: commitsByGraphQL(domain) ? undefined : limits.cycleMaxEntities,
      signal: stop.signal,
    }).finally(stop.dispose);
    if (summary.newActors > 0) {
      const sent = await sendCycle(ctx.boss, 'actor', { reason: 'hint' });
      log.info(
        {
          event: 'enrichment.dispatched',
          class: 'actor',
          reason: 'commit_authors',
          new_pending: summary.newActors,
          status: sent.status,
          enrich_job_id: sent.jobId,
        },
        `${summary.newActors} commit authors to enrich`,
      );
    }
    if (summary.outcomes.waiting > 0) {
      const sent = await sendCycle(ctx.boss, 'repository', { reason: 'hint' });
      log.info(
        {
          event: 'enrichment.dispatched',
          class: 'repository',
          reason: 'commits_wait',
          status: sent.status,
          enrich_job_id: sent.jobId,
        },
        `${summary.outcomes.waiting} new branches wait for their repository's default branch`,
      );
    }
    const shortByCap =
      summary.stoppedBy === 'cap' ||
      (summary.stoppedBy === 'stopped' && stop.timedOut() && !ctx.signal?.aborted);
    let continued = false;
    if (shortByCap && !job.signal?.aborted) {
      const sent = await sendCommitsCycle(ctx.boss, { reason: 'continue' });
      continued = sent.status === 'sent';
      log.info(
        {
          event: 'commits.dispatched',
          reason: 'continue',
          status: sent.status,
          commits_job_id: sent.jobId,
        },
        `commits cycle reached its cap with work left; ${continued ? 'next cycle sent' : 'a cycle is already queued'}`,
      );
    }
    return {
      outcome: summary.stoppedBy,
      processed: summary.processed,
      requests: summary.requests,
      // GraphQL batches: points on the #graphql window, and the queries sent.
      points: summary.points ?? 0,
      queries: summary.queries ?? 0,
      new_actors: summary.newActors,
      outcomes: summary.outcomes,
      continued,
      ...(summary.retryAt ? { retry_at: summary.retryAt.toISOString() } : {}),
    };
  });
}

/** reconcile: see src/jobs/reconciler.ts. */
export function handleReconcile(ctx: JobContext, job: JobLike) {
  return runJob(ctx, QUEUES.reconcile, job, async (log) => {
    const report = await reconcile({ ...ctx.deps, logger: log, boss: ctx.boss });
    const dispatched = [
      ...report.classes.filter((c) => c.action === 'dispatched').map((c) => c.class),
      ...(report.commits.action === 'dispatched' ? ['commits'] : []),
    ];
    return {
      outcome:
        dispatched.length > 0 || report.interruptedRuns.length > 0 || report.orphanedJobs.length > 0
          ? 'repaired'
          : 'nothing_to_do',
      dispatched,
      orphaned_jobs: report.orphanedJobs.map((j) => `${j.queue}:${j.id}`),
      interrupted_runs: report.interruptedRuns.map((r) => r.runId),
      settled_reservations: report.settledReservations,
    };
  });
}

/**
 * maintenance: makes push_events' partitions of this month and the next MONTHS_AHEAD (no
 * writer then makes one) and of the months whose pushes the default partition holds (moving
 * them in), prunes the ledgers past RETENTION_DAYS, then, with HISTORY_MONTHS, runs retention
 * of push history (jobs/month-retention.ts), and folds the push and entity tallies' deltas
 * (store/push-tallies.ts, work/enrichment-due.ts) and prunes the minute tallies older than
 * two days; time-boxed, the next hour carries on.
 */
export function handleMaintenance(ctx: JobContext, job: JobLike) {
  const limits = { ...DEFAULT_LIMITS, ...ctx.limits };
  return runJob(ctx, QUEUES.maintenance, job, async () => {
    const now = (ctx.deps.clock ?? systemClock).now();
    const monthsMade = await ensurePushMonths(ctx.deps.db, [
      ...monthsAhead(now, MONTHS_AHEAD),
      ...(await monthsInDefault(ctx.deps.db)),
    ]);
    // Before retention, whose failure (an export, an unwritable ARCHIVE_DIR) must not leave
    // the deltas growing: a month dropped after takes its tallies along.
    const talliesFolded =
      (await foldPushTallies(ctx.deps.db)) + (await foldEntityTallies(ctx.deps.db));
    const minutesPruned = await prunePushMinutes(ctx.deps.db, now);
    const stop = jobStop(ctx, job, limits.maintenanceMaxSeconds);
    try {
      const report = await pruneLedgers(ctx.deps.db, {
        retentionDays: ctx.deps.config.retentionDays,
        shouldStop: () => stop.signal.aborted,
      });
      // HISTORY_MONTHS: the months past the kept window, exported, verified, then dropped.
      const history = await runRetention(ctx.deps, { now, signal: stop.signal });
      const months = (a: string) => history.months.filter((m) => m.action === a).length;
      return {
        outcome: report.complete ? 'pruned' : 'partial',
        cutoff: report.cutoff.toISOString(),
        deleted: report.deleted,
        months_made: monthsMade,
        tally_deltas_folded: talliesFolded,
        minute_tallies_pruned: minutesPruned,
        ...(history.historyMonths === null
          ? {}
          : { months_dropped: months('dropped'), months_kept: months('kept') }),
      };
    } finally {
      stop.dispose();
    }
  });
}

/**
 * backfill: fills the open gaps that are due from GH Archive, one after the other (the
 * queue is stately: one fill at a time in the deployment). A stopping worker aborts the
 * download in flight after its current chunk; the checkpoints keep everything committed.
 * Under bin/worker the fills run in a child process: one that dies is this job's `died`
 * outcome, never the worker's end.
 */
export function handleBackfill(ctx: JobContext, job: JobLike) {
  const limits = { ...DEFAULT_LIMITS, ...ctx.limits };
  return runJob(ctx, QUEUES.backfill, job, async (log, domain) => {
    const deadline = Date.now() + limits.backfillMaxSeconds * 1000;
    // The fill keeps its own deadline (it ends a gap's hour cleanly); a stop aborts its download.
    const stop = stopSignal([ctx.signal, job.signal]);
    try {
      const run = await (ctx.fill ?? inlineFill)(domain, {
        jobId: job.id,
        deadline,
        signal: stop.signal,
      });
      if (run.died) {
        log.error(
          { event: 'backfill.fill_died', exit_code: run.died.code, signal: run.died.signal },
          `the gap fill's process died (${run.died.signal ?? `exit code ${run.died.code}`}); its gap keeps the attempt and its backoff, and polling goes on`,
        );
      }
      return { ...backfillOutcome(run.results, run.died !== null), ...diedFields(run.died) };
    } finally {
      stop.dispose();
    }
  });
}

function diedFields(died: { code: number | null; signal: string | null } | null) {
  return died ? { exit_code: died.code, signal: died.signal } : {};
}

/** The job's outcome as its gaps ended: `filled` only when every gap it tried was. */
export function backfillOutcome(
  results: { outcome: string; eventsRecovered: number }[],
  died: boolean,
) {
  const by = (o: string) => results.filter((r) => r.outcome === o).length;
  const counts = {
    gaps: results.length,
    filled: by('filled'),
    retry: by('retry'),
    unavailable: by('unavailable'),
    interrupted: by('interrupted'),
    // Filled gaps read again for a mirror that lacked an hour (docs/mirrors.md).
    mirror_retried: by('mirror_retried'),
    events_recovered: results.reduce((n, r) => n + r.eventsRecovered, 0),
  };
  const gaps = results.length - counts.mirror_retried;
  const outcome = died
    ? 'died'
    : results.length === 0
      ? 'nothing_due'
      : counts.interrupted > 0
        ? 'interrupted'
        : gaps === 0
          ? 'mirror_retried'
          : counts.filled === gaps
            ? 'filled'
            : counts.filled > 0
              ? 'partial'
              : 'not_filled';
  return { outcome, ...counts };
}

/** Marks jobs as running in this process for as long as their handler runs (liveness.ts). */
export interface JobMarker {
  hold(jobId: string): Promise<void>;
  release(jobId: string): Promise<void>;
}

/**
 * Registers the handlers on a started boss: one job at a time per queue and process.
 * Each job is marked as running here (its liveness lock) before its handler starts and
 * until it ends, so the orphan sweep can tell a live job from a dead worker's.
 */
export async function registerHandlers(
  boss: PgBoss,
  ctx: JobContext,
  {
    pollingIntervalSeconds = 2,
    liveness,
  }: { pollingIntervalSeconds?: number; liveness?: JobMarker } = {},
): Promise<void> {
  const options = { batchSize: 1, pollingIntervalSeconds };
  const each =
    (queue: string, fn: (job: JobLike) => Promise<unknown>) => async (jobs: JobLike[]) => {
      for (const job of jobs) {
        await liveness?.hold(job.id);
        try {
          jobFaultPoint(queue);
          await fn(job);
        } finally {
          await liveness?.release(job.id);
        }
      }
    };
  const handlers: [string, (job: JobLike) => Promise<unknown>][] = [
    [QUEUES.pollSources, (job) => handlePollSources(ctx, job)],
    [QUEUES.enrichActor, (job) => handleEnrichCycle(ctx, 'actor', job)],
    [QUEUES.enrichRepository, (job) => handleEnrichCycle(ctx, 'repository', job)],
    [QUEUES.reconcile, (job) => handleReconcile(ctx, job)],
    [QUEUES.maintenance, (job) => handleMaintenance(ctx, job)],
    [QUEUES.backfill, (job) => handleBackfill(ctx, job)],
    [QUEUES.fetchCommits, (job) => handleFetchCommits(ctx, job)],
  ];
  for (const [queue, handle] of handlers) await boss.work(queue, options, each(queue, handle));
}
