import type { PgBoss } from 'pg-boss';
import { type DeadImport, interruptDeadImports } from '../backfill/checkpoints.ts';
import { graphqlWindowRefuses } from '../budget/graphql-window.ts';
import { settleAbandonedReservations } from '../budget/ledger.ts';
import { snapshotRefuses } from '../budget/snapshot.ts';
import type { EntityClass, PoolBudget } from '../budget/types.ts';
import { releaseAwaitingPushes } from '../commits/awaiting.ts';
import { systemClock } from '../platform/clock.ts';
import { logDeadRuns } from '../poll/poll-deaths.ts';
import { commitsOffReason } from '../store/commits-targets.ts';
import { hasDueCommits } from '../work/commits-due.ts';
import type { Deps } from '../work/deps.ts';
import { hasDueWork } from '../work/enrichment-due.ts';
import { ENTITY_CLASSES } from '../work/entity.ts';
import { attemptWorstCaseSeconds } from './boss.ts';
import { type InterruptedRun, interruptOrphanedRuns } from './dead-runs.ts';
import { sendCommitsCycle, sendCycle } from './dispatch.ts';
import { liveJobCounts } from './live-jobs.ts';
import { failOrphanedJobs, type OrphanedJob, type OrphanSweep } from './orphaned-jobs.ts';
import { enrichQueue, QUEUES, type QueueName } from './queue-names.ts';

/**
 * The entity-scoped reconciler (ADR 0007). Hints are sent after COMMIT and can
 * be lost; this asks the same question of committed state instead: for each class, is there
 * due work and no live job to do it? Then send one cycle. It never touches an entity row —
 * enriched, failed and gone rows are not even read — and sending when nothing is due is a
 * harmless no-op (the cycle reports idle). It also closes the other gaps a dead process
 * leaves: jobs left `active` (failed at once, so no queue waits on a corpse), runs left
 * `running`, and budget reservations that were never sent.
 */

export type ReconcileAction =
  | 'dispatched'
  | 'already_queued'
  | 'live_job'
  | 'nothing_due'
  | 'budget_wait';

export interface ClassReconcile {
  class: EntityClass;
  due: boolean;
  liveJobs: number;
  action: ReconcileAction;
  jobId: string | null;
}

/** The same question for commit fetching: due pending pushes and no live cycle. */
export interface CommitsReconcile {
  due: boolean;
  liveJobs: number;
  action: ReconcileAction;
  jobId: string | null;
}

export interface ReconcileReport {
  classes: ClassReconcile[];
  commits: CommitsReconcile;
  orphanedJobs: OrphanedJob[];
  /** An unlocked active job too young to judge: sweep again then (see orphaned-jobs.ts). */
  recheckAt: Date | null;
  interruptedRuns: InterruptedRun[];
  /** File imports left running by a process that died (backfill_files). */
  interruptedImports: DeadImport[];
  settledReservations: number;
}

export type ReconcileDeps = Pick<Deps, 'db' | 'config' | 'logger' | 'clock'> & {
  boss: PgBoss;
  /**
   * When given, no cycle is sent while the budget would refuse it anyway: enrichment's REST
   * allowance, and for commits the window its transport spends (commitsBudgetRefuses).
   */
  github?: Pick<Deps['github'], 'budget' | 'graphqlEnabled'>;
};

/**
 * A reservation is open for at most one attempt (gate wait + connect + response); one left
 * open far longer belongs to a process that died between reserving and sending.
 */
export function abandonedAfterSeconds(deps: Pick<Deps, 'config'>): number {
  return Math.max(300, 4 * attemptWorstCaseSeconds(deps.config));
}

/**
 * Fails the jobs dead workers left active (orphaned-jobs.ts) and puts back at once the
 * tick work they were doing: a poll or a maintenance pass cut short by a crash runs again
 * now, not at the next tick (enrichment cycles are re-sent by reconcile's class pass).
 * Runs on every scheduler tick too, outside any job, so that an orphaned `reconcile` job
 * cannot stop the very pass that would free it.
 */
