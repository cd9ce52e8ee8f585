import { sql } from 'kysely';
import type { GapState } from '../platform/db/columns.ts';
import type { Db } from '../platform/db/pool.ts';
import type { EventSource, Gap } from '../platform/db/schema.ts';
import { FUTURE_SLACK_MS } from '../store/gaps.ts';

/**
 * Gap records as the fill (src/backfill/fill.ts) reads and settles them (ADR 0041); the
 * poll runner writes them through src/store/gaps.ts:
 *
 *   open ──(every hour read)──► filled
 *     ├──(an hour still missing 48 h after it ended)──► unavailable
 *     └──(the fill's process died twice mid-fill)──► unavailable
 */

/** Open gaps the background fill may try now (their hours published, no backoff pending). */
export async function dueGaps(db: Db, now: Date, limit: number): Promise<Gap[]> {
  return (
    db
      .selectFrom('gaps')
      .selectAll()
      .where('state', '=', 'open')
      // A window ending past the clock (recorded before times were checked) is never due by
      // its readiness: it is due now, to be settled unavailable.
      .where((eb) =>
        eb.or([
          eb('next_attempt_at', '<=', now),
          eb('to_at', '>', new Date(now.getTime() + FUTURE_SLACK_MS)),
        ]),
      )
      .orderBy('next_attempt_at')
      .orderBy('id')
      .limit(limit)
      .execute()
  );
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
  /** Deaths of its fill, when this settling counts one. */
  deaths?: number;
}

/**
 * Opens a fill attempt before any work: one more attempt, and the backoff after it, are
 * committed first, so a process that dies mid-fill (OOM, SIGKILL) leaves a gap that is
 * not due at once, with `fill_started_at` set for the next fill to find. Only an open gap.
 */
export async function openAttempt(
  db: Db,
  id: number,
  a: { deaths: number; nextAttemptAt: Date; now: Date },
): Promise<Gap | undefined> {
  return db
    .updateTable('gaps')
    .set((eb) => ({
      attempts: eb('attempts', '+', 1),
      fill_deaths: a.deaths,
      fill_started_at: a.now,
      fill_hour: null,
      next_attempt_at: a.nextAttemptAt,
      updated_at: a.now,
    }))
    .where('id', '=', String(id))
    .where('state', '=', 'open')
    .returningAll()
    .executeTakeFirst();
}

/** Closes the open attempt with its outcome (counted when it opened). Only an open gap moves. */
export async function settleGap(db: Db, id: number, u: GapUpdate): Promise<Gap | undefined> {
  return db
    .updateTable('gaps')
    .set({
      state: u.state,
      events_recovered: u.eventsRecovered,
      last_error: u.lastError,
      next_attempt_at: u.nextAttemptAt,
      fill_started_at: null,
      ...(u.deaths === undefined ? {} : { fill_deaths: u.deaths }),
      filled_at: u.state === 'filled' ? u.now : null,
      updated_at: u.now,
    })
    .where('id', '=', String(id))
    .where('state', '=', 'open')
    .returningAll()
    .executeTakeFirst();
}

/**
 * Closes an attempt that did not fail: stopped by a signal or shutdown (resume soon, not
 * counted), or ended by an error it could not record (keeps its backoff). Never a death.
 */
export async function closeAttempt(
  db: Db,
  id: number,
  c: { eventsRecovered?: number; uncount: boolean; nextAttemptAt?: Date; now: Date },
): Promise<void> {
  await db
    .updateTable('gaps')
    .set((eb) => ({
      fill_started_at: null,
      updated_at: c.now,
      ...(c.eventsRecovered === undefined ? {} : { events_recovered: c.eventsRecovered }),
      ...(c.nextAttemptAt ? { next_attempt_at: c.nextAttemptAt } : {}),
      ...(c.uncount ? { attempts: eb('attempts', '-', 1) } : {}),
    }))
    .where('id', '=', String(id))
    .execute();
}

/** Notes the hour an open attempt starts reading: a death's reason names it. */
export async function noteFillHour(db: Db, id: number, hour: string): Promise<void> {
  await db.updateTable('gaps').set({ fill_hour: hour }).where('id', '=', String(id)).execute();
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
