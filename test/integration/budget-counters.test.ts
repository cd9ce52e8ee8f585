import fc from 'fast-check';
import { sql } from 'kysely';
import { beforeEach, describe, expect, it } from 'vitest';
import {
  releaseReservation,
  SPENDS_QUOTA,
  settle,
  settleAbandonedReservations,
} from '../../src/budget/ledger.ts';
import { reserve } from '../../src/budget/reserve.ts';
import {
  type BudgetPolicy,
  budgetStateStatement,
  type CredentialPolicy,
  type StateRow,
  windowFloor,
  windowStartSql,
} from '../../src/budget/window.ts';
import { pruneLedgers } from '../../src/jobs/prune.ts';
import { int4Key } from '../../src/platform/db/locks.ts';
import { useTestDatabase } from '../support/db.ts';

/**
 * The budget reads per-minute counters (github_request_minutes, kept by triggers on the
 * ledger, ADR 0083) instead of counting every row of its window. It must give exactly what
 * the count gave: random sequences of ledger operations, through the real functions where
 * there is one, then the state from budgetStateStatement against the state from the old
 * counting SQL (kept below as the oracle), for several `now`s, with and without a
 * rate-limit row, fresh and past its reset.
 */

const t = useTestDatabase();

beforeEach(async () => {
  await sql`TRUNCATE github_requests, github_rate_limits`.execute(t.db);
});

/** The budget CTEs before the counters (src/budget/window.ts up to ADR 0083): the oracle. */
function oracleStatement(creds: readonly CredentialPolicy[], now: Date) {
  const rows = creds.map(
    (c, i) => sql`(${c.label}::text, ${c.defaultQuota}::int, ${i}::int, ${int4Key(c.label)}::int)`,
  );
  return sql<StateRow>`WITH
    creds (credential, default_quota, ord, lock_key) AS (VALUES ${sql.join(rows)}),
    w AS (
      SELECT creds.credential, creds.ord, creds.lock_key,
        rl.quota AS rl_quota, rl.remaining AS rl_remaining, rl.reset_at,
        rl.blocked_until, rl.block_reason, rl.auth_failures, rl.observed_at,
        COALESCE(rl.reset_at > ${now}::timestamptz, false) AS fresh,
        COALESCE(rl.quota, creds.default_quota) AS quota,
        ${windowStartSql(now)} AS window_start
      FROM creds LEFT JOIN github_rate_limits rl ON rl.credential = creds.credential
    ),
    c AS (
      SELECT w.credential, n.* FROM w CROSS JOIN LATERAL (
        SELECT
          count(*) FILTER (WHERE purpose = 'poll')::int AS poll,
          count(*) FILTER (WHERE purpose = 'enrich')::int AS enrich,
          count(*) FILTER (WHERE purpose = 'commits')::int AS commits,
          count(*) FILTER (
            WHERE finished_at IS NULL
               OR finished_at > CASE WHEN w.fresh THEN w.observed_at ELSE '-infinity' END
          )::int AS since_observation,
          count(*) FILTER (WHERE finished_at IS NULL)::int AS open,
          min(reserved_at) FILTER (WHERE purpose = 'poll') AS oldest_poll,
          min(reserved_at) FILTER (WHERE purpose <> 'poll') AS oldest_background,
          min(reserved_at) AS oldest_any
        FROM github_requests g
        WHERE g.credential = w.credential AND g.reserved_at >= w.window_start
          AND g.reserved_at >= ${windowFloor(now)}::timestamptz
          AND ${SPENDS_QUOTA}
      ) n
    ),
    st AS (
      SELECT w.credential, w.ord, w.lock_key, w.rl_quota, w.rl_remaining, w.reset_at,
        w.blocked_until, w.block_reason, w.auth_failures, w.observed_at, w.quota, w.window_start,
        CASE WHEN w.fresh THEN w.reset_at ELSE w.window_start + make_interval(secs => 3600) END
          AS window_end,
        c.poll, c.enrich, c.commits, c.since_observation, c.open, c.oldest_poll, c.oldest_background,
        c.oldest_any,
        CASE WHEN w.rl_quota IS NULL THEN NULL
             WHEN w.fresh THEN w.rl_remaining - c.since_observation
             ELSE w.quota - c.since_observation END AS remaining
      FROM w JOIN c ON c.credential = w.credential
    )
    SELECT * FROM st ORDER BY ord`;
}

