import type { EventSource } from '../db/schema.ts';
import { AppError } from '../errors.ts';
import { BudgetExhausted, GateTimeout, GitHubAuthFailed, RateLimited } from '../github/errors.ts';
import {
  addSeconds,
  BACKOFF_BASE_SECONDS,
  BACKOFF_CAP_SECONDS,
  failureBackoffSeconds,
} from './schedule.ts';

/**
 * What a failed run means for its source's schedule.
 *
 * Budget events — RateLimited (GitHub said wait), BudgetExhausted (our ledger said no),
 * GateTimeout (another request held the gate) — say nothing about the source: they do
 * not climb its failure ladder. The source simply waits until the budget allows
 * (retry-after / reset), which is the only wait that helps. Everything else (5xx,
 * timeouts, malformed feeds, 404s, bad credentials) is the source failing, and backs off
 * 1 min, 2 min, 4 min … capped at 1 h; a 401 goes straight to the cap, since retrying a
 * bad token sooner only burns requests.
 */
export interface FailureDecision {
  code: string;
  message: string;
  /** "CODE: message", as written to ingestion_runs.error and event_sources.last_error. */
  error: string;
  countsAsFailure: boolean;
  consecutiveFailures: number;
  nextPollAt: Date;
}

export function classifyFailure(
  err: unknown,
  source: Pick<EventSource, 'consecutive_failures' | 'next_poll_at'>,
  now: Date,
): FailureDecision {
  const code = err instanceof AppError ? err.code : 'INTERNAL';
  const message = err instanceof Error ? err.message : String(err);
  const base = { code, message, error: `${code}: ${message}` };

  if (err instanceof RateLimited) {
    return {
      ...base,
      countsAsFailure: false,
      consecutiveFailures: source.consecutive_failures,
      nextPollAt: err.retryAt,
    };
  }
  if (err instanceof BudgetExhausted) {
    return {
      ...base,
      countsAsFailure: false,
      consecutiveFailures: source.consecutive_failures,
      nextPollAt: err.retryAt ?? addSeconds(now, BACKOFF_BASE_SECONDS),
    };
  }
  if (err instanceof GateTimeout) {
    // Nothing was sent; the next tick tries again.
    const next = source.next_poll_at.getTime() > now.getTime() ? source.next_poll_at : now;
    return {
      ...base,
      countsAsFailure: false,
      consecutiveFailures: source.consecutive_failures,
      nextPollAt: next,
    };
  }
  const failures = source.consecutive_failures + 1;
  const wait =
    err instanceof GitHubAuthFailed ? BACKOFF_CAP_SECONDS : failureBackoffSeconds(failures);
  return {
    ...base,
    countsAsFailure: true,
    consecutiveFailures: failures,
    nextPollAt: addSeconds(now, wait),
  };
}
