import { sql } from 'kysely';
import type { Db } from '../platform/db/pool.ts';
import { eventIdEra } from '../store/event-ids.ts';

/**
 * A source's horizon: the event ids it is known to have read to the end of a run.
 * Paging stops at the first page that reaches the horizon (ADR 0004).
 *
 * Membership, not comparison: GitHub's feed is late and out of order (30 s to 6 h), so
 * an event with a LOWER id than the newest we have read can still be new to us. And membership
 * within an era: GitHub reused the ids of 2016–2020 after 2025-10-08, so an id
 * read in another era is another event, never a horizon.
 */

/** GitHub's events feeds hold at most 300 events; that many ids cover the whole window. */
export const RECENT_IDS_KEPT = 300;

/** Event ids and, in the same order, when each event was created (null: not known). */
export interface SeenIds {
  ids: readonly string[];
  at: readonly (Date | null | undefined)[];
}

/** Whether two sightings of an id can be one event: the same era, when both times are known. */
export function sameEra(a: Date | null | undefined, b: Date | null | undefined): boolean {
  return !a || !b || eventIdEra(a) === eventIdEra(b);
}

/** A source's ring as stored (recent_event_ids, recent_event_at). */
export function ringOf(source: {
  recent_event_ids: string[];
  recent_event_at?: (Date | null)[];
}): SeenIds {
  return { ids: source.recent_event_ids, at: source.recent_event_at ?? [] };
}

/** The ids of `seen` indexed by id: each id's times (an id may recur in several eras). */
function byId(seen: SeenIds): Map<string, (Date | null | undefined)[]> {
  const m = new Map<string, (Date | null | undefined)[]>();
  seen.ids.forEach((id, i) => {
    const times = m.get(id);
    if (times) times.push(seen.at[i]);
    else m.set(id, [seen.at[i]]);
  });
  return m;
}

/**
 * Which of the page's ids this source had already read before the current run: its ring
 * (recent_event_ids), plus pushes stored by its COMPLETED runs (a push is kept longer than
 * the ring of ids), each of the page event's era. Pushes stored by a run that failed or was
 * interrupted half-way do not count — the pages behind them were never read, so they are
 * not a horizon — and neither do pushes that arrived by webhook or through another source.
 */
export async function readBefore(
  db: Db,
  sourceId: number,
  ring: SeenIds,
  page: SeenIds,
): Promise<Set<string>> {
  const inRing = byId(ring);
  const read = new Set<string>();
  const unknown: { id: string; at: Date | null }[] = [];
  page.ids.forEach((id, i) => {
    if (inRing.get(id)?.some((t) => sameEra(t, page.at[i]))) read.add(id);
    else unknown.push({ id, at: page.at[i] ?? null });
  });
  if (unknown.length === 0) return read;
  const ids = unknown.map((u) => u.id);
  const r = await sql<{ id: string }>`
    SELECT DISTINCT p.id::text AS id
    FROM push_events p
    JOIN unnest(${ids}::bigint[], ${unknown.map((u) => u.at)}::timestamptz[]) AS v (id, at)
      ON v.id = p.id AND (v.at IS NULL OR event_id_era(v.at) = event_id_era(p.created_at))
    JOIN ingestion_runs r ON r.id = p.run_id
    WHERE p.id = ANY(${ids}::bigint[])
      AND r.source_id = ${sourceId} AND r.status = 'completed'`.execute(db);
  for (const row of r.rows) read.add(row.id);
  return read;
}

/**
 * The new ring: this run's ids (feed order, newest first), then the previous ones, an id
 * kept once per era, cut to RECENT_IDS_KEPT.
 */
export function mergeRecentIds(
  thisRun: SeenIds,
  previous: SeenIds,
): { ids: string[]; at: (Date | null)[] } {
  const out = { ids: [] as string[], at: [] as (Date | null)[] };
  const kept = new Map<string, (Date | null)[]>();
  const take = (id: string, at: Date | null) => {
    const times = kept.get(id);
    if (times?.some((t) => sameEra(t, at))) return;
    if (times) times.push(at);
    else kept.set(id, [at]);
    out.ids.push(id);
    out.at.push(at);
  };
  for (const seen of [thisRun, previous]) {
    seen.ids.forEach((id, i) => {
      if (out.ids.length < RECENT_IDS_KEPT) take(id, seen.at[i] ?? null);
    });
  }
  return out;
}
