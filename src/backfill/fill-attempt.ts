import { ladderSeconds, MAX_DEATHS } from '../platform/attempts.ts';
import type { Db } from '../platform/db/pool.ts';
import type { Gap } from '../platform/db/schema.ts';
import type { Logger } from '../platform/log.ts';
import { gapReadyAt } from '../store/archive-hours.ts';
import { splitGap, windowProblem } from '../store/gaps.ts';
import { getGap, openAttempt, pushesRecovered, settleGap } from './gaps.ts';

/**
 * What a fill does under the gap's lock before it reads a byte (ADR 0061): settle or split
 * a window recorded before windows were bounded, count the death of a previous attempt
 * left open, and open this attempt — counted and backed off first, so a process that dies
 * mid-fill leaves a gap that is not due at once.
 */

/** Before another try after `attempts` attempts: the fill ladder (1, 2, 4 … minutes, at most an hour). */
export function retryDelayMs(attempts: number): number {
  return ladderSeconds('fill', attempts) * 1000;
}

export type BeforeFill =
  /** The attempt is open: read the hours of this gap (re-read: it may have been split). */
  | { kind: 'opened'; gap: Gap }
  /** Split into bounded gaps; this one's hours are not all published yet. */
  | { kind: 'waiting'; gap: Gap; readyAt: Date }
  /** Given up before any work (`reason` is its last_error). */
  | { kind: 'unavailable'; gap: Gap; reason: string };

interface Ctx {
  db: Db;
  now: Date;
  log: Logger;
  label: string;
}

async function giveUp(c: Ctx, gap: Gap, reason: string, deaths?: number): Promise<BeforeFill> {
  await settleGap(c.db, Number(gap.id), {
    state: 'unavailable',
    eventsRecovered: await pushesRecovered(c.db, Number(gap.id)),
    lastError: reason,
    nextAttemptAt: c.now,
    now: c.now,
    ...(deaths === undefined ? {} : { deaths }),
  });
  c.log.warn(
    { event: 'gap.unavailable', reason, ...(deaths === undefined ? {} : { deaths }) },
    `gap ${gap.id} of source ${gap.source_id} (${c.label}) is unavailable: ${reason}`,
  );
  return { kind: 'unavailable', gap, reason };
}

export async function beforeFill(c: Ctx, found: Gap): Promise<BeforeFill> {
  let gap = found;
  const gapId = Number(gap.id);
  // Windows recorded before they were bounded: never trust the future, never read years.
  const problem = windowProblem(gap, c.now);
  if (problem === 'future') {
    return giveUp(
      c,
      gap,
      `window ends ${gap.to_at.toISOString()}, past the clock: recorded from a time that cannot be trusted; not filled`,
    );
  }
  if (problem === 'long') {
    const added = await splitGap(c.db, gap, c.now);
    gap = (await getGap(c.db, gapId))!;
    c.log.warn(
      {
        event: 'gap.split',
        gaps_added: added.map((g) => Number(g.id)),
        from_at: gap.from_at.toISOString(),
        to_at: gap.to_at.toISOString(),
      },
      `gap ${gapId} spanned more than 2 days: split into ${added.length + 1} gaps; this one is now ${gap.from_at.toISOString()} … ${gap.to_at.toISOString()}`,
    );
    const readyAt = gapReadyAt(gap);
    if (c.now < readyAt) return { kind: 'waiting', gap, readyAt };
  }

  // An attempt still open, found under the gap's lock (which died with its holder): the
  // process of the previous attempt died mid-fill — killed, or out of memory.
  const deaths = gap.fill_deaths + (gap.fill_started_at ? 1 : 0);
  if (gap.fill_started_at) {
    const hour = gap.fill_hour;
    c.log.warn(
      {
        event: 'gap.fill_died',
        deaths,
        attempts: gap.attempts,
        hour,
        attempt_started_at: gap.fill_started_at.toISOString(),
      },
      `gap ${gapId}: the fill started ${gap.fill_started_at.toISOString()} died before it ended${hour ? ` (importing ${hour})` : ''}: ${deaths} of ${MAX_DEATHS} deaths`,
    );
    if (deaths >= MAX_DEATHS) {
      return giveUp(
        c,
        gap,
        `the fill died ${deaths} times before it ended (killed, or out of memory)${hour ? `, last while importing archive hour ${hour}` : ''}; not retried`,
        deaths,
      );
    }
  }
  // Counted and backed off BEFORE the first byte: if this process dies mid-fill, the next
  // start finds the gap not due yet, and its attempt still open (a death).
  const attempt = gap.attempts + 1;
  const backoff = new Date(c.now.getTime() + retryDelayMs(attempt));
  await openAttempt(c.db, gapId, { deaths, nextAttemptAt: backoff, now: c.now });
  c.log.info(
    {
      event: 'gap.fill_started',
      attempt,
      deaths,
      // pino's `pid` names the process doing the fill (a child of bin/worker).
      next_attempt_at: backoff.toISOString(),
    },
    `gap ${gapId} of source ${gap.source_id} (${c.label}): fill attempt ${attempt} (pid ${process.pid}); if it dies, the next try is after ${backoff.toISOString()}`,
  );
  return { kind: 'opened', gap };
}
