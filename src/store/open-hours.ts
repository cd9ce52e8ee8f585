import { type ArchiveHour, hourEnd, PUBLISH_DELAY_MS } from './archive-hours.ts';
import { type ImportHold, importHolds, type Query } from './open-imports.ts';

/**
 * When an hour of the store is open — its file may still change — and why (ADR 0185). The
 * reasons, each of them read in the snapshot the file is served from:
 *
 * - `importing`: an archive import (bin/backfill, or a gap's fill) is writing into it now.
 *   /archive answers 503 with Retry-After: the hour changes by a chunk a second.
 * - `incomplete`: an import into it stopped part-way and was not completed since (run
 *   bin/backfill again: it resumes).
 * - `gap`: a gap recorded by a poll overlaps it, and its fill has not read every archive
 *   hour yet.
 * - `settling`: it ended less than PUBLISH_DELAY_MS ago: webhooks and the last polls still
 *   bring its pushes (GH Archive publishes an hour about as late).
 * - `commits_pending`: pushes of it wait for their commits. Its pushes are all there: only
 *   their lines will gain `size` and `commits`.
 *
 * The first four say pushes may still be added: a reader (another instance's backfill) keeps
 * what it read but does not take the hour as final (pushesFinal). Beyond them the store
 * cannot know: a push the Events API delivers hours late, or a webhook redelivered by hand,
 * still lands in an hour that was final, as it would on GH Archive.
 */

export const OPEN_REASONS = [
  'importing',
  'incomplete',
  'gap',
  'settling',
  'commits_pending',
] as const;
export type OpenReason = (typeof OPEN_REASONS)[number];

/** The response header of an hour file that lists its open reasons (absent: final). */
export const HOUR_OPEN_HEADER = 'archive-hour-open';

/** How long after its end an hour is `settling`: as long as GH Archive takes to publish one. */
export const SETTLE_MS = PUBLISH_DELAY_MS;

/** Seconds an `importing` hour's reader is asked to wait (a chunk of 5,000 pushes is ~1 s). */
export const IMPORTING_RETRY_AFTER_SECONDS = 60;

/**
 * Whether a reader may take the hour's pushes as final: none of the reasons says pushes may
 * still be added. A reason this version does not know counts as one that does.
 */
export function pushesFinal(reasons: readonly string[]): boolean {
  return reasons.every((r) => r === 'commits_pending');
}

/** The header's value as reasons: comma-separated, bounded, unknown ones kept as they are. */
export function parseOpenHeader(value: string | string[] | undefined): string[] {
  if (value === undefined) return [];
  const text = (Array.isArray(value) ? value.join(',') : value).slice(0, 200);
  return text
    .split(',')
    .map((r) => r.trim().toLowerCase())
    .filter((r) => /^[a-z_]{1,40}$/.test(r));
}

const HOUR_MS = 3_600_000;

/**
 * Per hour of [from, to) (by its start, ms), the reasons it is open — all but
 * commits_pending, which the caller knows from the rows it counts or the file it serves.
 */
export async function openReasonsBetween(
  run: Query,
  from: Date,
  to: Date,
  now: Date,
): Promise<Map<number, OpenReason[]>> {
  const out = new Map<number, OpenReason[]>();
  const add = (t: number, r: OpenReason) => {
    const list = out.get(t) ?? [];
    if (!list.includes(r)) list.push(r);
    out.set(t, list);
  };
  const holds: Map<number, ImportHold> = await importHolds(run, from, to);
  for (const [t, hold] of holds) add(t, hold);
  const gaps = await run<{ hour: Date }>(
    `SELECT DISTINCT h AS hour
     FROM gaps, generate_series(date_trunc('hour', greatest(gaps.from_at, $1::timestamptz), 'UTC'),
                                least(gaps.to_at, $2::timestamptz), interval '1 hour') AS h
     WHERE gaps.state = 'open' AND gaps.to_at >= $1::timestamptz AND gaps.from_at < $2::timestamptz
       AND h < $2::timestamptz`,
    [from, to],
  );
  for (const g of gaps) add(g.hour.getTime(), 'gap');
  for (let t = from.getTime(); t < to.getTime(); t += HOUR_MS) {
    if (t + HOUR_MS + SETTLE_MS > now.getTime() && t + HOUR_MS <= now.getTime()) add(t, 'settling');
  }
  for (const list of out.values())
    list.sort((a, b) => OPEN_REASONS.indexOf(a) - OPEN_REASONS.indexOf(b));
  return out;
}

/** The reasons one hour is open (commits_pending aside), in `run`'s snapshot. */
export async function hourOpenReasons(
  run: Query,
  hour: ArchiveHour,
  now: Date,
): Promise<OpenReason[]> {
  const all = await openReasonsBetween(run, hour.start, hourEnd(hour), now);
  return all.get(hour.start.getTime()) ?? [];
}

/** The reasons in their canonical order, commits_pending added when `pending` > 0. */
export function withPending(reasons: readonly OpenReason[], pending: number): OpenReason[] {
  const all: OpenReason[] = pending > 0 ? [...reasons, 'commits_pending'] : [...reasons];
  return all.sort((a, b) => OPEN_REASONS.indexOf(a) - OPEN_REASONS.indexOf(b));
}
