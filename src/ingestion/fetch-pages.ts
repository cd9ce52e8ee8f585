import type { EventSource } from '../db/schema.ts';
import { faultPoint } from '../fault.ts';
import { GitHubRequestFailed } from '../github/errors.ts';
import type { Reservation } from '../github/types.ts';
import type { Logger } from '../log.ts';
import { logRejected } from '../quarantine/rejected-events.ts';
import { heldBefore } from './horizon.ts';
import { mapEventsPage } from './mapping.ts';
import { storePage } from './page-store.ts';
import { type RunState, runCounters } from './run-state.ts';
import type { IngestionDeps, PollOptions } from './run-summary.ts';
import { feedPath } from './sources.ts';

/**
 * A run's requests (DESIGN §3): page 1 conditionally, further pages only until they reach
 * the source's horizon, each page stored in one transaction with the run's counters.
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
