/**
 * A cap on request-body bytes held in memory at once, across every request of the
 * process. A webhook body must be buffered whole before its signature can be checked, so
 * without a shared cap forty concurrent 24 MB bodies are a gigabyte of heap.
 *
 * Charged by what a request has really sent (ADR 0124), never by the Content-Length it
 * declares: a header-only connection declaring 25 MB holds nothing, so three strangers
 * cannot shut the endpoint by declaring 64 MB and sending no byte. Bytes
 * are taken as the body grows (src/web/body.ts) and given back when the request is done.
 *
 * A reserve is kept for small bodies: a body that is (or declares to be) larger than
 * SMALL_BODY_BYTES may only use `limit - reserve`, so whatever large bodies are in flight,
 * small ones — nearly every push delivery — are still read. A request that would pass what
 * it may use is answered 503 with Retry-After and its body dropped.
 */

/** Default cap: two of GitHub's largest deliveries (25 MB) at once, plus small ones. */
export const DEFAULT_BODY_BUDGET_BYTES = 64 * 1024 * 1024;
/** Kept for small bodies: a hundred concurrent 80 KB deliveries, whatever the large ones hold. */
export const DEFAULT_BODY_RESERVE_BYTES = 8 * 1024 * 1024;
/**
 * A body this size or smaller may use the reserve. A push delivery is a few KB, tens with
 * its 20 commits inline; 2,048 commits are about a megabyte.
 */
export const SMALL_BODY_BYTES = 1024 * 1024;

export interface ByteBudget {
  readonly limit: number;
  /** Bytes only small bodies may take. */
  readonly reserve: number;
  /** Bytes held right now. */
  readonly inUse: number;
  /** Requests refused because the cap was reached (since start). */
  readonly refused: number;
  /** Bodies being read right now (a header-only connection counts, holding no byte). */
  readonly reading: number;
  /** A body starts (+1) or stops (-1) being read. */
  noteReading(delta: 1 | -1): void;
  /** Takes `bytes` more for a body whose size so far (or declared size) is `bodyBytes`. */
  tryTake(bytes: number, bodyBytes: number): boolean;
  give(bytes: number): void;
  noteRefused(): void;
}

export function createByteBudget(
  limit = DEFAULT_BODY_BUDGET_BYTES,
  reserve = Math.min(DEFAULT_BODY_RESERVE_BYTES, limit),
): ByteBudget {
  let inUse = 0;
  let refused = 0;
  let reading = 0;
  return {
    limit,
    reserve,
    get inUse() {
      return inUse;
    },
    get reading() {
      return reading;
    },
    noteReading(delta) {
      reading = Math.max(0, reading + delta);
    },
    get refused() {
      return refused;
    },
    tryTake(bytes, bodyBytes) {
      const cap = bodyBytes <= SMALL_BODY_BYTES ? limit : limit - reserve;
      if (inUse + bytes > cap) return false;
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
