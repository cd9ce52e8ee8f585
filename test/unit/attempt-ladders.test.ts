import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import {
  failedAttempt,
  LADDERS,
  type LadderName,
  ladderIntervalSql,
  ladderSeconds,
  ladderSql,
  MAX_DEATHS,
} from '../../src/platform/attempts.ts';
import { useTestDatabase } from '../support/db.ts';

/**
 * The one table of ladders and the one crash limit: each ladder's waits as the pipelines
 * have always climbed them, and the SQL twin (ladderSql) saying the same as ladderSeconds
 * for every count a column can hold, on Postgres.
 */

const t = useTestDatabase();
const minutes = (...m: number[]) => m.map((x) => x * 60);
const NAMES = Object.keys(LADDERS) as LadderName[];
// Below the first step, every step, and far past the last (a column that kept counting).
const COUNTS = [
  -3,
  0,
  ...Array.from({ length: 12 }, (_, i) => i + 1),
  20,
  63,
  64,
  1000,
  2 ** 31 - 1,
];

describe('the ladders', () => {
  it('polls wait 1, 2, 4 … 32 minutes, then an hour', () => {
    expect([1, 2, 3, 4, 5, 6, 7, 8, 20].map((n) => ladderSeconds('poll', n))).toEqual(
      minutes(1, 2, 4, 8, 16, 32, 60, 60, 60),
    );
  });

  it('entities and commits wait 1, 4, 16, 64, 256 minutes, then 6 hours', () => {
    for (const ladder of ['entity', 'commits'] as const) {
      expect([1, 2, 3, 4, 5, 6, 9].map((n) => ladderSeconds(ladder, n))).toEqual(
        minutes(1, 4, 16, 64, 256, 360, 360),
      );
    }
  });

  it('fills wait 1, 2, 4 … 32 minutes, then an hour', () => {
    expect([1, 2, 3, 4, 5, 6, 7, 30].map((n) => ladderSeconds('fill', n))).toEqual(
      minutes(1, 2, 4, 8, 16, 32, 60, 60),
    );
  });

  it('a credential rejected n times in a row is blocked 1, 5, 15, then 60 minutes', () => {
    expect([1, 2, 3, 4, 5, 50].map((n) => ladderSeconds('auth', n))).toEqual(
      minutes(1, 5, 15, 60, 60, 60),
    );
  });

  it('counts below one climb the first step, and the last step repeats', () => {
    for (const name of NAMES) {
      const steps = LADDERS[name];
      expect(ladderSeconds(name, 0)).toBe(steps[0]);
      expect(ladderSeconds(name, -1)).toBe(steps[0]);
      expect(ladderSeconds(name, 2 ** 31 - 1)).toBe(steps.at(-1));
      // Never shorter for another failure.
      expect([...steps].sort((a, b) => a - b)).toEqual([...steps]);
    }
  });

  it('a failed attempt counts, waits its step and is terminal at the limit', () => {
    const now = new Date('2026-12-05T03:00:00Z');
    expect(failedAttempt('entity', 2, now, 5)).toEqual({
      attempts: 3,
      terminal: false,
      nextAttemptAt: new Date(now.getTime() + 16 * 60_000),
    });
    expect(failedAttempt('commits', 4, now, 5)).toEqual({
      attempts: 5,
      terminal: true,
      nextAttemptAt: new Date(now.getTime() + 256 * 60_000),
    });
  });

  it('work that killed its process twice is set aside, whichever pipeline ran it', () => {
    expect(MAX_DEATHS).toBe(2);
  });
});

describe('the SQL twin', () => {
  it('says what ladderSeconds says, for every ladder and count', async () => {
    for (const name of NAMES) {
      const r = await sql<{ n: number; secs: number }>`
        SELECT n, ${ladderSql(name, sql`n`)} AS secs
        FROM unnest(${COUNTS}::int[]) AS n ORDER BY n`.execute(t.db);
      expect(
        r.rows.map((row) => [row.n, row.secs]),
        name,
      ).toEqual([...COUNTS].sort((a, b) => a - b).map((n) => [n, ladderSeconds(name, n)]));
    }
  });

  it('as an interval moves a timestamp by the same seconds', async () => {
    const at = new Date('2026-12-05T03:20:00Z');
    for (const name of NAMES) {
      for (const n of [1, 3, 1000]) {
        const r = await sql<{ next: Date }>`
          SELECT ${at}::timestamptz + ${ladderIntervalSql(name, sql`${n}::int`)} AS next`.execute(
          t.db,
        );
        expect(r.rows[0]!.next.getTime() - at.getTime(), `${name} ${n}`).toBe(
          ladderSeconds(name, n) * 1000,
        );
      }
    }
  });
});
