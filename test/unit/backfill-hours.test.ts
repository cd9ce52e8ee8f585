import { describe, expect, it } from 'vitest';
import {
  gapHours,
  gapReadyAt,
  hourFileName,
  hourOf,
  hoursCovering,
  parseHour,
  publishedAt,
  retryWindowEnd,
} from '../../src/store/archive-hours.ts';

describe('GH Archive hours', () => {
  it('parses GH Archive names (hour not zero-padded; a padded one is accepted)', () => {
    expect(parseHour('2025-01-01-15')).toEqual({
      name: '2025-01-01-15',
      start: new Date('2025-01-01T15:00:00Z'),
    });
    expect(parseHour('2025-01-01-0')?.name).toBe('2025-01-01-0');
    expect(parseHour('2025-01-01-05')?.name).toBe('2025-01-01-5');
    expect(parseHour('2024-02-29-23')?.start).toEqual(new Date('2024-02-29T23:00:00Z'));
  });

  it.each([
    '2025-01-01-24',
    '2025-02-30-1',
    '2023-02-29-1',
    '2025-13-01-1',
    '2025-1-1-1',
    '2025-01-01',
    '2025-01-01-1.json.gz',
    '',
  ])('refuses %j', (raw) => {
    expect(parseHour(raw)).toBeNull();
  });

  it('names the hour containing an instant, and its file', () => {
    const h = hourOf(new Date('2026-03-04T07:59:59.999Z'));
    expect(h).toEqual({ name: '2026-03-04-7', start: new Date('2026-03-04T07:00:00Z') });
    expect(hourFileName(h)).toBe('2026-03-04-7.json.gz');
    expect(publishedAt(h)).toEqual(new Date('2026-03-04T08:15:00Z'));
    expect(retryWindowEnd(h)).toEqual(new Date('2026-03-06T08:00:00Z'));
  });

  it('covers a window with every hour it touches, across midnight', () => {
    const names = hoursCovering(
      new Date('2026-03-04T22:30:00Z'),
      new Date('2026-03-05T01:00:00Z'),
    ).map((h) => h.name);
    expect(names).toEqual(['2026-03-04-22', '2026-03-04-23', '2026-03-05-0', '2026-03-05-1']);
  });

  it('reads a gap from one hour before to two after (crawl-time filing) and waits for the last', () => {
    const gap = {
      from_at: new Date('2026-03-04T10:09:00Z'),
      to_at: new Date('2026-03-04T10:23:00Z'),
    };
    expect(gapHours(gap).map((h) => h.name)).toEqual([
      '2026-03-04-9',
      '2026-03-04-10',
      '2026-03-04-11',
      '2026-03-04-12',
    ]);
    expect(gapReadyAt(gap)).toEqual(new Date('2026-03-04T13:15:00Z'));
  });
});
