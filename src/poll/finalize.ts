import { sql } from 'kysely';
import { ASYNC_COMMIT } from '../budget/ledger.ts';
import { systemClock } from '../platform/clock.ts';
import { LockSpace } from '../platform/db/locks.ts';
import type { Db } from '../platform/db/pool.ts';
import { GENERIC_PLANS, prepared } from '../platform/db/prepared.ts';
import type { EventSource } from '../platform/db/schema.ts';
import { faultPoint } from '../platform/fault.ts';
import type { Logger } from '../platform/log.ts';
import { logGapsRecorded, recordGap } from '../store/gaps.ts';
import { classifyFailure } from './failures.ts';
import { mergeRecentIds, ringOf } from './horizon.ts';
import { type RunState, runCounters, summaryOf } from './run-state.ts';
import type { IngestionDeps, RunSummary } from './run-summary.ts';
import { type FleetCache, planSourcePoll } from './schedule.ts';
import type { SourceSession } from './source-session.ts';

/**
 * The end of a run: the run row and the source's schedule, in one transaction on the
 * session that holds the source lock, which hands the lock over to that transaction's commit
 * — the next poller can take it only once the schedule it must read is committed.
 */

/**
 * The transaction's first statement: take the source lock again at transaction level (the
 * session holds it, so at once), then release the session's. The lock is now the
 * transaction's: Postgres releases it at COMMIT (or ROLLBACK), not before.
 */
async function handOver(trx: Db, lock: SourceSession, asyncCommit = false): Promise<void> {
  // A finalize that failed after handing over (its rollback released the lock) is followed
  // by finalizeFailure: it writes without the lock rather than wait for a poller that took it.
  if (lock.handedOver) return;
  lock.handedOver = true;
  const commit = asyncCommit ? sql`, ${ASYNC_COMMIT}` : sql``;
  // The finalize's prepared statements planned once a session (src/platform/db/prepared.ts).
  await sql`SELECT pg_advisory_unlock(${LockSpace.source}, ${lock.sourceId})${commit},
      ${GENERIC_PLANS} AS generic_plans
    FROM (SELECT pg_advisory_xact_lock(${LockSpace.source}, ${lock.sourceId})) AS x`.execute(trx);
}

