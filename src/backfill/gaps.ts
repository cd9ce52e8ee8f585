import { sql } from 'kysely';
import type { Db } from '../db/pool.ts';
import type { EventSource, Gap, GapState } from '../db/schema.ts';
import type { Logger } from '../log.ts';
import { gapReadyAt } from './hours.ts';

/**
 * Gap records (DESIGN §4 `gaps`, ADR 0041). A run that reads three full pages without
 * reaching its source's horizon may have missed events (ADR 0004); the run records the
 * window they were created in, and the fill (src/backfill/fill.ts) reads it back from the
 * archive:
 *
 *   open ──(every hour read)──► filled
 *     └──(an hour still missing 48 h after it ended)──► unavailable
 *
 * `from_at` is the newest `created_at` the source held before the run, `to_at` the oldest
 * the run read. Both come from the pushes stored under those event ids (non-push events
 * are not stored); a bound taken from pushes only can only widen the window, never narrow
 * it: the newest push held is no newer than the newest event held, the oldest push read
 * no older than the oldest event read.
 */

/** GitHub: events appear in a feed 30 s to 6 h after they happen. */
const FEED_LATENCY_MS = 6 * 3_600_000;

export interface RecordGapInput {
  sourceId: number;
  runId: number;
  /** The source's recent_event_ids before this run (the horizon it held). */
  heldIds: readonly string[];
  /** When the source last completed a run: bounds the window if no held push is known. */
  lastPolledAt: Date | null;
  /** Every event id this run read. */
  readIds: readonly string[];
  /** The run's start: the window's end if the run read no push. */
  runStartedAt: Date;
}

/** Inserts the gap of an overflowing run (call in the run's finalizing transaction). */
export async function recordGap(trx: Db, input: RecordGapInput): Promise<Gap> {
  const bounds = await sql<{ held_newest: Date | null; read_oldest: Date | null }>`
    SELECT (SELECT max(created_at) FROM push_events WHERE id = ANY(${[...input.heldIds]}::bigint[])) AS held_newest,
           (SELECT min(created_at) FROM push_events WHERE id = ANY(${[...input.readIds]}::bigint[])) AS read_oldest`.execute(
    trx,
  );
  const b = bounds.rows[0]!;
  // Without a held push to go by: an event the last poll did not see entered the feed after
  // it, and GitHub documents the feed's latency as at most 6 h, so it was created after
  // the last poll − 6 h. (Never narrower than the true window; often wider.)
  const fallback = input.lastPolledAt ?? input.runStartedAt;
  const from = b.held_newest ?? new Date(fallback.getTime() - FEED_LATENCY_MS);
  const to = b.read_oldest ?? input.runStartedAt;
  // A late event can make the newest held push newer than the oldest read one: the window
  // is then the span between the two, whichever way round.
  const window = from <= to ? { from, to } : { from: to, to: from };
  return trx
    .insertInto('gaps')
    .values({
      source_id: input.sourceId,
      run_id: input.runId,
      from_at: window.from,
      to_at: window.to,
      next_attempt_at: gapReadyAt({ from_at: window.from, to_at: window.to }),
    })
    .returningAll()
    .executeTakeFirstOrThrow();
}

/** Open gaps the background fill may try now (their hours published, no backoff pending). */
export async function dueGaps(db: Db, now: Date, limit: number): Promise<Gap[]> {
  return db
    .selectFrom('gaps')
    .selectAll()
    .where('state', '=', 'open')
    .where('next_attempt_at', '<=', now)
    .orderBy('next_attempt_at')
    .orderBy('id')
    .limit(limit)
    .execute();
}

export async function openGaps(db: Db): Promise<Gap[]> {
  return db.selectFrom('gaps').selectAll().where('state', '=', 'open').orderBy('id').execute();
}

export async function getGap(db: Db, id: number): Promise<Gap | undefined> {
  return db.selectFrom('gaps').selectAll().where('id', '=', String(id)).executeTakeFirst();
}

export interface GapUpdate {
  state: GapState;
  eventsRecovered: number;
  lastError: string | null;
  nextAttemptAt: Date;
  now: Date;
}

/** Records the outcome of a fill attempt (one more attempt). Only an open gap moves. */
export async function settleGap(db: Db, id: number, u: GapUpdate): Promise<Gap | undefined> {
  return db
    .updateTable('gaps')
    .set((eb) => ({
      state: u.state,
      events_recovered: u.eventsRecovered,
      last_error: u.lastError,
      next_attempt_at: u.nextAttemptAt,
      attempts: eb('attempts', '+', 1),
      filled_at: u.state === 'filled' ? u.now : null,
      updated_at: u.now,
    }))
    .where('id', '=', String(id))
    .where('state', '=', 'open')
    .returningAll()
    .executeTakeFirst();
}

/** Pushes a gap's imports created so far (every hour, every attempt: the checkpoints' sum). */
export async function pushesRecovered(db: Db, gapId: number): Promise<number> {
  const r = await sql<{ n: string | null }>`
    SELECT sum(pushes_created) AS n FROM backfill_files WHERE gap_id = ${gapId}`.execute(db);
  return Number(r.rows[0]?.n ?? 0);
}

/** The repository id we hold under a repo source's name (its archive events may carry an older name). */
export async function knownRepoId(
  db: Db,
  source: Pick<EventSource, 'kind' | 'target'>,
): Promise<number | null> {
  if (source.kind !== 'repo' || source.target === null) return null;
  const r = await sql<{ id: string }>`
    SELECT id FROM repositories WHERE lower(full_name) = lower(${source.target}) LIMIT 1`.execute(
    db,
  );
  return r.rows[0] ? Number(r.rows[0].id) : null;
}

/** `gap.recorded`: logged once the run that found the gap has committed. */
export function logGapRecorded(log: Logger, gap: Gap, ids: Record<string, unknown>): void {
  log.warn(
    {
      event: 'gap.recorded',
      ...ids,
      gap_id: Number(gap.id),
      from_at: gap.from_at.toISOString(),
      to_at: gap.to_at.toISOString(),
      fill_after: gap.next_attempt_at.toISOString(),
    },
    `gap ${gap.id} recorded for source ${gap.source_id}: events created ${gap.from_at.toISOString()} … ${gap.to_at.toISOString()} may be missing; the archive fills it after ${gap.next_attempt_at.toISOString()}`,
  );
}
