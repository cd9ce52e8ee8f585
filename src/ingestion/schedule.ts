import type { EventSource, GithubMode } from '../db/schema.ts';
import type { Deps } from '../deps.ts';
import { pollIntervalFloorSeconds } from '../github/budget.ts';

/**
 * When a source is polled next: after a success, the larger of GitHub's X-Poll-Interval
 * and the poll budget's per-source floor (DESIGN §6); after a failure, a doubling ladder.
 */

export const BACKOFF_BASE_SECONDS = 60;
export const BACKOFF_CAP_SECONDS = 3600;

/** 60 s, 120 s, 240 s … capped at 1 h, for the n-th consecutive failure (n >= 1). */
export function failureBackoffSeconds(failures: number): number {
  const n = Math.max(1, failures);
  return Math.min(BACKOFF_BASE_SECONDS * 2 ** (n - 1), BACKOFF_CAP_SECONDS);
}

export function addSeconds(at: Date, seconds: number): Date {
  return new Date(at.getTime() + seconds * 1000);
}

/** Why a source is not to be polled now, or null when it is. */
export function notDueReason(
  source: Pick<EventSource, 'enabled' | 'mode' | 'next_poll_at'>,
  mode: GithubMode,
  now: Date,
  force: boolean,
): string | null {
  if (!source.enabled) return 'disabled';
  if (source.mode !== mode) return `a ${source.mode} source (this process is ${mode})`;
  if (!force && source.next_poll_at.getTime() > now.getTime()) {
    return `not due until ${source.next_poll_at.toISOString()}`;
  }
  return null;
}

/**
 * The poll budget's per-source floor (DESIGN §6): polls may spend what enrichment leaves
 * of each credential's hourly quota — summed over the pool — shared by every enabled
 * source of this mode. The GitHub layer owns the arithmetic (it knows the quota last seen
 * for each credential).
 */
export async function pollFloorSeconds(
  deps: Pick<Deps, 'db' | 'github' | 'config'>,
  enabledSources: number,
): Promise<number> {
  return pollIntervalFloorSeconds(
    deps.db,
    deps.github.credentials,
    enabledSources,
    deps.config.enrichment.share,
  );
}