export async function sweepOrphanedJobs(
  deps: Pick<ReconcileDeps, 'db' | 'config' | 'logger' | 'boss'>,
): Promise<OrphanSweep> {
  const sweep = await failOrphanedJobs({
    db: deps.db,
    boss: deps.boss,
    pgbossSchema: deps.config.pgbossSchema,
    logger: deps.logger,
  });
  const resend = new Set<QueueName>(
    sweep.failed.map((j) => j.queue).filter((q) => RESENT_AFTER_ORPHAN.includes(q)),
  );
  for (const queue of resend) {
    const jobId = await deps.boss.send(queue, { reason: 'orphan' });
    deps.logger.info(
      {
        event: 'reconcile.dispatched',
        queue,
        reason: 'orphan',
        status: jobId ? 'sent' : 'already_queued',
        sent_job_id: jobId,
      },
      `${queue}: the orphaned job's work ${jobId ? 'sent again' : 'is already queued'}`,
    );
  }
  return sweep;
}

const RESENT_AFTER_ORPHAN: readonly QueueName[] = [QUEUES.pollSources, QUEUES.maintenance];

/** One pass. Inside a job, pass a job logger in deps: every line then carries job_id. */
export async function reconcile(deps: ReconcileDeps): Promise<ReconcileReport> {
  const { db, config, logger: log } = deps;
  const now = (deps.clock ?? systemClock).now();

  // First, so that a queue an orphan held is free before this pass counts its live jobs.
  const orphans = await sweepOrphanedJobs(deps);

  const interruptedRuns = await interruptOrphanedRuns(db, now);
  const interruptedImports = await interruptDeadImports(db);
  for (const imp of interruptedImports) {
    log.warn(
      {
        event: 'reconcile.import_interrupted',
        checkpoint_id: imp.id,
        file: imp.file,
        scope: imp.scope,
        lines_done: imp.linesDone,
        deaths: imp.deaths,
      },
      `import of ${imp.file} (${imp.scope}) was left running by a process that died at line ${imp.linesDone}; marked failed (the next import resumes there)`,
    );
  }
  logDeadRuns(log, interruptedRuns, 'reconcile', now);

  const settledReservations = await settleAbandonedReservations(db, abandonedAfterSeconds(deps));

  const queues = [...ENTITY_CLASSES.map(enrichQueue), QUEUES.fetchCommits];
  const live = await liveJobCounts(db, config.pgbossSchema, queues);
  const classes: ClassReconcile[] = [];
  // Asked once, and only if some class would get a cycle: a cycle the budget refuses
  // (spent, or the credential blocked) would stop at once, and sending one every tick
  // until the budget frees is a spin.
  let budgetShut: Promise<boolean> | undefined;
  const budgetRefuses = () => {
    budgetShut ??= deps.github
      ? deps.github.budget().then((b) => snapshotRefuses(b, 'enrich'))
      : Promise.resolve(false);
    return budgetShut;
  };
  for (const cls of ENTITY_CLASSES) {
    const queue = enrichQueue(cls);
    const liveJobs = live[queue] ?? 0;
    const due = await hasDueWork(db, cls, now, config.enrichment.ttlSeconds);
    if (!due || liveJobs > 0) {
      classes.push({
        class: cls,
        due,
        liveJobs,
        action: due ? 'live_job' : 'nothing_due',
        jobId: null,
      });
      continue;
    }
    if (await budgetRefuses()) {
      classes.push({ class: cls, due, liveJobs, action: 'budget_wait', jobId: null });
      log.debug(
        { event: 'reconcile.budget_wait', class: cls },
        `${cls}: due work, but the enrichment budget would refuse a cycle; none sent`,
      );
      continue;
    }
    const sent = await sendCycle(deps.boss, cls, { reason: 'reconcile' });
    const action = sent.status === 'sent' ? 'dispatched' : 'already_queued';
    classes.push({ class: cls, due, liveJobs, action, jobId: sent.jobId });
    log.info(
      {
        event: 'reconcile.dispatched',
        class: cls,
        queue,
        status: sent.status,
        enrich_job_id: sent.jobId,
      },
      sent.status === 'sent'
        ? `${cls}: due work and no live job; cycle sent`
        : `${cls}: due work; a cycle was queued meanwhile`,
    );
  }
  const commits = await reconcileCommits(deps, now, live[QUEUES.fetchCommits] ?? 0);
  return {
    classes,
    commits,
    orphanedJobs: orphans.failed,
    recheckAt: orphans.recheckAt,
    interruptedRuns,
    interruptedImports,
    settledReservations,
  };
}