const A: CredentialPolicy = { label: 'token:a', defaultQuota: 40 };
const B: CredentialPolicy = { label: 'token:b', defaultQuota: 100_000 };
/** Never written to: a window with nothing in it. */
const EMPTY: CredentialPolicy = { label: 'token:empty', defaultQuota: 60 };
const CREDS = [A, B, EMPTY];
const POLICIES: BudgetPolicy[] = [
  { credentials: [A], share: 2 / 3 },
  { credentials: [B], share: 2 / 3 },
  { credentials: [A, B], share: 2 / 3 },
];
const PURPOSES = ['poll', 'enrich', 'commits'] as const;

/**
 * The clock: the operations happen within ±100 minutes of T0, at millisecond offsets (so
 * windows start anywhere in a minute). T0 is near the database's clock, which the sweep reads.
 */
const T0 = new Date(Math.floor(Date.now() / 60_000) * 60_000 - 23_457);
const at = (ms: number) => new Date(T0.getTime() + ms);

/** The `now`s each sequence is read at: in the middle of it, at its end, after it, off-minute. */
const NOWS = [at(-30 * 60_000), at(0), at(3 * 60_000 + 17_321), at(-61 * 60_000 + 999)];
/** Resets (seconds from T0) the rate-limit rows mostly take, so that windows start where rows are. */
const RESETS = [-600, 0, 900, 1800, 3599];
/** Where windows start: an hour before each `now`; 61 minutes before each reset. */
const EDGES = [
  ...NOWS.map((n) => n.getTime() - T0.getTime() - 3600_000),
  ...RESETS.map((r) => r * 1000 - 3660_000),
];
/** A time: anywhere within ±100 minutes of T0, or within 90 s of where a window starts. */
const offset = fc.oneof(
  fc.integer({ min: -100 * 60_000, max: 5 * 60_000 }),
  fc
    .tuple(fc.constantFrom(...EDGES), fc.integer({ min: -90_000, max: 90_000 }))
    .map(([edge, d]) => edge + d),
);
const nowOffset = fc.integer({ min: -40 * 60_000, max: 5 * 60_000 });
const resetIn = fc.oneof(fc.constantFrom(...RESETS), fc.integer({ min: -1800, max: 3600 }));

type Op =
  | { op: 'reserve'; policy: number; purpose: (typeof PURPOSES)[number]; at: number }
  | { op: 'release'; pick: number; after: number }
  | { op: 'send'; pick: number }
  | {
      op: 'settle';
      pick: number;
      answer: '304' | '200' | 'no answer' | 'not reached';
      after: number;
      rateLimit: null | { remaining: number; resetIn: number };
    }
  | { op: 'sweep'; olderThanSeconds: number }
  | { op: 'move'; pick: number; by: number }
  | { op: 'prune'; retentionMinutes: number; at: number }
  | { op: 'delete'; cutoff: number }
  | {
      op: 'raw';
      cred: number;
      purpose: (typeof PURPOSES)[number];
      at: number;
      outcome: 'reserved' | 'sent' | 'completed' | 'error' | 'abandoned';
      counted: boolean | null;
      sent: boolean;
      finished: null | number | '-infinity';
    }
  | { op: 'rateLimit'; cred: number; resetIn: number; observedAgo: number; remaining: number }
  | { op: 'forget'; cred: number };

