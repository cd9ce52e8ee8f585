import { sql } from 'kysely';
import type { Db } from '../db/pool.ts';

/**
 * A source's horizon: the event ids it is known to have read to the end of a run.
 * Paging stops at the first page that reaches the horizon (ADR 0004).
 *
 * Membership, not comparison: GitHub's feed is late and out of order (30 s to 6 h), so
 * an event with a LOWER id than the newest we hold can still be new to us.
 */

/** GitHub's events feeds hold at most 300 events; that many ids cover the whole window. */
export const RECENT_IDS_KEPT = 300;

/**
 * Which of `pageIds` this source already held before the current run: its
 * recent_event_ids, plus pushes stored by its COMPLETED runs (a push is kept longer than
 * the ring of ids). Pushes stored by a run that failed or was interrupted half-way do not
 * count — the pages behind them were never read, so they are not a horizon — and neither
 * do pushes that arrived by webhook or through another source.
 */
export async function heldBefore(
  db: Db,
  sourceId: number,
  recent: ReadonlySet<string>,
  pageIds: string[],
): Promise<Set<string>> {
  const held = new Set(pageIds.filter((id) => recent.has(id)));
  const unknown = pageIds.filter((id) => !held.has(id));
  if (unknown.length === 0) return held;
  const r = await sql<{ id: string }>`
    SELECT p.id::text AS id
    FROM push_events p JOIN ingestion_runs r ON r.id = p.run_id
    WHERE p.id = ANY(${unknown}::bigint[])
      AND r.source_id = ${sourceId} AND r.status = 'completed'`.execute(db);
  for (const row of r.rows) held.add(row.id);
  return held;
}

/** The new ring: this run's ids (feed order, newest first), then the previous ones, deduplicated. */
export function mergeRecentIds(thisRun: string[], previous: string[]): string[] {
  return [...new Set([...thisRun, ...previous])].slice(0, RECENT_IDS_KEPT);
}
