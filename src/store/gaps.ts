import { sql } from 'kysely';
import type { Db } from '../platform/db/pool.ts';
import type { Gap } from '../platform/db/schema.ts';
import type { Logger } from '../platform/log.ts';
import { gapReadyAt } from './archive-hours.ts';

/**
 * Recording gaps (ADR 0004): the write side, which the poll runner reaches in its
 * finalizing transaction. The fill (src/backfill/) reads the rows back; this module imports
 * nothing above the database, so ingestion never imports the layer that fills what it
 * records.
 *
 * A run that reads three full pages without reaching its source's horizon may have missed
 * events; the window they were created in runs from the newest `created_at` the source held
 * before the run to the oldest the run read. Both come from the pushes stored under those
 * event ids (non-push events are not stored); a bound taken from pushes only can only
 * widen the window, never narrow it.
 *
 * Only plausible times decide a window: a `created_at` more than FUTURE_SLACK_MS past the
 * clock, or older than the feed can hold (FEED_HOLDS_MS), is not GitHub's clock but a
 * hostile or broken one, and one such event once made a gap end in 2099 (its fill never
 * due) or start in 2012 (129,000 archive hours). And a window is bounded: longer than
 * MAX_GAP_WINDOW_MS it is several gaps, and what lies before the feed's 30 days — which no
 * poll could have read — is one `unavailable` gap saying so.
 */

/** GitHub: events appear in a feed 30 s to 6 h after they happen. */
const FEED_LATENCY_MS = 6 * 3_600_000;
/** GitHub's events feeds hold the last 30 days. */
export const FEED_HOLDS_MS = 30 * 86_400_000;
/** Clocks drift a little; more than this in the future is not a time we trust. */
export const FUTURE_SLACK_MS = 5 * 60_000;
/** The longest window one gap covers (51 archive hours with the fill's margins). */
export const MAX_GAP_WINDOW_MS = 2 * 86_400_000;

export const BEFORE_FEED_REASON =
  'window older than the 30 days an events feed holds: no poll could have read it; bin/backfill its hours to import them';

/** The times a gap may be decided by, at `now`. */
export function plausibleTimes(now: Date): { from: Date; to: Date } {
  return {
    from: new Date(now.getTime() - FEED_HOLDS_MS),
    to: new Date(now.getTime() + FUTURE_SLACK_MS),
  };
}

export function isPlausibleTime(at: Date, now: Date): boolean {
  const p = plausibleTimes(now);
  return at >= p.from && at <= p.to;
}

/** Event ids and, in the same order, when each event was created (the horizon's SeenIds). */
interface SeenIds {
  ids: readonly string[];
  at: readonly (Date | null | undefined)[];
}

export interface RecordGapInput {
  sourceId: number;
  runId: number;
  /** The source's ring before this run (the horizon it held), with each event's time. */
  held: SeenIds;
  /** When the source last completed a run: bounds the window if no held push is known. */
  lastPolledAt: Date | null;
  /** Every event id this run read. */
  read: SeenIds;
  /** The run's start: the window's end if the run read no push. */
  runStartedAt: Date;
  /** The clock at finalizing: what "plausible" is measured from. */
  now: Date;
}

export interface RecordedGaps {
  /** Oldest first; every one carries the run's id. */
  gaps: Gap[];
  /** Pushes whose created_at was disregarded as implausible for this window. */
  untrustedTimes: number;
}

interface Piece {
  from: Date;
  to: Date;
  state: 'open' | 'unavailable';
  reason: string | null;
}

/** [from, to] cut at the feed's 30 days and into pieces of at most MAX_GAP_WINDOW_MS. */
export function gapPieces(from: Date, to: Date, now: Date): Piece[] {
  const feedStart = plausibleTimes(now).from;
  const pieces: Piece[] = [];
  if (from < feedStart) {
    const end = to < feedStart ? to : feedStart;
    pieces.push({ from, to: end, state: 'unavailable', reason: BEFORE_FEED_REASON });
    if (to <= feedStart) return pieces;
    from = feedStart;
  }
  for (let t = from.getTime(); ; t += MAX_GAP_WINDOW_MS) {
    const end = Math.min(t + MAX_GAP_WINDOW_MS, to.getTime());
    pieces.push({ from: new Date(t), to: new Date(end), state: 'open', reason: null });
    if (end >= to.getTime()) break;
  }
  return pieces;
}

/**
 * The created_at of the pushes stored under `seen`'s ids, each in its event's era: an id
 * GitHub reused names another push in another era, never one of these.
 */
function pushesOf(seen: SeenIds) {
  const at = seen.ids.map((_, i) => seen.at[i] ?? null);
  return sql`
    SELECT p.created_at FROM push_events p
    JOIN unnest(${[...seen.ids]}::bigint[], ${at}::timestamptz[]) AS v (id, at)
      ON v.id = p.id AND (v.at IS NULL OR event_id_era(v.at) = event_id_era(p.created_at))
    WHERE p.id = ANY(${[...seen.ids]}::bigint[])`;
}

