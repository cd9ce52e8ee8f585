/**
 * The attempt ladder of leased background work, entities and commit fetches alike: after a
 * transient failure the item waits longer each time, and after its last allowed attempt it
 * is terminal (`failed`). Each pipeline keeps its own columns and statements; the numbers
 * are these.
 */

/** Backoff after the n-th consecutive transient failure: 1m, 4m, 16m, 64m, … capped at 6h. */
export function backoffSeconds(failures: number): number {
  return Math.min(60 * 4 ** Math.max(0, failures - 1), 6 * 3600);
}

/**
 * One more failed attempt on the ladder (entities and commit fetches alike): how many now,
 * whether that was the last one allowed, and when the next may run.
 */
export function failedAttempt(
  previous: number,
  now: Date,
  maxAttempts: number,
): { attempts: number; terminal: boolean; nextAttemptAt: Date } {
  const attempts = previous + 1;
  return {
    attempts,
    terminal: attempts >= maxAttempts,
    nextAttemptAt: new Date(now.getTime() + backoffSeconds(attempts) * 1000),
  };
}
