import { logGapRecorded, recordGap } from '../backfill/gaps.ts';
import { systemClock } from '../clock.ts';
import { LockSpace, tryLockSession, unlockSession } from '../db/locks.ts';
import type { EventSource, GithubMode } from '../db/schema.ts';
import type { Deps } from '../deps.ts';
import { faultPoint } from '../fault.ts';
import { GitHubRequestFailed } from '../github/errors.ts';
import type { Reservation } from '../github/types.ts';
import type { Logger } from '../log.ts';
import { logRejected } from '../quarantine/rejected-events.ts';
import {
  type Deferral,
  deferralOf,
  deferSources,
  describeDeferral,
  logDeferral,
} from './deferral.ts';
import { classifyFailure } from './failures.ts';
import { heldBefore, mergeRecentIds } from './horizon.ts';
import { mapEventsPage } from './mapping.ts';
import { storePage } from './page-store.ts';
import { addSeconds, notDueReason, pollFloorSeconds } from './schedule.ts';
import { describeSource, feedPath, getSource } from './sources.ts';

/**
 * One poll of one source (DESIGN §3): under the source's advisory lock, re-read the row,
 * open a run, fetch page 1 conditionally and further pages only until they reach the
 * source's horizon, store each page in one transaction, finalize the run and the source,
 * release the lock — and only then tell the caller (post-commit hints).
 */

export const PER_PAGE = 100;
/** GitHub serves at most 300 events per feed: three pages of 100; a fourth is a 422. */
export const MAX_PAGES = 3;

export type RunOutcome = 'completed' | 'not_modified' | 'failed' | 'busy' | 'skipped' | 'deferred';

export interface RunSummary {
  /** null when no run row was opened (busy, skipped). */
  runId: number | null;
  sourceId: number;
  /** "repo octocat/Hello-World" */
  source: string;
  outcome: RunOutcome;
  eventsSeen: number;
  /** push_events rows created. */
  eventsCreated: number;
  /** Events set aside in rejected_events (poison: the run still completes). */
  eventsRejected: number;
  pagesFetched: number;
  /** Requests that spent quota (a 304 spends none). */
  requestsSpent: number;
  gap: boolean;
  /** Actors / repositories created 'pending' by this run: what enrichment hints are for. */
  newPending: { actor: number; repository: number };
  /** Pushes this run stored with commits_state 'pending': what a fetch-commits hint is for. */
  commitsPending?: number;
  nextPollAt: Date | null;
  error: { code: string; message: string } | null;
  /** For 'skipped': why (disabled, other mode, not due yet); for 'deferred': what the budget said. */
  reason?: string;
  /** For 'deferred': the budget refused page 1 before any request (no run row; see deferral.ts). */
  deferral?: Deferral;
}

/** Called after the run is finalized and the source lock released (never inside a transaction). */
export type AfterRun = (summary: RunSummary) => void | Promise<void>;

export interface PollOptions {
  /** Ignore next_poll_at (an operator who just fixed something). Never ignores the budget. */
  force?: boolean;
  jobId?: string | null;
  afterRun?: AfterRun;
  /** pollDueSources logs one line for every source a refusal put off, not one per source. */
  logDeferral?: boolean;
}

export type IngestionDeps = Pick<
  Deps,
  'config' | 'db' | 'pool' | 'github' | 'logger' | 'workerId' | 'clock'
>;

function emptySummary(source: EventSource, outcome: RunOutcome): RunSummary {
  return {
    runId: null,
    sourceId: Number(source.id),
    source: describeSource(source),
    outcome,
    eventsSeen: 0,
    eventsCreated: 0,
    eventsRejected: 0,
    pagesFetched: 0,
    requestsSpent: 0,
    gap: false,
    newPending: { actor: 0, repository: 0 },
    commitsPending: 0,
    nextPollAt: null,
    error: null,
  };
}

/**
 * The due-source pre-filter (exported so the benchmark can time and EXPLAIN the exact
 * statement). A pre-filter only: each source is re-read under its lock, which decides.
 */
export function dueSourcesQuery(
  db: IngestionDeps['db'],
  mode: GithubMode,
  now: Date,
  force = false,
) {
  let due = db
    .selectFrom('event_sources')
    .select('id')
    .where('enabled', '=', true)
    .where('mode', '=', mode)
    .orderBy('next_poll_at')
    .orderBy('id');
  if (!force) due = due.where('next_poll_at', '<=', now);
  return due;
}

/** Sources polled at once by pollDueSources (see pollConcurrency). */
export const MAX_CONCURRENT_POLLS = 3;

