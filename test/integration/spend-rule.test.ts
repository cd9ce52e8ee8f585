import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { allowsSql, decide } from '../../src/budget/spend-rule.ts';
import type { StateRow } from '../../src/budget/window.ts';
import type { RequestPurpose } from '../../src/platform/db/columns.ts';
import { useTestDatabase } from '../support/db.ts';

/**
 * The spend rule is one table read two ways (ADR 0190): compiled into the reservation's SQL
 * and evaluated in TypeScript to explain a refusal. Postgres, not a copy of its rules, says
 * what the SQL reader decides: on rows at every edge (NULLs, a spent allowance to the point, a
 * block ending now, a whole window), the statement allows exactly where decide() says null.
 */

const t = useTestDatabase();
const now = new Date('2026-06-01T12:00:00Z');

function row(o: Partial<StateRow>): StateRow {
  return {
    credential: 'token:rule',
    ord: 0,
    rl_quota: null,
    rl_remaining: null,
    reset_at: null,
    blocked_until: null,
    block_reason: null,
    auth_failures: null,
    observed_at: null,
    quota: 5000,
    window_start: new Date(now.getTime() - 1800_000),
    window_end: new Date(now.getTime() + 1800_000),
    poll: 0,
    enrich: 0,
    commits: 0,
    since_observation: 0,
    open: 0,
    oldest_poll: null,
    oldest_background: null,
    oldest_any: null,
    remaining: null,
    ...o,
  };
}

/** What the SQL reader says of one row: the rule's WHERE over a VALUES row named `st`. */
async function sqlAllows(
  r: StateRow,
  purpose: RequestPurpose,
  share: number,
  points: number,
): Promise<boolean> {
  const q = await sql<{ ok: boolean }>`
    SELECT ${allowsSql(purpose, share, now, points)} AS ok
    FROM (VALUES (${r.blocked_until}::timestamptz, ${r.remaining}::int, ${r.quota}::int,
                  ${r.poll}::int, ${r.enrich}::int, ${r.commits}::int))
      AS st (blocked_until, remaining, quota, poll, enrich, commits)`.execute(t.db);
  return q.rows[0]!.ok === true;
}

describe('the spend rule', () => {
  it('the statement and decide() agree on every edge of every check', async () => {
    const at = (ms: number) => new Date(now.getTime() + ms);
    const rows: Partial<StateRow>[] = [];
    for (const blocked_until of [null, at(-1), at(0), at(1)]) {
      for (const remaining of [null, -3, 0, 1, 2, 3, 4000]) {
        for (const [poll, enrich, commits] of [
          [0, 0, 0],
          [1666, 0, 0],
          [1667, 0, 0],
          [0, 3332, 0],
          [0, 1666, 1666],
          [0, 1667, 1666],
          [5000, 5000, 5000],
        ] as const) {
          rows.push({ blocked_until, remaining, poll, enrich, commits, quota: 5000 });
        }
      }
    }
    let checked = 0;
    let refused = 0;
    for (const o of rows) {
      const seen = o.remaining !== null || o.blocked_until !== null;
      const r = row({
        ...o,
        // A rate-limit row: GitHub answered once (its remaining), or a block was written.
        ...(seen ? { rl_quota: 5000, reset_at: at(1800_000), observed_at: now } : {}),
      });
      for (const purpose of ['poll', 'enrich', 'commits'] as const) {
        for (const [share, points] of [
          [2 / 3, 1],
          [1, 1],
          [1, 3],
          [0.5, 2],
        ] as const) {
          const no = decide(r, share, purpose, now, points);
          expect(
            await sqlAllows(r, purpose, share, points),
            `${purpose} share ${share} points ${points} ${JSON.stringify(o)}: ${no?.reason}`,
          ).toBe(no === null);
          checked++;
          if (no) refused++;
        }
      }
    }
    // Both answers are exercised, every reason among the refusals.
    expect(checked).toBe(rows.length * 12);
    expect(refused).toBeGreaterThan(0);
    expect(refused).toBeLessThan(checked);
  });

  it('a refusal names the first check that fails: blocked, then remaining, then allowance', () => {
    const blocked = new Date(now.getTime() + 60_000);
    const spent = {
      poll: 1667,
      remaining: 0,
      blocked_until: blocked,
      block_reason: 'auth' as const,
    };
    expect(decide(row(spent), 2 / 3, 'poll', now)).toMatchObject({
      reason: 'blocked',
      retryAt: blocked,
      blockReason: 'auth',
    });
    expect(decide(row({ ...spent, blocked_until: null }), 2 / 3, 'poll', now)?.reason).toBe(
      'remaining',
    );
    expect(decide(row({ poll: 1667 }), 2 / 3, 'poll', now)?.reason).toBe('allowance');
    expect(decide(row({ poll: 1667 }), 2 / 3, 'enrich', now)).toBeNull();
  });
});
