import { systemClock } from '../clock.ts';
import { LockSpace, tryLockSession, unlockSession } from '../db/locks.ts';
import { faultPoint } from '../fault.ts';
import type { Logger } from '../log.ts';
import { deferralOf, deferSources, logDeferral } from './deferral.ts';
import { fetchPages, pagePath } from './fetch-pages.ts';
import { finalizeFailure, finalizeSuccess } from './finalize.ts';
import { newRunState } from './run-state.ts';
import {
  deferredSummary,
  emptySummary,
  type IngestionDeps,
  type PollOptions,
  type RunSummary,
} from './run-summary.ts';
import { notDueReason } from './schedule.ts';
import { describeSource, getSource } from './sources.ts';

/**
 * One poll of one source (DESIGN §3): under the source's advisory lock, re-read the row,
 * open a run, fetch page 1 conditionally and further pages only until they reach the
 * source's horizon, store each page in one transaction, finalize the run and the source,
 * release the lock — and only then tell the caller (post-commit hints).
 */

/**
 * Polls one source if it is due (or forced) and nobody else is polling it. A source whose
 * lock is held is `busy`: logged at INFO, nothing written, nothing requested.
 */
export async function pollSource(
  deps: IngestionDeps,
  sourceId: number,
  opts: PollOptions = {},
): Promise<RunSummary> {
  const log = opts.jobId ? deps.logger.child({ job_id: opts.jobId }) : deps.logger;
  // The lock is a session lock: it needs its own connection for the whole run, and dies
  // with that session if this process does.
  const client = await deps.pool.connect();
  let broken: Error | undefined;
  let summary: RunSummary;
  try {
    if (!(await tryLockSession(client, LockSpace.source, sourceId))) {
      // Read only here: a polled source is read under its lock (runLocked), once.
      const described = await getSource(deps.db, sourceId);
      log.info(
        { event: 'source.busy', source_id: sourceId, source: describeSource(described) },
        `source ${sourceId} (${describeSource(described)}) is being polled elsewhere; skipped`,
      );
      summary = emptySummary(described, 'busy');
    } else {
      try {
        summary = await runLocked(deps, sourceId, opts, log);
      } finally {
        await unlockSession(client, LockSpace.source, sourceId).catch((err: Error) => {
          broken = err; // destroy the connection: its session (and the lock) ends with it
        });
      }
    }
  } catch (err) {
    broken ??= err as Error; // never hand a session in an unknown state back to the pool
    throw err;
  } finally {
    client.release(broken);
  }
  faultPoint('ingest.after_lock_release');
  if (opts.afterRun) {
    try {
      await opts.afterRun(summary);
    } catch (err) {
      // The run is committed; a lost hint is recovered by the reconciler, not retried here.
      log.warn(
        { event: 'ingestion.after_run_failed', err, run_id: summary.runId, source_id: sourceId },
        'afterRun hook failed',
      );
    }
  }
  return summary;
}

async function runLocked(
  deps: IngestionDeps,
  sourceId: number,
  opts: PollOptions,
  log: Logger,
): Promise<RunSummary> {
  const clock = deps.clock ?? systemClock;
  // Re-read under the lock: this row, not the pre-filter, decides whether to poll.
  const source = await getSource(deps.db, sourceId);
  const reason = notDueReason(source, deps.config.github.mode, clock.now(), opts.force ?? false);
  if (reason) {
    log.debug(
      { event: 'ingestion.skipped', source_id: sourceId, reason },
      `source ${sourceId} skipped: ${reason}`,
    );
    return { ...emptySummary(source, 'skipped'), reason };
  }

  // Page 1's request is reserved before the run is opened: a budget that says no costs
  // no run row, no failure and no warning — the source waits until the budget frees.
  const decision = await deps.github.tryReserve('poll', {
    path: pagePath(source, 1),
    jobId: opts.jobId ?? null,
  });
  if (!decision.ok) {
    const d = deferralOf(decision);
    const [row] = await deferSources(deps.db, [sourceId], d, clock.now());
    const summary = deferredSummary(row ?? source, d);
    if (opts.logDeferral !== false) logDeferral(log, d, [summary]);
    return summary;
  }
  const firstPage = decision.reservation;

  const startedAt = clock.now();
  let run: { id: string };
  try {
    run = await deps.db
      .insertInto('ingestion_runs')
      .values({
        source_id: sourceId,
        status: 'running',
        started_at: startedAt,
        job_id: opts.jobId ?? null,
        worker: deps.workerId,
      })
      .returning('id')
      .executeTakeFirstOrThrow();
  } catch (err) {
    await deps.github.release(firstPage).catch(() => {});
    throw err;
  }
  const state = newRunState(Number(run.id), startedAt);
  const ids = { run_id: state.runId, source_id: sourceId, job_id: opts.jobId ?? undefined };
  log.info(
    { event: 'ingestion.run_started', ...ids, source: describeSource(source) },
    `run ${state.runId} started for source ${sourceId} (${describeSource(source)})`,
  );

  try {
    await fetchPages(deps, source, state, opts, firstPage, log);
    return await finalizeSuccess(deps, source, state, log, ids, opts.floorSeconds);
  } catch (err) {
    return finalizeFailure(deps, source, state, err, log, ids);
  }
}
