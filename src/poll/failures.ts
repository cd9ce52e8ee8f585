import { BudgetExhausted, GateTimeout, GitHubAuthFailed, RateLimited } from '../github/errors.ts';
import { ladderSeconds } from '../platform/attempts.ts';
import type { EventSource } from '../platform/db/schema.ts';
import { AppError } from '../platform/errors.ts';
import { withoutUserinfo } from '../platform/redact.ts';
import { addSeconds } from './schedule.ts';

/**
 * What a failed run means for its source's schedule and for `last_error`.
 *
 * Budget events — RateLimited (GitHub said wait), BudgetExhausted (our ledger said no),
 * GateTimeout (another request held the gate) — say nothing about the source: they do
 * not climb its failure ladder. The source simply waits until the budget allows
 * (retry-after / reset), which is the only wait that helps. Everything else (5xx,
 * timeouts, malformed feeds, 404s, bad credentials) is the source failing, and backs off
 * 1 min, 2 min, 4 min … capped at 1 h.
 *
 * A 401 is an auth failure (GITHUB_AUTH_FAILED): it counts, and the source waits for its
 * credential's block on the auth ladder (1, 5, 15, 60 min) — retrying sooner only repeats
 * the 401. `last_error` keeps the real cause: our own budget saying no or a busy gate never
 * overwrite it (a credential blocked by a 401 still says GITHUB_AUTH_FAILED).
 */
export interface FailureDecision {
  code: string;
  message: string;
  /** "CODE: message", as written to ingestion_runs.error. */
  error: string;
  /** What event_sources.last_error becomes (the previous cause when this one says nothing new). */
  lastError: string | null;
  countsAsFailure: boolean;
  consecutiveFailures: number;
  nextPollAt: Date;
}

type SourceState = Pick<EventSource, 'consecutive_failures' | 'next_poll_at' | 'last_error'>;

/** A budget refusal caused by a 401's block is still, for the source, an auth failure. */
function isAuthBlock(err: unknown): err is BudgetExhausted {
  return err instanceof BudgetExhausted && err.blockReason === 'auth';
}

export function classifyFailure(err: unknown, source: SourceState, now: Date): FailureDecision {
  const code = isAuthBlock(err)
    ? 'GITHUB_AUTH_FAILED'
    : err instanceof AppError
      ? err.code
      : 'INTERNAL';
  // Stored and shown: no URL's userinfo (src/platform/redact.ts).
  const message = withoutUserinfo(err instanceof Error ? err.message : String(err));
  const error = `${code}: ${message}`;
  const unchanged = {
    code,
    message,
    error,
    lastError: source.last_error,
    countsAsFailure: false,
    consecutiveFailures: source.consecutive_failures,
  };

  if (err instanceof RateLimited) {
    // GitHub's own word: worth showing, and it costs the source nothing.
    return { ...unchanged, lastError: error, nextPollAt: err.retryAt };
  }
  if (err instanceof BudgetExhausted) {
    return {
      ...unchanged,
      lastError: isAuthBlock(err) ? error : source.last_error,
      nextPollAt: err.retryAt ?? addSeconds(now, ladderSeconds('poll', 1)),
    };
  }
  if (err instanceof GateTimeout) {
    // Nothing was sent; the next tick tries again.
    const next = source.next_poll_at.getTime() > now.getTime() ? source.next_poll_at : now;
    return { ...unchanged, nextPollAt: next };
  }
  const failures = source.consecutive_failures + 1;
  const backoff = addSeconds(now, ladderSeconds('poll', failures));
  const nextPollAt =
    err instanceof GitHubAuthFailed && err.retryAt && err.retryAt > backoff ? err.retryAt : backoff;
  return {
    code,
    message,
    error,
    lastError: error,
    countsAsFailure: true,
    consecutiveFailures: failures,
    nextPollAt,
  };
}
