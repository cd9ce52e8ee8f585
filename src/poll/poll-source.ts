import { sql } from 'kysely';
import { systemClock } from '../platform/clock.ts';
import { LockSpace, unlockSession } from '../platform/db/locks.ts';
import { GENERIC_PLANS } from '../platform/db/prepared.ts';
import { kyselyOn } from '../platform/db/session.ts';
import { faultPoint } from '../platform/fault.ts';
import type { Logger } from '../platform/log.ts';
import { describeSource, getSource } from '../store/sources.ts';
import { deferralOf, deferSources, logDeferral } from './deferral.ts';
import { fetchPages, pagePath } from './fetch-pages.ts';
import { finalizeFailure, finalizeSuccess } from './finalize.ts';
import {
  type DeadRun,
  interruptPredecessors,
  logDeadRuns,
  nextPollIfItDies,
  scheduleIfItDies,
} from './poll-deaths.ts';
import { newRunState } from './run-state.ts';
import {
  deferredSummary,
  emptySummary,
  type IngestionDeps,
  type PollOptions,
  type RunSummary,
} from './run-summary.ts';
import { notDueReason } from './schedule.ts';
import type { Opened, SourceSession } from './source-session.ts';

/**
 * One poll of one source, one poller at a time: under the source's advisory lock, re-read
 * the row, open a run, fetch page 1 conditionally and further pages only until they reach
 * the source's horizon, store each page in one transaction, finalize the run and the
 * source, release the lock — and only then tell the caller (post-commit hints).
 *
 * On the lock's own session, two transactions bracket the requests (ADR 0080): one takes
 * the lock, re-reads the source, reserves page 1 and opens the run; one finalizes the run
 * and the source and hands the lock over to its own commit. A 304 costs those two and the
 * request gate's two.
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
  const db = kyselyOn(client);
  const lock: SourceSession = {
    db,
    sourceId,
    lockTaken: false,
    handedOver: false,
    requests: deps.github.pollSession(db, { logger: deps.logger, ticket: opts.ticket }),
  };
  let broken: Error | undefined;
  let summary: RunSummary;
  try {
    const opened = await openRun(deps, lock, opts, log);
    // From here the first answer settled frees this poll's place at the gates for the pass's
    // next poll.
    if ('firstHeld' in opened && opened.firstHeld) lock.requests.watchGates();
    summary = 'summary' in opened ? opened.summary : await runOpened(deps, lock, opened, opts, log);
  } catch (err) {
    broken ??= err as Error; // never hand a session in an unknown state back to the pool
    throw err;
  } finally {
    // Handed over: the finalize's commit released it. Else (skipped, deferred, failed to
    // finalize) it is released here.
    if (lock.lockTaken && !lock.handedOver && !broken) {
      await unlockSession(client, LockSpace.source, sourceId).catch((err: Error) => {
        broken = err; // destroy the connection: its session (and the lock) ends with it
      });
    }
    // A gate still held (a finalize that could not run): released, or with the session.
    if (!broken) {
      await lock.requests.release().catch((err: Error) => {
        broken = err;
      });
    }
    client.release(broken);
    opts.ticket?.();
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

/**
 * ONE transaction on the lock's session: take the source lock (a session lock: it outlives
 * this transaction whatever its fate), re-read the row under it — this row, not the
 * pre-filter, decides whether to poll — reserve page 1's request and open the run. A budget
 * that says no costs no run row, no failure and no warning: the source is put off in the same
 * transaction. Anything failing after the reservation rolls it back with the rest.
 */
