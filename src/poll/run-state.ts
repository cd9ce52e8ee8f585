import type { EventSource } from '../platform/db/schema.ts';
import { emptySummary, type RunOutcome, type RunSummary } from './run-summary.ts';

/** A run's counters while it pages (kept in memory, written with each page and at the end). */

export interface RunState {
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
  /** When each of eventIds was created (null: not a valid time), same order. */
  eventTimes: (Date | null)[];
}

export function newRunState(runId: number, startedAt: Date): RunState {
  return {
    runId,
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
    eventTimes: [],
  };
}

export function runCounters(state: RunState) {
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

export function summaryOf(
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