/**
 * How many sources to poll at once. The gate still sends one request at a time per
 * credential; concurrency lets one source's page be stored (and its run bookkeeping
 * written) while another's request is in flight. Each poll holds two pool connections at
 * worst (its source lock's session, and a transaction or ledger statement), so the pool
 * must have room for every poll's pair plus one spare for everything else — a poll that
 * holds its lock client and waits for a second connection must always get one.
 */
export function pollConcurrency(poolMax: number | undefined): number {
  const max = poolMax ?? 10; // pg's default
  return Math.max(1, Math.min(MAX_CONCURRENT_POLLS, Math.floor((max - 1) / 2)));
}

/**
 * Polls every due source of this process's mode, a few at a time (pollConcurrency), each
 * under its own lock. Summaries come back in the pre-filter's order (most overdue first).
 * An unexpected error stops new polls from starting; those in flight finish, then it is thrown.
 */
export async function pollDueSources(
  deps: IngestionDeps,
  opts: PollOptions & { sourceId?: number } = {},
): Promise<RunSummary[]> {
  const { sourceId, ...pollOpts } = opts;
  // One named source (bin/ingest --source): polled or reported skipped; NotFound if unknown.
  if (sourceId !== undefined) return [await pollSource(deps, sourceId, pollOpts)];
  const clock = deps.clock ?? systemClock;
  const now = clock.now();
  const due = await dueSourcesQuery(deps.db, deps.config.github.mode, now, opts.force).execute();
  const summaries: RunSummary[] = new Array(due.length);
  let next = 0;
  let failure: { err: unknown } | null = null;
  // Once the budget refuses one source, it refuses them all (the refusal means every
  // credential's poll allowance is spent or blocked): the rest are put off together, without
  // asking it again for each.
  let deferral: Deferral | null = null;
  const putOff: number[] = [];
  const worker = async () => {
    while (failure === null && next < due.length) {
      const i = next++;
      if (deferral) {
        putOff.push(i);
        continue;
      }
      try {
        summaries[i] = await pollSource(deps, Number(due[i]!.id), {
          ...pollOpts,
          logDeferral: false,
        });
        deferral ??= summaries[i]!.deferral ?? null;
      } catch (err) {
        failure ??= { err };
      }
    }
  };
  const workers = Math.min(due.length, pollConcurrency(deps.pool.options?.max));
  await Promise.all(Array.from({ length: workers }, worker));
  if (failure) throw (failure as { err: unknown }).err;
  if (deferral) {
    const d: Deferral = deferral;
    const rows = await deferSources(
      deps.db,
      putOff.map((i) => Number(due[i]!.id)),
      d,
      clock.now(),
    );
    const byId = new Map(rows.map((r) => [r.id, r]));
    for (const i of putOff) {
      const row = byId.get(due[i]!.id);
      // Not updated: another process polled it meanwhile and scheduled it past the refusal.
      summaries[i] = row
        ? deferredSummary(row, d)
        : {
            ...emptySummary(await getSource(deps.db, Number(due[i]!.id)), 'skipped'),
            reason: 'polled elsewhere meanwhile',
          };
    }
    const deferred = summaries.filter((s) => s.outcome === 'deferred');
    logDeferral(opts.jobId ? deps.logger.child({ job_id: opts.jobId }) : deps.logger, d, deferred);
  }
  return summaries;
}