async function openRun(
  deps: IngestionDeps,
  lock: SourceSession,
  opts: PollOptions,
  log: Logger,
): Promise<Opened | { summary: RunSummary }> {
  const clock = deps.clock ?? systemClock;
  const { sourceId } = lock;
  let died: DeadRun[] = [];
  const out = await lock.db.transaction().execute(async (trx) => {
    // The budget's statements in this transaction planned once a session (src/platform/db/prepared.ts).
    const got = await sql<{ ok: boolean }>`
      SELECT pg_try_advisory_lock(${LockSpace.source}, ${sourceId}) AS ok,
        ${GENERIC_PLANS} AS generic_plans`.execute(trx);
    if (!got.rows[0]!.ok) {
      const described = await getSource(trx, sourceId);
      return { kind: 'busy', source: described } as const;
    }
    lock.lockTaken = true;
    // A run of this source still `running` is its dead predecessor's (we hold the lock it
    // would hold): interrupted, and counted as a failure and a death.
    const found = await interruptPredecessors(trx, sourceId, clock.now());
    died = found.died;
    const { source } = found;
    const reason = notDueReason(source, deps.config.github.mode, clock.now(), opts.force ?? false);
    if (reason) return { kind: 'skipped', source, reason } as const;
    // The run first: its id goes on the reservation's ledger row. Put off, it is taken back.
    const startedAt = clock.now();
    const run = await trx
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
    const runId = Number(run.id);
    // Page 1 reserved, its gate taken on this session when free and its sent mark (with its
    // pacing slot) written, all in this commit: a 304 then costs only the
    // finalize's commit more.
    const decision = await lock.requests.reserveAndHold(trx, {
      path: pagePath(source, 1),
      jobId: opts.jobId ?? null,
      runId,
    });
    if (!decision.ok) {
      await trx.deleteFrom('ingestion_runs').where('id', '=', String(runId)).execute();
      const d = deferralOf(decision);
      const [row] = await deferSources(trx, [sourceId], d, clock.now());
      return { kind: 'deferred', summary: deferredSummary(row ?? source, d), d } as const;
    }
    const firstHeld = decision.held;
    // Committed with the run: should the process die from here, its source is due again one
    // poll interval on — the feed's own pace, neither at once nor a failure's
    // backoff. A poison answer is stopped by the death count, not by this delay. Every end of
    // the run writes its own schedule over it.
    const ifItDies = nextPollIfItDies(startedAt, source.poll_interval_seconds);
    await scheduleIfItDies(trx, sourceId, ifItDies, startedAt);
    return {
      kind: 'open',
      opened: { source, firstPage: decision.reservation, firstHeld, runId, startedAt },
    } as const;
  });
  logDeadRuns(log, died, 'poll', clock.now());
  if (out.kind === 'busy') {
    log.info(
      { event: 'source.busy', source_id: sourceId, source: describeSource(out.source) },
      `source ${sourceId} (${describeSource(out.source)}) is being polled elsewhere; skipped`,
    );
    return { summary: emptySummary(out.source, 'busy') };
  }
  if (out.kind === 'skipped') {
    log.debug(
      { event: 'ingestion.skipped', source_id: sourceId, reason: out.reason },
      `source ${sourceId} skipped: ${out.reason}`,
    );
    return { summary: { ...emptySummary(out.source, 'skipped'), reason: out.reason } };
  }
  if (out.kind === 'deferred') {
    if (opts.logDeferral !== false) logDeferral(log, out.d, [out.summary]);
    return { summary: out.summary };
  }
  return out.opened;
}

async function runOpened(
  deps: IngestionDeps,
  lock: SourceSession,
  opened: Opened,
  opts: PollOptions,
  log: Logger,
): Promise<RunSummary> {
  const { source, sourceId } = { source: opened.source, sourceId: lock.sourceId };
  const state = newRunState(opened.runId, opened.startedAt);
  const ids = { run_id: state.runId, source_id: sourceId, job_id: opts.jobId ?? undefined };
  log.info(
    { event: 'ingestion.run_started', ...ids, source: describeSource(source) },
    `run ${state.runId} started for source ${sourceId} (${describeSource(source)})`,
  );
  try {
    await fetchPages(deps, lock, source, state, opts, opened, log);
    return await finalizeSuccess(deps, lock, source, state, log, ids, opts.fleet);
  } catch (err) {
    return finalizeFailure(deps, lock, source, state, err, log, ids);
  }
}
