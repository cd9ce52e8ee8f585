import type pg from 'pg';
import { systemClock } from '../platform/clock.ts';
import { LockSpace, tryLockSession, unlockSession } from '../platform/db/locks.ts';
import type { Gap } from '../platform/db/schema.ts';
import {
  type ArchiveHour,
  gapHours,
  gapReadyAt,
  parseHour,
  retryWindowEnd,
} from '../store/archive-hours.ts';
import { windowProblem } from '../store/gaps.ts';
import { describeSource, getSource } from '../store/sources.ts';
import type { Deps } from '../work/deps.ts';
import { archiveHourSource, downloadOptions, type HttpOptions } from './archive.ts';
import { scopeOf } from './events.ts';
import { beforeFill, retryDelayMs } from './fill-attempt.ts';
import {
  closeAttempt,
  dueGaps,
  getGap,
  knownRepoId,
  noteFillHour,
  openGaps,
  pushesRecovered,
  settleGap,
} from './gaps.ts';
import { importFile } from './import.ts';
import type { ImportProgress, ImportResult } from './import-types.ts';
import {
  type LateMirrorHour,
  lateMirrorHours,
  type MirrorHourRow,
  mirrorHours,
} from './mirror-hours.ts';

/**
 * Filling a gap from GH Archive (ADR 0041): the hours covering [from_at − 1 h, to_at + 2 h]
 * are imported one after the other, keeping the source's pushes created inside the window.
 * Each hour is a checkpointed import (scope `gap:<id>`), so an attempt that fails half-way
 * keeps what it read and the next attempt only reads what is left. Downloads are plain
 * HTTP GETs of public files: they never pass the request gate or the GitHub budget.
 *
 * One fill of a gap at a time (a session advisory lock); the worker runs fills from the
 * stately `backfill` queue, so a deployment downloads one file at a time.
 */

export type GapOutcome =
  | 'filled'
  | 'waiting'
  | 'retry'
  | 'unavailable'
  | 'busy'
  | 'interrupted'
  | 'not_open'
  /** A filled gap: a mirror that lacked one of its hours was asked again (docs/mirrors.md). */
  | 'mirror_retried';

/** One hour of a gap read from one mirror in this attempt. */
export interface HourResult {
  hour: string;
  mirror: string;
  outcome: ImportResult['outcome'];
  created: number;
  error: string | null;
}

export interface GapFillResult {
  gapId: number;
  sourceId: number;
  source: string;
  fromAt: Date;
  toAt: Date;
  outcome: GapOutcome;
  eventsRecovered: number;
  hours: HourResult[];
  /** Per mirror and hour: imported, missing, pushes added (every attempt so far). */
  mirrors: MirrorHourRow[];
  /** When the fill may run (waiting) or try again (retry). */
  nextAttemptAt: Date | null;
  error: string | null;
}

export type FillDeps = Pick<Deps, 'config' | 'db' | 'pool' | 'logger' | 'workerId' | 'clock'>;

export interface FillOptions {
  signal?: AbortSignal;
  http?: HttpOptions;
  onProgress?: (gap: Gap, hour: ArchiveHour, p: ImportProgress) => void;
}

function resultOf(gap: Gap, source: string, outcome: GapOutcome): GapFillResult {
  return {
    gapId: Number(gap.id),
    sourceId: Number(gap.source_id),
    source,
    fromAt: gap.from_at,
    toAt: gap.to_at,
    outcome,
    eventsRecovered: gap.events_recovered,
    hours: [],
    mirrors: [],
    nextAttemptAt: null,
    error: null,
  };
}

/**
 * One attempt at a gap. Waits for nothing: an unpublished hour is `waiting`, a gap another
 * process is filling is `busy`.
 */