function deferredSummary(source: EventSource, d: Deferral): RunSummary {
  return {
    ...emptySummary(source, 'deferred'),
    nextPollAt: d.retryAt,
    reason: describeDeferral(d),
    deferral: d,
    error: d.authError
      ? { code: 'GITHUB_AUTH_FAILED', message: d.authError.replace(/^GITHUB_AUTH_FAILED: /, '') }
      : null,
  };
}

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
  const described = await getSource(deps.db, sourceId);
  // The lock is a session lock: it needs its own connection for the whole run, and dies
  // with that session if this process does.
  const client = await deps.pool.connect();
  let broken: Error | undefined;
  let summary: RunSummary;
  try {
    if (!(await tryLockSession(client, LockSpace.source, sourceId))) {
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

interface RunState {
  runId: number;
  startedAt: Date;
  pagesFetched: number;
  requestsSpent: number;
  eventsSeen: number;
  pushEventsSeen: number;
  eventsCreated: number;
  eventsRejected: number;
  actorsCreated: number;
  repositoriesCreated: number;
  commitsPending: number;
  gap: boolean;
  notModified: boolean;
  etag: string | null;
  pollInterval: number | null;
  /** Every event id read by this run, in feed order. */
  eventIds: string[];
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
  const state: RunState = {
    runId: Number(run.id),
    startedAt,
    pagesFetched: 0,
    requestsSpent: 0,
    eventsSeen: 0,
    pushEventsSeen: 0,
    eventsCreated: 0,
    eventsRejected: 0,
    actorsCreated: 0,
    repositoriesCreated: 0,
    commitsPending: 0,
    gap: false,
    notModified: false,
    etag: null,
    pollInterval: null,
    eventIds: [],
  };
  const ids = { run_id: state.runId, source_id: sourceId, job_id: opts.jobId ?? undefined };
  log.info(
    { event: 'ingestion.run_started', ...ids, source: describeSource(source) },
    `run ${state.runId} started for source ${sourceId} (${describeSource(source)})`,
  );

  try {
    await fetchPages(deps, source, state, opts, firstPage, log);
    return await finalizeSuccess(deps, source, state, log, ids);
  } catch (err) {
    return finalizeFailure(deps, source, state, err, log, ids);
  }
}

function pagePath(source: EventSource, page: number): string {
  return `${feedPath(source)}?per_page=${PER_PAGE}&page=${page}`;
}

/** A 422 past page 1: the feed's window ended (GitHub serves at most 300 events). */
function isWindowEnd(page: number, status: number): boolean {
  return page > 1 && status === 422;
}

async function fetchPages(
  deps: IngestionDeps,
  source: EventSource,
  state: RunState,
  opts: PollOptions,
  firstPage: Reservation,
  log: Logger,
): Promise<void> {
  const horizon = new Set(source.recent_event_ids);
  // A gap needs something to connect to: a source that has never completed a run has
  // no horizon, and paging back over its first 300 events misses nothing we had.
  const hasHorizon = horizon.size > 0 || source.last_polled_at !== null;
  let reachedHorizon = false;
  let feedEnded = false;

  for (let page = 1; page <= MAX_PAGES; page++) {
    const path = pagePath(source, page);
    let res: Awaited<ReturnType<typeof deps.github.request>>;
    try {
      res = await deps.github.request({
        purpose: 'poll',
        path,
        etag: page === 1 ? source.etag : null,
        ...(page === 1 ? { reservation: firstPage } : {}),
        jobId: opts.jobId ?? null,
        runId: state.runId,
      });
    } catch (err) {
      if (err instanceof GitHubRequestFailed && isWindowEnd(page, err.status)) {
        feedEnded = true;
        break;
      }
      throw err;
    }
    if (res.counted) state.requestsSpent++;
    if (page === 1) {
      state.pollInterval = res.pollInterval;
      state.etag = res.etag;
      if (res.status === 304) {
        state.notModified = true;
        return;
      }
    }
    if (isWindowEnd(page, res.status)) {
      feedEnded = true;
      break;
    }
    if (res.status !== 200)
      throw new GitHubRequestFailed(path, res.status, 'unexpected status for an events feed');

    // Each event is judged on its own: poison is set aside, the rest stored (ADR 0020).
    const mapped = mapEventsPage(res.data, path);
    // A source with no horizon has no completed run whose pushes could be held.
    const held = hasHorizon
      ? await heldBefore(deps.db, Number(source.id), horizon, mapped.eventIds)
      : new Set<string>();

    // Counters advance only once the page is committed, so a failed page is not counted.
    const { stored, result: counted } = await storePage(
      deps.db,
      mapped,
      { sourceId: source.id, runId: state.runId, commitEmails: deps.config.commits.emails },
      async (trx, stored) => {
        const next: RunState = {
          ...state,
          pagesFetched: state.pagesFetched + 1,
          eventsSeen: state.eventsSeen + mapped.size,
          pushEventsSeen: state.pushEventsSeen + mapped.pushes.length,
          eventsCreated: state.eventsCreated + stored.created,
          eventsRejected: state.eventsRejected + stored.rejected,
          actorsCreated: state.actorsCreated + stored.newActors,
          repositoriesCreated: state.repositoriesCreated + stored.newRepositories,
          commitsPending: state.commitsPending + stored.commitsPending,
        };
        await trx
          .updateTable('ingestion_runs')
          .set(runCounters(next))
          .where('id', '=', String(state.runId))
          .execute();
        return next;
      },
    );
    Object.assign(state, counted);
    state.eventIds.push(...mapped.eventIds);
    logRejected(log, stored.firstSeen, { job_id: opts.jobId ?? undefined });
    for (const s of mapped.sanitised) {
      log.info(
        {
          event: 'event.sanitised',
          run_id: state.runId,
          source_id: Number(source.id),
          event_id: s.eventId,
          path: s.path,
        },
        `event ${s.eventId} stored with text Postgres cannot hold (NUL or a lone surrogate at ${s.path}) replaced by U+FFFD`,
      );
    }
    faultPoint('ingest.after_page_commit');

    if (held.size > 0) {
      reachedHorizon = true;
      break;
    }
    if (mapped.size < PER_PAGE) {
      feedEnded = true;
      break;
    }
  }
  state.gap = hasHorizon && !reachedHorizon && !feedEnded;
}

function runCounters(state: RunState) {
  return {
    pages_fetched: state.pagesFetched,
    requests_spent: state.requestsSpent,
    events_seen: state.eventsSeen,
    push_events_seen: state.pushEventsSeen,
    events_created: state.eventsCreated,
    events_rejected: state.eventsRejected,
    actors_created: state.actorsCreated,
    repositories_created: state.repositoriesCreated,
    gap_detected: state.gap,
  };
}

async function enabledSourceCount(deps: IngestionDeps): Promise<number> {
  const r = await deps.db
    .selectFrom('event_sources')
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .where('enabled', '=', true)
    .where('mode', '=', deps.config.github.mode)
    .executeTakeFirstOrThrow();
  return Number(r.n);
}

function summaryOf(
  source: EventSource,
  state: RunState,
  outcome: RunOutcome,
  nextPollAt: Date,
): RunSummary {
  return {
    ...emptySummary(source, outcome),
    runId: state.runId,
    eventsSeen: state.eventsSeen,
    eventsCreated: state.eventsCreated,
    eventsRejected: state.eventsRejected,
    pagesFetched: state.pagesFetched,
    requestsSpent: state.requestsSpent,
    gap: state.gap,
    newPending: { actor: state.actorsCreated, repository: state.repositoriesCreated },
    commitsPending: state.commitsPending,
    nextPollAt,
  };
}

async function finalizeSuccess(
  deps: IngestionDeps,
  source: EventSource,
  state: RunState,
  log: Logger,
  ids: Record<string, unknown>,
): Promise<RunSummary> {
  const now = (deps.clock ?? systemClock).now();
  const interval = state.pollInterval ?? source.poll_interval_seconds;
  const floor = await pollFloorSeconds(deps, await enabledSourceCount(deps));
  const nextPollAt = addSeconds(now, Math.max(interval, floor));
  const status = state.notModified ? 'not_modified' : 'completed';
  const gap = await deps.db.transaction().execute(async (trx) => {
    await trx
      .updateTable('ingestion_runs')
      .set({ ...runCounters(state), status, finished_at: now })
      .where('id', '=', String(state.runId))
      .execute();
    await trx
      .updateTable('event_sources')
      .set({
        // The ETag of page 1 is only worth keeping once every page behind it was read:
        // a 304 next time must mean "nothing we have not stored".
        etag: state.etag ?? source.etag,
        poll_interval_seconds: interval,
        next_poll_at: nextPollAt,
        recent_event_ids: state.notModified
          ? source.recent_event_ids
          : mergeRecentIds(state.eventIds, source.recent_event_ids),
        consecutive_failures: 0,
        last_error: null,
        last_polled_at: now,
        updated_at: now,
      })
      .where('id', '=', source.id)
      .execute();
    // The window this run could not read, for the archive to fill (ADR 0041). In the same
    // transaction as the run's completion: a completed run with a gap always has its row.
    return state.gap
      ? recordGap(trx, {
          sourceId: Number(source.id),
          runId: state.runId,
          heldIds: source.recent_event_ids,
          lastPolledAt: source.last_polled_at,
          readIds: state.eventIds,
          runStartedAt: state.startedAt,
        })
      : null;
  });
  faultPoint('ingest.after_finalize');
  if (gap) logGapRecorded(log, gap, ids);
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
    },
    `run ${state.runId} ${status}: ${state.eventsSeen} events seen, ${state.eventsCreated} pushes stored${state.eventsRejected ? `, ${state.eventsRejected} set aside` : ''}${state.gap ? ', GAP recorded' : ''}`,
  );
  return summary;
}

async function finalizeFailure(
  deps: IngestionDeps,
  source: EventSource,
  state: RunState,
  err: unknown,
  log: Logger,
  ids: Record<string, unknown>,
): Promise<RunSummary> {
  const now = (deps.clock ?? systemClock).now();
  const failure = classifyFailure(err, source, now);
  await deps.db.transaction().execute(async (trx) => {
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