/** Inserts the gap(s) of an overflowing run (call in the run's finalizing transaction). */
export async function recordGap(trx: Db, input: RecordGapInput): Promise<RecordedGaps> {
  const p = plausibleTimes(input.now);
  const bounds = await sql<{
    held_newest: Date | null;
    read_oldest: Date | null;
    untrusted: string;
  }>`
    WITH held AS (${pushesOf(input.held)}), read AS (${pushesOf(input.read)})
    SELECT (SELECT max(created_at) FROM held WHERE created_at BETWEEN ${p.from} AND ${p.to}) AS held_newest,
           (SELECT min(created_at) FROM read WHERE created_at BETWEEN ${p.from} AND ${p.to}) AS read_oldest,
           (SELECT count(*) FROM (SELECT created_at FROM held UNION ALL SELECT created_at FROM read) a
             WHERE created_at NOT BETWEEN ${p.from} AND ${p.to}) AS untrusted`.execute(trx);
  const b = bounds.rows[0]!;
  // Without a held push to go by: an event the last poll did not see entered the feed after
  // it, and GitHub documents the feed's latency as at most 6 h, so it was created after
  // the last poll − 6 h. (Never narrower than the true window; often wider.)
  const fallback = input.lastPolledAt ?? input.runStartedAt;
  const from = b.held_newest ?? new Date(fallback.getTime() - FEED_LATENCY_MS);
  const to = b.read_oldest ?? input.runStartedAt;
  // A late event can make the newest held push newer than the oldest read one: the window
  // is then the span between the two, whichever way round.
  const [lo, hi] = from <= to ? [from, to] : [to, from];
  const gaps: Gap[] = [];
  for (const piece of gapPieces(lo, hi, input.now)) {
    gaps.push(
      await trx
        .insertInto('gaps')
        .values({
          source_id: input.sourceId,
          run_id: input.runId,
          from_at: piece.from,
          to_at: piece.to,
          state: piece.state,
          last_error: piece.reason,
          next_attempt_at:
            piece.state === 'open'
              ? gapReadyAt({ from_at: piece.from, to_at: piece.to })
              : input.now,
        })
        .returningAll()
        .executeTakeFirstOrThrow(),
    );
  }
  return { gaps, untrustedTimes: Number(b.untrusted) };
}

/** `gap.recorded`: logged once the run that found the gap has committed, one line a gap. */
export function logGapsRecorded(
  log: Logger,
  recorded: RecordedGaps,
  ids: Record<string, unknown>,
): void {
  for (const gap of recorded.gaps) {
    const when = `events created ${gap.from_at.toISOString()} … ${gap.to_at.toISOString()} may be missing`;
    log.warn(
      {
        event: 'gap.recorded',
        ...ids,
        gap_id: Number(gap.id),
        from_at: gap.from_at.toISOString(),
        to_at: gap.to_at.toISOString(),
        state: gap.state,
        ...(gap.state === 'open'
          ? { fill_after: gap.next_attempt_at.toISOString() }
          : { reason: gap.last_error }),
        ...(recorded.untrustedTimes ? { untrusted_times: recorded.untrustedTimes } : {}),
      },
      gap.state === 'open'
        ? `gap ${gap.id} recorded for source ${gap.source_id}: ${when}; the archive fills it after ${gap.next_attempt_at.toISOString()}`
        : `gap ${gap.id} recorded for source ${gap.source_id}: ${when}; unavailable: ${gap.last_error}`,
    );
  }
  if (recorded.untrustedTimes) {
    log.warn(
      {
        event: 'gap.time_untrusted',
        ...ids,
        pushes: recorded.untrustedTimes,
      },
      `${recorded.untrustedTimes} pushes dated more than 5 min ahead of the clock or older than the feed's 30 days did not decide the gap's window`,
    );
  }
}

/**
 * A gap recorded before windows were bounded (or by hand) may end past the clock — its
 * fill never due — or span years. The fill asks this first: `future` is settled
 * unavailable, `long` is split into bounded gaps (splitGap).
 */
export function windowProblem(
  gap: { from_at: Date; to_at: Date },
  now: Date,
): 'future' | 'long' | null {
  if (gap.to_at.getTime() > now.getTime() + FUTURE_SLACK_MS) return 'future';
  if (gap.to_at.getTime() - gap.from_at.getTime() > MAX_GAP_WINDOW_MS) return 'long';
  return null;
}

/**
 * Cuts a long open gap into bounded ones: this row keeps the newest piece (the one a fill
 * reaches first), the rest are inserted beside it for the same source and run. Returns the
 * rows inserted.
 */
export async function splitGap(db: Db, gap: Gap, now: Date): Promise<Gap[]> {
  const pieces = gapPieces(gap.from_at, gap.to_at, now);
  const newest = pieces.pop()!;
  return db.transaction().execute(async (trx) => {
    await trx
      .updateTable('gaps')
      .set({
        from_at: newest.from,
        to_at: newest.to,
        next_attempt_at: gapReadyAt({ from_at: newest.from, to_at: newest.to }),
        updated_at: now,
      })
      .where('id', '=', gap.id)
      .execute();
    const added: Gap[] = [];
    for (const piece of pieces) {
      added.push(
        await trx
          .insertInto('gaps')
          .values({
            source_id: gap.source_id,
            run_id: gap.run_id,
            from_at: piece.from,
            to_at: piece.to,
            state: piece.state,
            last_error: piece.reason,
            next_attempt_at:
              piece.state === 'open' ? gapReadyAt({ from_at: piece.from, to_at: piece.to }) : now,
          })
          .returningAll()
          .executeTakeFirstOrThrow(),
      );
    }
    return added;
  });
}
