import type { PgBoss } from 'pg-boss';
import type { EntityClass } from '../budget/types.ts';
import type { Logger } from '../platform/log.ts';
import type { AfterRun, RunSummary } from '../poll/run-summary.ts';
import { ENTITY_CLASSES } from '../work/entity.ts';
import { type BossHost, createBoss } from './boss.ts';
import { hintCommits } from './commits-hint.ts';
import { enrichQueue, QUEUES, type QueueName } from './queue-names.ts';

/**
 * Sending enrichment cycles. A cycle job carries no entity id — the runner picks the next
 * entity by its own policy — so one queued cycle says everything N would (ADR 0007), and
 * the stately queue keeps at most one waiting. A null id from send() therefore means
 * "a cycle is already queued", which is success, not an error.
 */

export type CycleReason = 'hint' | 'reconcile' | 'continue';

export interface CycleJobData {
  class: EntityClass;
  reason: CycleReason;
  /** The ingestion run whose new rows prompted a hint. */
  run_id?: number;
}

export interface SendResult {
  queue: QueueName;
  jobId: string | null;
  status: 'sent' | 'already_queued';
}

export async function sendCycle(
  boss: PgBoss,
  cls: EntityClass,
  data: Omit<CycleJobData, 'class'>,
): Promise<SendResult> {
  const queue = enrichQueue(cls);
  const jobId = await boss.send(queue, { class: cls, ...data } satisfies CycleJobData);
  return { queue, jobId, status: jobId ? 'sent' : 'already_queued' };
}

export interface ClassDispatch extends SendResult {
  newPending: number;
}

/**
 * The post-commit hint for one ingestion run: ONE cycle per entity class that got new
 * pending rows, never one per event. Called by the runner after the run's rows committed,
 * the run was finalized and the source lock released — a process killed before this line
 * loses the hint, never the work (the reconciler finds the rows). Returns null when the run
 * created nothing to enrich.
 */
export async function dispatchHints(
  boss: PgBoss,
  log: Logger,
  summary: RunSummary,
): Promise<Partial<Record<EntityClass, ClassDispatch>> | null> {
  const classes = ENTITY_CLASSES.filter((cls) => summary.newPending[cls] > 0);
  if (classes.length === 0) return null;
  const report: Partial<Record<EntityClass, ClassDispatch>> = {};
  for (const cls of classes) {
    const sent = await sendCycle(boss, cls, {
      reason: 'hint',
      ...(summary.runId === null ? {} : { run_id: summary.runId }),
    });
    report[cls] = { ...sent, newPending: summary.newPending[cls] };
  }
  log.info(
    {
      event: 'enrichment.dispatched',
      run_id: summary.runId,
      source_id: summary.sourceId,
      ...Object.fromEntries(
        Object.entries(report).map(([cls, d]) => [
          cls,
          { new_pending: d.newPending, status: d.status, enrich_job_id: d.jobId, queue: d.queue },
        ]),
      ),
    },
    `enrichment hints for run ${summary.runId}: ${Object.entries(report)
      .map(
        ([cls, d]) =>
          `${cls} ${d.newPending} new, ${d.status === 'sent' ? 'cycle sent' : 'cycle already queued'}`,
      )
      .join('; ')}`,
  );
  return report;
}

export interface CommitsCycleJobData {
  reason: CycleReason;
  run_id?: number;
}

/**
 * One fetch-commits cycle (stately: a null id means one is already queued, which is
 * success): the reconciler's and a capped cycle's successor. Store paths send theirs with
 * hintCommits (src/jobs/commits-hint.ts), which never throws.
 */
export async function sendCommitsCycle(
  boss: PgBoss,
  data: CommitsCycleJobData,
): Promise<SendResult> {
  const queue = QUEUES.fetchCommits;
  const jobId = await boss.send(queue, data);
  return { queue, jobId, status: jobId ? 'sent' : 'already_queued' };
}

/** dispatchHints (and the commits hint) as the ingestion runner's afterRun hook. */
export function hintDispatcher(boss: PgBoss, log: Logger): AfterRun {
  return async (summary) => {
    await dispatchHints(boss, log, summary);
    await hintCommits(boss, log, summary.commitsPending ?? 0, {
      cause: `run ${summary.runId}`,
      runId: summary.runId,
    });
  };
}

/**
 * A pg-boss instance that only sends hints, for processes that store work outside a job
 * (bin/web's webhooks, bin/ingest). If it cannot start (setup has not run yet), the
 * process goes on without hints — `<role>.hints_disabled` says so — and the reconciler
 * finds the pending rows on its next tick.
 */
export async function startHintSender(app: BossHost, role: string): Promise<PgBoss | undefined> {
  const boss = createBoss(app.databaseUrl, app.config, app.logger, {
    role,
    max: 2,
    supervise: false,
  });
  try {
    await boss.start();
    return boss;
  } catch (err) {
    app.logger.warn(
      { event: `${role}.hints_disabled`, err },
      'pg-boss did not start (has bin/setup run?): enrichment hints are off; the reconciler covers them',
    );
    await boss.stop({ graceful: false }).catch(() => {});
    return undefined;
  }
}