/**
 * Would a commits cycle be refused before it settled anything? By REST (COMMITS_TRANSPORT=rest,
 * or no credential takes GraphQL): when every credential's background allowance refuses.
 * By GraphQL: when every credential's `#graphql` window refuses, whatever REST says.
 * - GraphQL refused, REST left: still refused. A batch proves on GraphQL first; a refused
 *   query stops it, its pushes' attempts are given back and even its REST fallbacks are
 *   released unsent (graphql-fetch.ts), so a cycle would only claim and release.
 * - REST refused, GraphQL left: sent. Every push GraphQL proves is settled without a REST
 *   request; the few it cannot prove meet the REST refusal and are released (budget, no
 *   attempt counted) for a later cycle. Waiting on REST here would stall the pushes GraphQL
 *   could settle behind a window they do not spend. The cost, when every due push is one
 *   only REST can fetch (no known name or default branch yet): one cycle a tick that claims
 *   and releases them, no request and no point spent, until REST's window reopens.
 */
export function commitsBudgetRefuses(
  github: Pick<Deps['github'], 'graphqlEnabled'>,
  config: Pick<Deps['config'], 'commits'>,
  b: PoolBudget,
): boolean {
  if (config.commits.transport === 'graphql' && github.graphqlEnabled) {
    return b.credentials.every((c) => graphqlWindowRefuses(c.graphql));
  }
  return snapshotRefuses(b, 'commits');
}

/**
 * Pending pushes due and no live fetch-commits job: send one cycle (a lost hint loses
 * nothing). Not while the budget its transport spends would refuse it anyway. With nothing
 * due, a process that can fetch first makes a batch of the pushes waiting for a credential
 * pending, newest first: so they are fetched only when no new push is waiting.
 */
async function reconcileCommits(
  deps: ReconcileDeps,
  now: Date,
  liveJobs: number,
): Promise<CommitsReconcile> {
  let due = await hasDueCommits(deps.db, now);
  if (liveJobs > 0) return { due, liveJobs, action: due ? 'live_job' : 'nothing_due', jobId: null };
  if (!due) {
    if (commitsOffReason(deps.config.github) !== null) {
      return { due, liveJobs, action: 'nothing_due', jobId: null };
    }
    // One probe of push_events_commits_awaiting when none waits.
    const r = await releaseAwaitingPushes(deps.db, now);
    if (r.released + r.dropped > 0) {
      deps.logger.info(
        { event: 'commits.released', released: r.released, dropped: r.dropped },
        `commits: ${r.released} push(es) that waited for a credential made due, newest first${r.dropped ? `; ${r.dropped} no source covers any more left skipped` : ''}`,
      );
    }
    if (r.released === 0) return { due, liveJobs, action: 'nothing_due', jobId: null };
    due = true;
  }
  if (deps.github && commitsBudgetRefuses(deps.github, deps.config, await deps.github.budget())) {
    deps.logger.debug(
      { event: 'reconcile.budget_wait', queue: QUEUES.fetchCommits },
      'commits: due pushes, but the budget commits spend would refuse a cycle; none sent',
    );
    return { due, liveJobs, action: 'budget_wait', jobId: null };
  }
  const sent = await sendCommitsCycle(deps.boss, { reason: 'reconcile' });
  deps.logger.info(
    {
      event: 'reconcile.dispatched',
      queue: QUEUES.fetchCommits,
      status: sent.status,
      commits_job_id: sent.jobId,
    },
    sent.status === 'sent'
      ? 'commits: due pushes and no live job; cycle sent'
      : 'commits: due pushes; a cycle was queued meanwhile',
  );
  return {
    due,
    liveJobs,
    action: sent.status === 'sent' ? 'dispatched' : 'already_queued',
    jobId: sent.jobId,
  };
}
