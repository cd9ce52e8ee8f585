import { describe, expect, it } from 'vitest';
import { backfillOutcome } from '../../src/jobs/handlers.ts';
import { hourCheck, parseHour } from '../../src/store/archive-hours.ts';
import {
  BEFORE_FEED_REASON,
  gapPieces,
  isPlausibleTime,
  MAX_GAP_WINDOW_MS,
  windowProblem,
} from '../../src/store/gaps.ts';

const now = new Date('2026-12-01T12:00:00Z');
const DAY = 86_400_000;
const at = (ms: number) => new Date(now.getTime() + ms);

describe('plausible time', () => {
  it('trusts the last 30 days up to 5 minutes past the clock, nothing else', () => {
    expect(isPlausibleTime(now, now)).toBe(true);
    expect(isPlausibleTime(at(5 * 60_000), now)).toBe(true);
    expect(isPlausibleTime(at(5 * 60_000 + 1), now)).toBe(false);
    expect(isPlausibleTime(at(-30 * DAY), now)).toBe(true);
    expect(isPlausibleTime(at(-30 * DAY - 1), now)).toBe(false);
    expect(isPlausibleTime(new Date('2099-12-31T00:00:00Z'), now)).toBe(false);
    expect(isPlausibleTime(new Date('2012-03-01T00:00:00Z'), now)).toBe(false);
  });
});

describe('gap windows', () => {
  it('keeps a window of up to 2 days whole', () => {
    expect(gapPieces(at(-2 * DAY), now, now)).toEqual([
      { from: at(-2 * DAY), to: now, state: 'open', reason: null },
    ]);
    expect(gapPieces(now, now, now)).toHaveLength(1);
  });

  it('cuts a longer one into contiguous pieces of at most 2 days', () => {
    const pieces = gapPieces(at(-5 * DAY - 1), at(-1000), now);
    expect(pieces.map((p) => [p.from, p.to])).toEqual([
      [at(-5 * DAY - 1), at(-3 * DAY - 1)],
      [at(-3 * DAY - 1), at(-DAY - 1)],
      [at(-DAY - 1), at(-1000)],
    ]);
    expect(pieces.every((p) => p.state === 'open')).toBe(true);
  });

  it('makes what lies before the feed’s 30 days one unavailable piece with the reason', () => {
    const pieces = gapPieces(new Date('2012-03-01T00:00:00Z'), at(-29 * DAY), now);
    expect(pieces[0]).toEqual({
      from: new Date('2012-03-01T00:00:00Z'),
      to: at(-30 * DAY),
      state: 'unavailable',
      reason: BEFORE_FEED_REASON,
    });
    expect(pieces.slice(1)).toEqual([
      { from: at(-30 * DAY), to: at(-29 * DAY), state: 'open', reason: null },
    ]);
    // Wholly before: one unavailable piece, nothing to fill.
    expect(gapPieces(at(-40 * DAY), at(-35 * DAY), now)).toEqual([
      { from: at(-40 * DAY), to: at(-35 * DAY), state: 'unavailable', reason: BEFORE_FEED_REASON },
    ]);
  });

  it('names what is wrong with a window recorded before they were bounded', () => {
    expect(windowProblem({ from_at: at(-DAY), to_at: now }, now)).toBeNull();
    expect(windowProblem({ from_at: at(-DAY), to_at: new Date('2099-12-31T00:00:00Z') }, now)).toBe(
      'future',
    );
    expect(windowProblem({ from_at: at(-MAX_GAP_WINDOW_MS - 1), to_at: now }, now)).toBe('long');
  });
});

describe('bin/backfill hour checks', () => {
  const check = (name: string) => hourCheck(parseHour(name)!, now);
  it('refuses hours in the future and hours not over yet', () => {
    expect(check('9999-01-01-1')).toEqual({
      refuse:
        'hour 9999-01-01-1 is in the future (it starts 9999-01-01T01:00:00.000Z); nothing fetched',
    });
    expect(check('2026-12-01-12')).toEqual({
      refuse:
        'hour 2026-12-01-12 is not over yet (GH Archive publishes it after 2026-12-01T13:15:00.000Z); nothing fetched',
    });
    expect(check('2026-12-01-11')).toBeNull();
  });

  it('warns on hours before GH Archive’s first (2011-02-12-0), and only those', () => {
    expect(check('2011-02-11-23')).toEqual({
      warn: "hour 2011-02-11-23 is before GH Archive's first hour (2011-02-12-0): data.gharchive.org has no file for it; asking the first mirror in GHARCHIVE_URL anyway",
    });
    expect(check('2011-02-12-0')).toBeNull();
  });

  it('says which mirror it asks instead (--mirror)', () => {
    expect(hourCheck(parseHour('2010-06-01-0')!, now, 'file:///data/mirror/')).toEqual({
      warn: "hour 2010-06-01-0 is before GH Archive's first hour (2011-02-12-0): data.gharchive.org has no file for it; asking file:///data/mirror/ anyway",
    });
  });
});

describe('the backfill job’s outcome', () => {
  const r = (outcome: string) => ({ outcome, eventsRecovered: 1 });
  it('says filled only when every gap it tried was', () => {
    expect(backfillOutcome([], false).outcome).toBe('nothing_due');
    expect(backfillOutcome([r('filled'), r('filled')], false).outcome).toBe('filled');
    expect(backfillOutcome([r('filled'), r('retry')], false).outcome).toBe('partial');
    expect(backfillOutcome([r('retry'), r('waiting')], false).outcome).toBe('not_filled');
    expect(backfillOutcome([r('filled'), r('interrupted')], false)).toMatchObject({
      outcome: 'interrupted',
      filled: 1,
      interrupted: 1,
      events_recovered: 2,
    });
    expect(backfillOutcome([], true).outcome).toBe('died');
  });
});