const pick = fc.nat({ max: 1000 });
const opArb: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({
      op: fc.constant('reserve' as const),
      policy: fc.nat({ max: POLICIES.length - 1 }),
      purpose: fc.constantFrom(...PURPOSES),
      at: offset,
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      op: fc.constant('release' as const),
      pick,
      after: fc.integer({ min: 0, max: 5000 }),
    }),
  },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('send' as const), pick }) },
  {
    weight: 4,
    arbitrary: fc.record({
      op: fc.constant('settle' as const),
      pick,
      answer: fc.constantFrom('304', '200', 'no answer', 'not reached'),
      after: fc.integer({ min: -2000, max: 120_000 }),
      rateLimit: fc.option(
        fc.record({
          remaining: fc.integer({ min: 0, max: 5000 }),
          resetIn: fc.integer({ min: -600, max: 3600 }),
        }),
      ),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      op: fc.constant('sweep' as const),
      olderThanSeconds: fc.integer({ min: 0, max: 7200 }),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      op: fc.constant('move' as const),
      pick,
      by: fc.integer({ min: -30 * 60_000, max: 30 * 60_000 }),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      op: fc.constant('prune' as const),
      retentionMinutes: fc.integer({ min: 30, max: 200 }),
      // Before every window read below (the earliest starts at T0 − 122 min): the minutes
      // pruned (older than prune's now − 2 h) are never read, as in production.
      at: fc.integer({ min: -25 * 60_000, max: -15 * 60_000 }),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({ op: fc.constant('delete' as const), cutoff: offset }),
  },
  {
    weight: 3,
    arbitrary: fc.record({
      op: fc.constant('raw' as const),
      cred: fc.nat({ max: 1 }),
      purpose: fc.constantFrom(...PURPOSES),
      at: offset,
      outcome: fc.constantFrom('reserved', 'sent', 'completed', 'error', 'abandoned'),
      counted: fc.constantFrom(true, false, null),
      sent: fc.boolean(),
      finished: fc.oneof(
        fc.constant(null),
        fc.constant('-infinity' as const),
        fc.integer({ min: 0, max: 120_000 }),
        // answered long after it was reserved (a sweep does that): after the observation,
        // though reserved before the window
        fc.integer({ min: 0, max: 7200_000 }),
      ),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      op: fc.constant('rateLimit' as const),
      cred: fc.nat({ max: 1 }),
      resetIn,
      observedAgo: fc.integer({ min: -60, max: 3600 }),
      remaining: fc.integer({ min: 0, max: 5000 }),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({ op: fc.constant('forget' as const), cred: fc.nat({ max: 1 }) }),
  },
);

interface Row {
  id: number;
  credential: string;
  reservedAt: Date;
}

async function apply(op: Op, rows: Row[]): Promise<void> {
  const chosen = (n: number) => (rows.length ? rows[n % rows.length]! : null);
  switch (op.op) {
    case 'reserve': {
      const d = await reserve(t.db, POLICIES[op.policy]!, op.purpose, {
        now: at(op.at),
        path: '/x',
      });
      if (d.ok) {
        const { id, credential } = d.reservation;
        rows.push({ id, credential, reservedAt: at(op.at) });
      }
      return;
    }
    case 'release': {
      const r = chosen(op.pick);
      if (r)
        await releaseReservation(t.db, r.id, 'test', new Date(r.reservedAt.getTime() + op.after));
      return;
    }
    case 'send': {
      // What the gate does as the request leaves.
      const r = chosen(op.pick);
      if (r) {
        await sql`UPDATE github_requests SET outcome = 'sent', sent_at = reserved_at
          WHERE id = ${String(r.id)} AND outcome = 'reserved'`.execute(t.db);
      }
      return;
    }
    case 'settle': {
      const r = chosen(op.pick);
      if (!r) return;
      const now = new Date(r.reservedAt.getTime() + op.after);
      const answered = op.answer === '304' || op.answer === '200';
      await settle(
        t.db,
        r.id,
        {
          outcome: answered ? 'completed' : 'error',
          status: op.answer === '304' ? 304 : op.answer === '200' ? 200 : null,
          reached: op.answer !== 'not reached',
          durationMs: Math.max(0, op.after),
          rateLimit:
            answered && op.rateLimit
              ? {
                  limit: 5000,
                  remaining: op.rateLimit.remaining,
                  resetAt: new Date(Math.floor(now.getTime() / 1000 + op.rateLimit.resetIn) * 1000),
                }
              : null,
          now,
        },
        r.credential,
        answered,
      );
      return;
    }
    case 'sweep':
      await settleAbandonedReservations(t.db, op.olderThanSeconds);
      return;
    case 'move': {
      const r = chosen(op.pick);
      if (!r) return;
      r.reservedAt = new Date(r.reservedAt.getTime() + op.by);
      await sql`UPDATE github_requests SET reserved_at = ${r.reservedAt}
        WHERE id = ${String(r.id)}`.execute(t.db);
      return;
    }
    case 'prune':
      await pruneLedgers(t.db, { retentionDays: op.retentionMinutes / 1440, now: at(op.at) });
      return;
    case 'delete':
      // What prune's batch deletes, at any cutoff.
      await sql`DELETE FROM github_requests
        WHERE reserved_at < ${at(op.cutoff)} AND outcome NOT IN ('reserved', 'sent')`.execute(t.db);
      return;
    case 'raw': {
      const reservedAt = at(op.at);
      const finishedAt =
        op.finished === null
          ? null
          : op.finished === '-infinity'
            ? sql`'-infinity'::timestamptz`
            : new Date(reservedAt.getTime() + op.finished);
      const r = await sql<{ id: string }>`
        INSERT INTO github_requests (credential, purpose, path, outcome, counted, reserved_at,
          sent_at, finished_at)
        VALUES (${CREDS[op.cred]!.label}, ${op.purpose}, '/raw', ${op.outcome}, ${op.counted},
          ${reservedAt}, ${op.sent ? reservedAt : null}, ${finishedAt})
        RETURNING id`.execute(t.db);
      rows.push({ id: Number(r.rows[0]!.id), credential: CREDS[op.cred]!.label, reservedAt });
      return;
    }
    case 'rateLimit': {
      const resetAt = new Date(Math.floor(T0.getTime() / 1000 + op.resetIn) * 1000);
      const observedAt = new Date(T0.getTime() - op.observedAgo * 1000);
      await sql`
        INSERT INTO github_rate_limits (credential, quota, remaining, reset_at, observed_at)
        VALUES (${CREDS[op.cred]!.label}, 5000, ${op.remaining}, ${resetAt}, ${observedAt})
        ON CONFLICT (credential) DO UPDATE SET remaining = excluded.remaining,
          reset_at = excluded.reset_at, observed_at = excluded.observed_at`.execute(t.db);
      return;
    }
    case 'forget':
      await sql`DELETE FROM github_rate_limits WHERE credential = ${CREDS[op.cred]!.label}`.execute(
        t.db,
      );
      return;
  }
}

/** The counters, against a GROUP BY of the ledger (when retention pruned none). */
async function countersExact(): Promise<void> {
  const r = await sql<{ bad: string; negative: string }>`
    WITH truth AS (
      SELECT credential, date_trunc('minute', reserved_at, 'UTC') AS minute,
        count(*) FILTER (WHERE purpose = 'poll')::int AS poll,
        count(*) FILTER (WHERE purpose = 'enrich')::int AS enrich,
        count(*) FILTER (WHERE purpose = 'commits')::int AS commits
      FROM github_requests WHERE ${SPENDS_QUOTA} GROUP BY 1, 2
    )
    SELECT
      (SELECT count(*) FROM truth t FULL JOIN github_request_minutes k USING (credential, minute)
       WHERE COALESCE(t.poll, 0) <> COALESCE(k.poll, 0)
          OR COALESCE(t.enrich, 0) <> COALESCE(k.enrich, 0)
          OR COALESCE(t.commits, 0) <> COALESCE(k.commits, 0)) AS bad,
      (SELECT count(*) FROM github_request_minutes
       WHERE poll < 0 OR enrich < 0 OR commits < 0) AS negative`.execute(t.db);
  expect(r.rows[0]).toEqual({ bad: '0', negative: '0' });
}

async function compare(nows: Date[]): Promise<void> {
  for (const now of nows) {
    const expected = (await oracleStatement(CREDS, now).execute(t.db)).rows;
    const actual = (await budgetStateStatement(CREDS, now).execute(t.db)).rows;
    expect(actual, `now = ${now.toISOString()}`).toEqual(expected);
  }
}

describe('the budget from per-minute counters', () => {
  it('equals the count of the window after any sequence of ledger operations', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(opArb, { minLength: 1, maxLength: 40 }),
        nowOffset,
        async (ops, extra) => {
          await sql`TRUNCATE github_requests, github_rate_limits`.execute(t.db);
          const rows: Row[] = [];
          for (const op of ops) await apply(op, rows);
          await compare([...NOWS, at(extra)]);
          // Prune only ever removes minutes before every window read above.
          const pruned = ops.some((o) => o.op === 'prune');
          if (!pruned) await countersExact();
          const negative = await sql<{ n: string }>`
          SELECT count(*) AS n FROM github_request_minutes
          WHERE poll < 0 OR enrich < 0 OR commits < 0`.execute(t.db);
          expect(negative.rows[0]!.n).toBe('0');
        },
      ),
      { numRuns: Number(process.env.BUDGET_COUNTER_RUNS ?? 60) },
    );
  });

  it('counts the first, partial minute of the window row by row', async () => {
    // One row a second over five minutes; the windows start at every offset in a minute.
    await sql`
      INSERT INTO github_requests (credential, purpose, path, outcome, status, counted,
        reserved_at, sent_at, finished_at)
      SELECT 'token:a', (ARRAY['poll', 'enrich', 'commits'])[1 + (g + 300) % 3], '/x', 'completed', 200,
        true, ${T0}::timestamptz - g * interval '1 second' - interval '1 hour',
        ${T0}::timestamptz - g * interval '1 second' - interval '1 hour',
        ${T0}::timestamptz - g * interval '1 second' - interval '1 hour'
      FROM generate_series(-150, 150) g`.execute(t.db);
    const nows = Array.from({ length: 13 }, (_, i) => at(i * 10_001 - 60_000));
    await compare(nows);
    const mid = (await budgetStateStatement([A], at(0)).execute(t.db)).rows[0]!;
    expect(mid.poll + mid.enrich + mid.commits).toBe(151);
  });

  it('a TRUNCATE of the ledger clears the counters', async () => {
    await reserve(t.db, POLICIES[1]!, 'enrich', { now: at(0) });
    const before = await sql<{
      n: string;
    }>`SELECT count(*) AS n FROM github_request_minutes`.execute(t.db);
    expect(before.rows[0]!.n).toBe('1');
    await sql`TRUNCATE github_requests`.execute(t.db);
    // Naming both, as the bench does.
    await reserve(t.db, POLICIES[1]!, 'enrich', { now: at(0) });
    await sql`TRUNCATE github_requests, github_request_minutes`.execute(t.db);
    const after = await sql<{
      n: string;
    }>`SELECT count(*) AS n FROM github_request_minutes`.execute(t.db);
    expect(after.rows[0]!.n).toBe('0');
  });

  it('never goes below 0: a row deleted after its minute was pruned changes nothing', async () => {
    const old = at(-3 * 3600_000);
    for (let i = 0; i < 3; i++) await reserve(t.db, POLICIES[1]!, 'poll', { now: old });
    await pruneLedgers(t.db, { retentionDays: 30, now: at(0) });
    expect((await sql`SELECT * FROM github_request_minutes`.execute(t.db)).rows).toEqual([]);
    // A row written into the pruned minute is counted again (1); deleting all four then
    // leaves 0, not −3.
    await reserve(t.db, POLICIES[1]!, 'poll', { now: old });
    await sql`DELETE FROM github_requests`.execute(t.db);
    const r = await sql`SELECT poll, enrich, commits FROM github_request_minutes`.execute(t.db);
    expect(r.rows).toEqual([{ poll: 0, enrich: 0, commits: 0 }]);
  });

  it('most settles leave the counters alone: the update trigger does not run', async () => {
    const d = await reserve(t.db, POLICIES[1]!, 'enrich', { now: at(0) });
    if (!d.ok) throw new Error('reserve refused');
    const version = async () =>
      (await sql`SELECT xmin::text AS x, enrich FROM github_request_minutes`.execute(t.db)).rows;
    const before = await version();
    expect(before).toMatchObject([{ enrich: 1 }]);
    // Sent, then a 200: it spent all along, in the same minute.
    await sql`UPDATE github_requests SET outcome = 'sent', sent_at = reserved_at
      WHERE id = ${String(d.reservation.id)}`.execute(t.db);
    await settle(t.db, d.reservation.id, {
      outcome: 'completed',
      status: 200,
      durationMs: 40,
      rateLimit: null,
      now: at(40),
    });
    expect(await version()).toEqual(before);
    // A 304 is free: counted off.
    const e = await reserve(t.db, POLICIES[1]!, 'enrich', { now: at(1) });
    if (!e.ok) throw new Error('reserve refused');
    await settle(t.db, e.reservation.id, {
      outcome: 'completed',
      status: 304,
      durationMs: 40,
      rateLimit: null,
      now: at(41),
    });
    expect(await version()).toMatchObject([{ enrich: 1 }]);
  });
});