export async function fillGap(
  deps: FillDeps,
  gapId: number,
  opts: FillOptions = {},
): Promise<GapFillResult> {
  const clock = deps.clock ?? systemClock;
  const gap = await getGap(deps.db, gapId);
  if (!gap) throw new Error(`gap ${gapId} does not exist`);
  const source = await getSource(deps.db, Number(gap.source_id));
  const label = describeSource(source);
  if (gap.state !== 'open') return resultOf(gap, label, 'not_open');
  const ready = gapReadyAt(gap);
  // A window ending past the clock is never ready: it is settled under the lock instead.
  if (clock.now() < ready && windowProblem(gap, clock.now()) !== 'future') {
    return { ...resultOf(gap, label, 'waiting'), nextAttemptAt: ready };
  }

  const client = await deps.pool.connect();
  let broken: Error | undefined;
  const attempt = { opened: false };
  try {
    if (!(await tryLockSession(client, LockSpace.gap, gapId))) return resultOf(gap, label, 'busy');
    try {
      return await fillLocked(deps, gapId, label, opts, client, attempt);
    } catch (err) {
      // An error is not a death: the attempt stays counted with its backoff, but closed.
      if (attempt.opened) {
        await closeAttempt(deps.db, gapId, { uncount: false, now: clock.now() }).catch(() => {});
      }
      throw err;
    } finally {
      await unlockSession(client, LockSpace.gap, gapId).catch((err: Error) => {
        broken = err;
      });
    }
  } catch (err) {
    broken ??= err as Error;
    throw err;
  } finally {
    client.release(broken);
  }
}

