import type { EventSource } from '../platform/db/schema.ts';
import { describeSource } from '../store/sources.ts';
import type { Deps } from '../work/deps.ts';
import type { Deferral } from './deferral.ts';
import { describeDeferral } from './deferral.ts';
import type { FleetCache } from './schedule.ts';

/** What a poll of one source reports (src/poll/poll-source.ts), and what it needs. */

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
  /** Events rejected into rejected_events (the run still completes). */
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
  /** The pass's fleet sums, read once for every poll of a pollDueSources pass. */
  fleet?: FleetCache;
  /**
   * Gives this poll's ticket back to its pass (GitHubClient.pollPass): called by the budget's
   * poll session once the poll no longer holds a request gate (its first held answer
   * settled), or at the poll's end. May be called more than once; the pass counts the first.
   */
  ticket?: () => void;
}

export type IngestionDeps = Pick<
  Deps,
  'config' | 'db' | 'pool' | 'github' | 'logger' | 'workerId' | 'clock' | 'inFlight'
>;

export function emptySummary(source: EventSource, outcome: RunOutcome): RunSummary {
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

export function deferredSummary(source: EventSource, d: Deferral): RunSummary {
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
