/**
 * A cap on request-body bytes held in memory at once, across every request of the
 * process. A webhook body must be buffered whole before its signature can be checked, so
 * without a shared cap forty concurrent 24 MB bodies are a gigabyte of heap. Bytes are
 * taken as they arrive (a slow sender holds only what it has sent) and given back when
 * the request is done; a request that would pass the cap is answered 503 with
 * Retry-After and its body dropped.
 */

/** Default cap: two of GitHub's largest deliveries (25 MB) at once, plus small ones. */
export const DEFAULT_BODY_BUDGET_BYTES = 64 * 1024 * 1024;

export interface ByteBudget {
  readonly limit: number;
  /** Bytes held right now. */
  readonly inUse: number;
  /** Requests refused because the cap was reached (since start). */
  readonly refused: number;
  tryTake(bytes: number): boolean;
  give(bytes: number): void;
  noteRefused(): void;
}

export function createByteBudget(limit = DEFAULT_BODY_BUDGET_BYTES): ByteBudget {
  let inUse = 0;
  let refused = 0;
  return {
    limit,
    get inUse() {
      return inUse;
    },
    get refused() {
      return refused;
    },
    tryTake(bytes) {
      if (inUse + bytes > limit) return false;
      inUse += bytes;
      return true;
    },
    give(bytes) {
      inUse = Math.max(0, inUse - bytes);
    },
    noteRefused() {
      refused++;
    },
  };
}