async function fillLocked(
  deps: FillDeps,
  gapId: number,
  label: string,
  opts: FillOptions,
  client: pg.ClientBase,
  attempt: { opened: boolean },
): Promise<GapFillResult> {
  const clock = deps.clock ?? systemClock;
  // Re-read under the lock: another process may have settled it meanwhile.
  const found = (await getGap(deps.db, gapId))!;
  if (found.state !== 'open') return resultOf(found, label, 'not_open');
  const source = await getSource(deps.db, Number(found.source_id));
  const inScope = scopeOf(source, await knownRepoId(deps.db, source));
  const log = deps.logger.child({ gap_id: gapId, source_id: Number(found.source_id) });
  // Bounded windows, deaths counted, the attempt opened before any work (fill-attempt.ts).
  const before = await beforeFill({ db: deps.db, now: clock.now(), log, label }, found);
  const gap = before.gap;
  if (before.kind === 'waiting') {
    return { ...resultOf(gap, label, 'waiting'), nextAttemptAt: before.readyAt };
  }
  if (before.kind === 'unavailable') {
    return { ...resultOf(gap, label, 'unavailable'), error: before.reason };
  }
  attempt.opened = true;
  const result = resultOf(gap, label, 'retry');
  const hourCount = gapHours(gap).length;
  const failed: { hour: ArchiveHour; import: ImportResult }[] = [];
  const interruptedAny: ImportResult[] = [];
  const target = {
    scope: `gap:${gapId}`,
    sourceId: Number(gap.source_id),
    gapId,
    inScope,
    window: { from: gap.from_at, to: gap.to_at },
  };

  // Every hour from every mirror (docs/mirrors.md): each archive misses different events,
  // and the natural key stores what two of them hold once. An hour is read as soon as one
  // mirror has it; the others' failures do not hold the gap open (they are retried later,
  // see fillLateMirrors). Downloads are bounded (minimum rate, deadline), so a stalling
  // mirror costs at most its deadline before the next mirror is read.
  for (const hour of gapHours(gap)) {
    if (opts.signal?.aborted) break;
    await noteFillHour(deps.db, gapId, hour.name);
    const misses: ImportResult[] = [];
    for (const mirror of deps.config.archive.mirrors) {
      if (opts.signal?.aborted) break;
      const source = archiveHourSource(mirror, hour, {
        ...downloadOptions(deps.config),
        ...opts.http,
      });
      const imported = await importFile(deps, source, target, {
        client,
        signal: opts.signal,
        onProgress: opts.onProgress && ((p) => opts.onProgress!(gap, hour, p)),
      });
      result.hours.push({
        hour: hour.name,
        mirror: source.mirror,
        outcome: imported.outcome,
        created: imported.counts.created,
        error: imported.error?.message ?? null,
      });
      if (imported.outcome === 'interrupted') interruptedAny.push(imported);
      if (imported.outcome !== 'completed' && imported.outcome !== 'already_imported') {
        misses.push(imported);
      }
    }
    const read = result.hours.some(
      (h) =>
        h.hour === hour.name && (h.outcome === 'completed' || h.outcome === 'already_imported'),
    );
    if (!read) {
      // The hour is not read from any mirror: the gap waits on it. The error kept is the
      // last mirror's (a 404 everywhere says "missing"; any other failure says why).
      const last = misses.at(-1);
      if (last) failed.push({ hour, import: last });
    }
  }

  const now = clock.now();
  const recovered = await pushesRecovered(deps.db, gapId);
  result.eventsRecovered = recovered;
  const interrupted = opts.signal?.aborted || interruptedAny.length > 0;
  if (interrupted) {
    // Stopping is not a failed attempt: the checkpoints keep what was read; resume soon.
    await closeAttempt(deps.db, gapId, {
      eventsRecovered: recovered,
      uncount: true,
      nextAttemptAt: now,
      now,
    });
    result.outcome = 'interrupted';
    result.nextAttemptAt = now;
    result.mirrors = await mirrorHours(deps.db, gapId);
    return result;
  }

  if (failed.length === 0) {
    await settleGap(deps.db, gapId, {
      state: 'filled',
      eventsRecovered: recovered,
      lastError: null,
      nextAttemptAt: now,
      now,
    });
    result.outcome = 'filled';
    result.mirrors = await mirrorHours(deps.db, gapId);
    log.info(
      {
        event: 'gap.filled',
        events_recovered: recovered,
        from_at: gap.from_at.toISOString(),
        to_at: gap.to_at.toISOString(),
        hours: hourCount,
        mirrors: deps.config.archive.mirrors.length,
      },
      `gap ${gapId} of source ${gap.source_id} (${label}) filled: ${recovered} pushes recovered from ${hourCount} archive hours`,
    );
    return result;
  }

  const reasons = failed.map(
    (f) => `${f.hour.name}: ${f.import.error?.message ?? f.import.outcome}`,
  );
  result.error = reasons.join('; ');
  // Missing for good: every hour that still fails (or that its only mirrors still call open)
  // ended more than 48 h ago: past its retry window.
  const givenUp = failed.every(
    (f) =>
      (f.import.outcome === 'failed' || f.import.outcome === 'open') &&
      now.getTime() >= retryWindowEnd(f.hour).getTime(),
  );
  if (givenUp) {
    const lastError = `archive hours unavailable 48 h after they ended: ${result.error}`;
    await settleGap(deps.db, gapId, {
      state: 'unavailable',
      eventsRecovered: recovered,
      lastError,
      nextAttemptAt: now,
      now,
    });
    result.outcome = 'unavailable';
    result.error = lastError;
    result.mirrors = await mirrorHours(deps.db, gapId);
    log.warn(
      { event: 'gap.unavailable', events_recovered: recovered, reason: lastError },
      `gap ${gapId} of source ${gap.source_id} (${label}) is unavailable: ${lastError}`,
    );
    return result;
  }
  const next = new Date(now.getTime() + retryDelayMs(gap.attempts + 1));
  await settleGap(deps.db, gapId, {
    state: 'open',
    eventsRecovered: recovered,
    lastError: result.error,
    nextAttemptAt: next,
    now,
  });
  result.nextAttemptAt = next;
  result.mirrors = await mirrorHours(deps.db, gapId);
  log.warn(
    {
      event: 'gap.fill_failed',
      events_recovered: recovered,
      attempts: gap.attempts + 1,
      next_attempt_at: next.toISOString(),
      reason: result.error,
    },
    `gap ${gapId} of source ${gap.source_id} (${label}): ${result.error}; next try ${next.toISOString()}`,
  );
  return result;
}

/**
 * Asks a mirror again for an hour of a filled gap it lacked (missing or failing then), until
 * the hour's retry window ends: what it holds that the others did not is stored, and counted
 * on the gap.
 */
