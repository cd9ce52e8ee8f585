import { sql } from 'kysely';
import type { BackfillFileState, GapState, SourceKind } from '../platform/db/columns.ts';
import type { Db } from '../platform/db/pool.ts';

/** Gaps and archive backfill as an operator sees them (status page, bin/status, /status). */
export interface GapStatus {
  byState: Record<GapState, number>;
  /** Pushes the fills have stored, over every gap. */
  eventsRecovered: number;
  /** When the next open gap may be filled (its hours published, its backoff over). */
  nextFillAt: Date | null;
  /** The open gap that has waited longest, and why (its last error). */
  oldestOpen: {
    id: number;
    sourceId: number;
    fromAt: Date;
    toAt: Date;
    lastError: string | null;
  } | null;
  /** The open gaps, oldest window first (at most OPEN_GAPS_LISTED; byState.open counts them all). */
  open: OpenGap[];
  /** The most recent file import (bin/backfill or a gap fill). */
  lastBackfill: {
    file: string;
    scope: string;
    state: BackfillFileState;
    linesDone: number;
    pushesCreated: number;
    malformed: number;
    updatedAt: Date;
    error: string | null;
  } | null;
}

/** An open gap as the page and bin/status list it: which source, which window, why still open. */
export interface OpenGap {
  id: number;
  sourceId: number;
  source: { kind: SourceKind; target: string | null };
  fromAt: Date;
  toAt: Date;
  attempts: number;
  nextAttemptAt: Date;
  lastError: string | null;
}

export const OPEN_GAPS_LISTED = 20;

export async function gapStatus(db: Db): Promise<GapStatus> {
  const states = await sql<{ state: GapState; n: string; recovered: string; next: Date | null }>`
    SELECT state, count(*) AS n, coalesce(sum(events_recovered), 0) AS recovered,
           min(next_attempt_at) AS next
    FROM gaps GROUP BY state`.execute(db);
  const oldest = await sql<{
    id: string;
    source_id: string;
    from_at: Date;
    to_at: Date;
    last_error: string | null;
  }>`
    SELECT id, source_id, from_at, to_at, last_error FROM gaps
    WHERE state = 'open' ORDER BY created_at, id LIMIT 1`.execute(db);
  const open = await sql<{
    id: string;
    source_id: string;
    kind: SourceKind;
    target: string | null;
    from_at: Date;
    to_at: Date;
    attempts: number;
    next_attempt_at: Date;
    last_error: string | null;
  }>`
    SELECT g.id, g.source_id, s.kind, s.target, g.from_at, g.to_at, g.attempts,
           g.next_attempt_at, g.last_error
    FROM gaps g JOIN event_sources s ON s.id = g.source_id
    WHERE g.state = 'open' ORDER BY g.from_at, g.id LIMIT ${OPEN_GAPS_LISTED}`.execute(db);
  const last = await sql<{
    file: string;
    scope: string;
    state: BackfillFileState;
    lines_done: string;
    pushes_created: string;
    malformed: string;
    updated_at: Date;
    error: string | null;
  }>`
    SELECT file, scope, state, lines_done, pushes_created, malformed, updated_at, error
    FROM backfill_files ORDER BY updated_at DESC, id DESC LIMIT 1`.execute(db);

  const out: GapStatus = {
    byState: { open: 0, filled: 0, unavailable: 0 },
    eventsRecovered: 0,
    nextFillAt: null,
    oldestOpen: null,
    open: open.rows.map((g) => ({
      id: Number(g.id),
      sourceId: Number(g.source_id),
      source: { kind: g.kind, target: g.target },
      fromAt: g.from_at,
      toAt: g.to_at,
      attempts: g.attempts,
      nextAttemptAt: g.next_attempt_at,
      lastError: g.last_error,
    })),
    lastBackfill: null,
  };
  for (const row of states.rows) {
    out.byState[row.state] = Number(row.n);
    out.eventsRecovered += Number(row.recovered);
    if (row.state === 'open') out.nextFillAt = row.next;
  }
  const o = oldest.rows[0];
  if (o) {
    out.oldestOpen = {
      id: Number(o.id),
      sourceId: Number(o.source_id),
      fromAt: o.from_at,
      toAt: o.to_at,
      lastError: o.last_error,
    };
  }
  const l = last.rows[0];
  if (l) {
    out.lastBackfill = {
      file: l.file,
      scope: l.scope,
      state: l.state,
      linesDone: Number(l.lines_done),
      pushesCreated: Number(l.pushes_created),
      malformed: Number(l.malformed),
      updatedAt: l.updated_at,
      error: l.error,
    };
  }
  return out;
}
