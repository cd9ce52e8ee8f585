import type { Db } from '../platform/db/pool.ts';
import type { ClaimContext, IdClash } from './event-ids.ts';
import type { CommitsContext } from './inline-commits.ts';
import type { PushRow } from './mapping.ts';
import { bulkStorePage } from './pushes.ts';

/**
 * Writing pushes and the people and repositories behind them. Callers pass a
 * transaction: a page (poll) or a delivery (webhook) is stored all or nothing.
 *
 * Rows are written in key order so that two transactions touching the same actors,
 * repositories or pushes (two sources, or a poll and a webhook) take row locks in the
 * same order and cannot deadlock each other.
 */

export interface StoreOptions {
  origin: 'poll' | 'webhook';
  sourceId?: number | null;
  runId?: number | null;
  /** Who gets commits and what addresses become (ADR 0070); absent: nobody, hashed. */
  commits?: CommitsContext;
  /** Who claims the pushes' event ids (ADR 0122); default GitHub's own answer. */
  claim?: Partial<ClaimContext>;
}

export interface StoreResult {
  /** push_events rows this call inserted (a push already held, by either origin, is not new). */
  created: number;
  /** Actors / repositories inserted (state 'pending': they need enriching). */
  newActors: number;
  newRepositories: number;
  /**
   * Pushes this call inserted for the fetcher — pending, or unverified and covered (a
   * fetch-commits hint after COMMIT).
   */
  commitsPending: number;
  /** Event id clashes this call recorded (event_id_clashes): log each after COMMIT. */
  clashes: IdClash[];
}

/**
 * Stores pushes with their actors and repositories. A push is identified by its natural
 * key (repository_id, ref, before, head) — the same push polled twice, polled by two
 * sources, or delivered by webhook and polled, is ONE row. Its event id is an attribute
 * (unique per era, ADR 0122); a webhook copy gets the id when the poll brings it. The one
 * statement of the bulk store (ADR 0040) does it all: this is its name for a delivery.
 */
export async function storePushes(
  trx: Db,
  pushes: PushRow[],
  opts: StoreOptions,
): Promise<StoreResult> {
  const { idsFilledIn: _, ...result } = await bulkStorePage(trx, pushes, opts);
  return result;
}