export async function finalizeSuccess(
  deps: IngestionDeps,
  lock: SourceSession,
  source: EventSource,
  state: RunState,
  log: Logger,
  ids: Record<string, unknown>,
  fleet?: FleetCache,
): Promise<RunSummary> {
  const now = (deps.clock ?? systemClock).now();
  const interval = state.pollInterval ?? source.poll_interval_seconds;
  // The next poll by this source's expected counted cost: an idle feed at its
  // X-Poll-Interval, a busy one within its share of the poll allowance.
  const status = state.notModified ? 'not_modified' : 'completed';
  // The ring, each id with its event's time (its era).
  const ring = state.notModified
    ? { ids: source.recent_event_ids, at: source.recent_event_at }
    : mergeRecentIds({ ids: state.eventIds, at: state.eventTimes }, ringOf(source));
  const { gap, plan } = await lock.db.transaction().execute(async (trx) => {
    // A 304's finalize commits asynchronously: it writes nothing a server crash
    // could not give back — the run is then interrupted and the source polled again, its
    // ledger row stays sent and the sweep counts it — and so it holds the rows every poll of
    // its credential writes only until its commit is in the WAL buffers, not on disk.
    await handOver(trx, lock, state.notModified);
    // Planned in the finalize's own transaction: its reads (the pool's poll allowance, the
    // fleet's costs) cost no commit of their own on the path every 304 takes.
    const plan = await planSourcePoll(
      { ...deps, db: trx },
      source,
      {
        requestsSpent: state.requestsSpent,
        pollIntervalSeconds: interval,
        // Page 1 went with If-None-Match: its answer says whether the feed changed.
        conditional: source.etag !== null,
      },
      now,
      fleet,
    );
    const nextPollAt = plan.nextPollAt;
    // The run and its source in one statement: one round trip fewer on every 304.
    const finished = trx
      .with('run', (db) =>
        db
          .updateTable('ingestion_runs')
          .set({ ...runCounters(state), status, finished_at: now })
          .where('id', '=', String(state.runId)),
      )
      .updateTable('event_sources')
      .set({
        // The ETag of page 1 is only worth keeping once every page behind it was read:
        // a 304 next time must mean "nothing we have not stored".
        etag: state.etag ?? source.etag,
        poll_interval_seconds: interval,
        next_poll_at: nextPollAt,
        poll_cost: plan.cost,
        poll_cost_samples: plan.samples,
        recent_event_ids: ring.ids,
        recent_event_at: ring.at,
        consecutive_failures: 0,
        // A completed run: polling this source does not kill the process.
        poll_deaths: 0,
        last_error: null,
        last_polled_at: now,
        updated_at: now,
      })
      .where('id', '=', source.id);
    await prepared(sql`${finished}`).execute(trx);
    // The window this run could not read, for the archive to fill. In the same
    // transaction as the run's completion: a completed run with a gap always has its row.
    const gap = state.gap
      ? await recordGap(trx, {
          sourceId: Number(source.id),
          runId: state.runId,
          held: ringOf(source),
          lastPolledAt: source.last_polled_at,
          read: { ids: state.eventIds, at: state.eventTimes },
          runStartedAt: state.startedAt,
          now,
        })
      : null;
    // A 304 (or the feed's end) of a held request is written here: its gate, ledger row and
    // rate-limit row ride in the finalize's commit. Last, so the rows every poll of
    // this credential writes (its rate-limit row, its minute's counters) are locked only for
    // the commit, not for the plan and the writes before it.
    await lock.requests.settle(trx);
    return { gap, plan };
  });
  const nextPollAt = plan.nextPollAt;
  lock.requests.settled();
  faultPoint('ingest.after_finalize');
  if (gap) logGapsRecorded(log, gap, ids);
  const summary = summaryOf(source, state, status, nextPollAt);
  log.info(
    {
      event: 'ingestion.run_completed',
      ...ids,
      outcome: status,
      pages_fetched: state.pagesFetched,
      requests_spent: state.requestsSpent,
      events_seen: state.eventsSeen,
      events_created: state.eventsCreated,
      events_rejected: state.eventsRejected,
      actors_created: state.actorsCreated,
      repositories_created: state.repositoriesCreated,
      gap_detected: state.gap,
      next_poll_at: nextPollAt.toISOString(),
      poll_cost: plan.cost,
      limited_by: plan.limitedBy,
    },
    `run ${state.runId} ${status}: ${state.eventsSeen} events seen, ${state.eventsCreated} pushes stored${state.eventsRejected ? `, ${state.eventsRejected} set aside` : ''}${state.gap ? ', GAP recorded' : ''}`,
  );
  return summary;
}

export async function finalizeFailure(
  deps: IngestionDeps,
  lock: SourceSession,
  source: EventSource,
  state: RunState,
  err: unknown,
  log: Logger,
  ids: Record<string, unknown>,
): Promise<RunSummary> {
  const now = (deps.clock ?? systemClock).now();
  const failure = classifyFailure(err, source, now);
  await lock.db.transaction().execute(async (trx) => {
    await handOver(trx, lock);
    await lock.requests.settle(trx, { tolerant: true });
    await trx
      .updateTable('ingestion_runs')
      .set({
        ...runCounters({ ...state, gap: false }),
        status: 'failed',
        finished_at: now,
        error: failure.error,
      })
      .where('id', '=', String(state.runId))
      .execute();
    await trx
      .updateTable('event_sources')
      .set({
        consecutive_failures: failure.consecutiveFailures,
        next_poll_at: failure.nextPollAt,
        last_error: failure.lastError,
        updated_at: now,
      })
      .where('id', '=', source.id)
      .execute();
  });
  lock.requests.settled();
  faultPoint('ingest.after_finalize');
  log.warn(
    {
      event: 'ingestion.run_failed',
      ...ids,
      err,
      error_code: failure.code,
      counts_as_failure: failure.countsAsFailure,
      consecutive_failures: failure.consecutiveFailures,
      next_poll_at: failure.nextPollAt.toISOString(),
      pages_fetched: state.pagesFetched,
      events_created: state.eventsCreated,
    },
    `run ${state.runId} failed: ${failure.error}`,
  );
  return {
    ...summaryOf(source, { ...state, gap: false }, 'failed', failure.nextPollAt),
    error: { code: failure.code, message: failure.message },
  };
}