async function retryMirrorHour(
  deps: FillDeps,
  late: LateMirrorHour,
  opts: FillOptions,
): Promise<GapFillResult | null> {
  const gap = await getGap(deps.db, late.gapId);
  const hour = parseHour(late.hour);
  if (gap?.state !== 'filled' || !hour) return null;
  const source = await getSource(deps.db, Number(gap.source_id));
  const label = describeSource(source);
  const client = await deps.pool.connect();
  let broken: Error | undefined;
  try {
    if (!(await tryLockSession(client, LockSpace.gap, late.gapId))) {
      return resultOf(gap, label, 'busy');
    }
    try {
      const hourSource = archiveHourSource(late.mirror, hour, {
        ...downloadOptions(deps.config),
        ...opts.http,
      });
      const imported = await importFile(
        deps,
        hourSource,
        {
          scope: `gap:${late.gapId}`,
          sourceId: Number(gap.source_id),
          gapId: late.gapId,
          inScope: scopeOf(source, await knownRepoId(deps.db, source)),
          window: { from: gap.from_at, to: gap.to_at },
        },
        { client, signal: opts.signal },
      );
      const recovered = await pushesRecovered(deps.db, late.gapId);
      const now = (deps.clock ?? systemClock).now();
      await deps.db
        .updateTable('gaps')
        .set({ events_recovered: recovered, updated_at: now })
        .where('id', '=', String(late.gapId))
        .execute();
      const result = resultOf({ ...gap, events_recovered: recovered }, label, 'mirror_retried');
      result.hours.push({
        hour: hour.name,
        mirror: hourSource.mirror,
        outcome: imported.outcome,
        created: imported.counts.created,
        error: imported.error?.message ?? null,
      });
      result.mirrors = await mirrorHours(deps.db, late.gapId);
      if (imported.counts.created > 0) {
        deps.logger.info(
          {
            event: 'gap.mirror_added',
            gap_id: late.gapId,
            source_id: Number(gap.source_id),
            mirror: hourSource.mirror,
            hour: hour.name,
            pushes_added: imported.counts.created,
            events_recovered: recovered,
          },
          `gap ${late.gapId}: ${hourSource.mirror} now has ${hour.name}: ${imported.counts.created} more pushes (${recovered} in all)`,
        );
      }
      return result;
    } finally {
      await unlockSession(client, LockSpace.gap, late.gapId).catch((err: Error) => {
        broken = err;
      });
    }
  } catch (err) {
    broken ??= err as Error;
    throw err;
  } finally {
    client.release(broken);
  }
}

export interface FillPassOptions extends FillOptions {
  /** Checked between gaps. */
  shouldStop?: () => boolean;
  /** Gaps looked at in one pass (the rest wait for the next). */
  limit?: number;
  /** bin/backfill --gaps: every open gap whose hours are published, backoff or not. */
  ignoreBackoff?: boolean;
  onGap?: (r: GapFillResult) => void;
}

/**
 * One pass over the gaps that are due (the worker's `backfill` job, `bin/backfill --gaps`).
 * Gaps are filled one after the other: one download at a time.
 */
export async function fillGaps(
  deps: FillDeps,
  opts: FillPassOptions = {},
): Promise<GapFillResult[]> {
  const now = (deps.clock ?? systemClock).now();
  const gaps = opts.ignoreBackoff
    ? await openGaps(deps.db)
    : await dueGaps(deps.db, now, opts.limit ?? 20);
  const results: GapFillResult[] = [];
  for (const gap of gaps) {
    if (opts.shouldStop?.() || opts.signal?.aborted) break;
    const r = await fillGap(deps, Number(gap.id), opts);
    results.push(r);
    opts.onGap?.(r);
  }
  // Then the hours of filled gaps a mirror lacked: never before an open gap's fill.
  const late = await lateMirrorHours(deps.db, now, deps.config.archive.mirrors, opts.limit ?? 20);
  for (const hour of late) {
    if (opts.shouldStop?.() || opts.signal?.aborted) break;
    const r = await retryMirrorHour(deps, hour, opts);
    if (!r) continue;
    results.push(r);
    opts.onGap?.(r);
  }
  return results;
}
