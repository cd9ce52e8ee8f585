import type { HeldRequest, PoolRefusal } from '../budget/client-types.ts';
import type { Reservation } from '../budget/types.ts';
import type { GitHubResponse } from '../github/classify.ts';
import { BudgetExhausted, GitHubRequestFailed } from '../github/errors.ts';
import { systemClock } from '../platform/clock.ts';
import type { EventSource } from '../platform/db/schema.ts';
import { faultPoint } from '../platform/fault.ts';
import type { Logger } from '../platform/log.ts';
import { commitsOffReason } from '../store/commits-targets.ts';
import { logIdClashes } from '../store/event-ids.ts';
import { mapEventsPage } from '../store/mapping.ts';
import { logRejected } from '../store/rejected-events.ts';
import { feedPath } from '../store/sources.ts';
import { readBefore, ringOf } from './horizon.ts';
import { storePage } from './page-store.ts';
import { nextPollIfItDies, scheduleIfItDies } from './poll-deaths.ts';
import { type RunState, runCounters } from './run-state.ts';
import type { IngestionDeps, PollOptions } from './run-summary.ts';
import type { Opened, SourceSession } from './source-session.ts';

/**
 * A run's requests: page 1 conditionally (a 304 costs no quota), further pages only until
 * they reach the source's horizon (what lies behind it was read by an earlier run), each
 * page stored in one transaction with the run's counters, so a counted page is a stored one.
 */

export const PER_PAGE = 100;
/** GitHub serves at most 300 events per feed: three pages of 100; a fourth is a 422. */
export const MAX_PAGES = 3;

export function pagePath(source: EventSource, page: number): string {
  return `${feedPath(source)}?per_page=${PER_PAGE}&page=${page}`;
}

/** A 422 past page 1: the feed's window ended (GitHub serves at most 300 events). */
function isWindowEnd(page: number, status: number): boolean {
  return page > 1 && status === 422;
}

export async function fetchPages(
  deps: IngestionDeps,
  lock: SourceSession,
  source: EventSource,
  state: RunState,
  opts: PollOptions,
  opened: Pick<Opened, 'firstPage' | 'firstHeld'>,
  log: Logger,
): Promise<void> {
  const horizon = ringOf(source);
  // A gap needs something to connect to: a source that has never completed a run has
  // no horizon, and paging back over its first 300 events misses nothing we had.
  const hasHorizon = horizon.ids.length > 0 || source.last_polled_at !== null;
  let reachedHorizon = false;
  let feedEnded = false;
  // The next page's request, reserved (and held when its gate was free) in the store of the
  // page before it.
  let next: { reservation: Reservation; held: HeldRequest | null } | null = {
    reservation: opened.firstPage,
    held: opened.firstHeld,
  };

  for (let page = 1; page <= MAX_PAGES; page++) {
    const path = pagePath(source, page);
    let res: GitHubResponse;
    try {
      // Held: sent on the gate its reservation's transaction took; an answer that
      // is data (200, a 304, the feed's end) is written by the next transaction of the poll's
      // session — the page's store or the finalize — and anything else at once. Not held (the
      // gate was busy): through the gate as any request.
      res = await lock.requests.send(
        {
          purpose: 'poll',
          path,
          etag: page === 1 ? source.etag : null,
          ...(next ? { reservation: next.reservation } : {}),
          jobId: opts.jobId ?? null,
          runId: state.runId,
        },
        next?.held ?? null,
        (status) => status === 200 || status === 304 || isWindowEnd(page, status),
      );
    } catch (err) {
      if (err instanceof GitHubRequestFailed && isWindowEnd(page, err.status)) {
        feedEnded = true;
        break;
      }
      throw err;
    }
    next = null;
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

    // Each event is judged on its own: one that breaks a rule is rejected, the rest stored.
    const mapped = mapEventsPage(res.data, path);
    // A source with no horizon has no completed run whose pushes it could have read.
    const alreadyRead = hasHorizon
      ? await readBefore(deps.db, Number(source.id), horizon, {
          ids: mapped.eventIds,
          at: mapped.eventTimes,
        })
      : new Set<string>();
    // Known before the store: whether another page follows (its reservation rides in it).
    const wantsNext = alreadyRead.size === 0 && mapped.size >= PER_PAGE && page < MAX_PAGES;
    let refused: PoolRefusal | null = null;

    // Counters advance only once the page is committed, so a failed page is not counted.
    // On the poll's own session: the page's answer is settled, its gate released,
    // and the next page reserved (and held) in the page's own transaction.
    const { stored, result: counted } = await storePage(
      lock.db,
      mapped,
      {
        sourceId: source.id,
        runId: state.runId,
        commitEmails: deps.config.commits.emails,
        targetsFrom: deps.db,
        commitsOff: commitsOffReason(deps.config.github) !== null,
      },
      async (trx, stored) => {
        await lock.requests.settle(trx);
        const after: RunState = {
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
          .set(runCounters(after))
          .where('id', '=', String(state.runId))
          .execute();
        if (page === 1) {
          // Page 1 is read and stored: its answer is not the suspect. Should the process die
          // from here, the source is due again at the interval this answer announced, not at
          // the one the opening transaction knew.
          const now = (deps.clock ?? systemClock).now();
          const interval = state.pollInterval ?? source.poll_interval_seconds;
          await scheduleIfItDies(trx, Number(source.id), nextPollIfItDies(now, interval), now);
        }
        next = null;
        refused = null;
        if (wantsNext) {
          // Last, so the credential's budget lock is held only from here to the commit.
          const d = await lock.requests.reserveAndHold(trx, {
            path: pagePath(source, page + 1),
            jobId: opts.jobId ?? null,
            runId: state.runId,
          });
          if (d.ok) next = { reservation: d.reservation, held: d.held };
          else refused = d;
        }
        return after;
      },
    );
    lock.requests.settled();
    faultPoint('github.after_settle');
    Object.assign(state, counted);
    state.eventIds.push(...mapped.eventIds);
    state.eventTimes.push(...mapped.eventTimes);
    logRejected(log, stored.firstSeen, { job_id: opts.jobId ?? undefined });
    logIdClashes(log, stored.clashes, {
      job_id: opts.jobId ?? undefined,
      run_id: state.runId,
      source_id: Number(source.id),
    });
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

    if (alreadyRead.size > 0) {
      reachedHorizon = true;
      break;
    }
    if (mapped.size < PER_PAGE) {
      feedEnded = true;
      break;
    }
    if (refused) {
      const no: PoolRefusal = refused;
      throw new BudgetExhausted('poll', no.retryAt, no.reason, no.blockReason, no.rejected);
    }
  }
  state.gap = hasHorizon && !reachedHorizon && !feedEnded;
}
