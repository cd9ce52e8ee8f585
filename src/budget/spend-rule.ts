import { type RawBuilder, sql } from 'kysely';
import type { RequestPurpose } from '../platform/db/columns.ts';
import { isBackground, type Refusal } from './types.ts';
import { HOUR_MS, type State, type StateRow, toState } from './window.ts';

/**
 * The spend rule (ADR 0190): may a budget key spend a request of a purpose now — `points` of
 * it (a GraphQL query's estimate; 1 for a REST request)? Written once, as data: a table of
 * checks in order, each a condition over one row of the budget state (`st`, window.ts) that
 * must hold, and the refusal it gives when it does not. Two readers of the one table:
 * - allowsSql compiles the conditions into the WHERE of the reservation statement and of the
 *   pool's exact pick, so the row is inserted only where they all hold;
 * - decide() evaluates the same conditions on the row that statement returned, with SQL's
 *   rules for NULL, to say which check failed and when the key frees.
 * What the statement inserts and what decide() explains therefore cannot disagree.
 */

/** The columns of `st` the rule reads (window.ts StateRow). */
type Column = 'blocked_until' | 'remaining' | 'quota' | 'poll' | 'enrich' | 'commits';

/** A value: a column, a bound parameter, or arithmetic over them. NULL in, NULL out. */
type Value =
  | { col: Column }
  | { param: 'now' | 'points' | 'share' }
  | { sum: Value[] }
  | { minus: [Value, Value] }
  /** floor(a × b): an allowance, floor(quota × share). */
  | { floorTimes: [Value, Value] };

/** A condition, true, false or NULL (unknown) as in SQL; a check holds only when true. */
type Condition =
  | { isNull: Column }
  | { notNull: Column }
  | { atMost: [Value, Value] }
  | { atLeast: [Value, Value] }
  | { or: Condition[] };

/** One check of the rule: what must hold, and why the key is refused when it does not. */
interface Check {
  refuses: Refusal['reason'];
  holds: Condition;
}

const col = (c: Column): Value => ({ col: c });
const COST: Value = { param: 'points' };
/** The background allowance, floor(quota × share): enrich and commits together. */
const BACKGROUND: Value = { floorTimes: [col('quota'), { param: 'share' }] };

/**
 * The whole window is the background's (share 1: a credential's GraphQL points, which only
 * commits spend): the allowance is the quota, so once GitHub has said what remains, that is
 * the test, and what the ledger sums is not: a query's cost is an estimate, GitHub's
 * remaining is what it charged.
 */
export function wholeWindow(share: number): boolean {
  return share >= 1;
}

/** What `purpose` has spent of its allowance in the window, and that allowance. */
function allowanceTerms(purpose: RequestPurpose): { spent: Value; allowance: Value } {
  return isBackground(purpose)
    ? { spent: { sum: [col('enrich'), col('commits')] }, allowance: BACKGROUND }
    : { spent: col('poll'), allowance: { minus: [col('quota'), BACKGROUND] } };
}

/** The rule for `purpose` under `share`, checks in the order a refusal names the first failed. */
function spendRule(purpose: RequestPurpose, share: number): readonly Check[] {
  const { spent, allowance } = allowanceTerms(purpose);
  const summed: Condition = { atMost: [{ sum: [spent, COST] }, allowance] };
  return [
    // A 403/429 or a 401 said wait: nothing is spent until its time.
    {
      refuses: 'blocked',
      holds: {
        or: [{ isNull: 'blocked_until' }, { atMost: [col('blocked_until'), { param: 'now' }] }],
      },
    },
    // GitHub's last remaining, less what was spent since, covers the request (unknown: no limit).
    {
      refuses: 'remaining',
      holds: { or: [{ isNull: 'remaining' }, { atLeast: [col('remaining'), COST] }] },
    },
    // The purpose's allowance covers it. A window wholly one purpose's (a #graphql key):
    // GitHub's remaining, when known, is the only limit — a local sum that contradicts it (a
    // lying cost) never closes it.
    {
      refuses: 'allowance',
      holds: wholeWindow(share) ? { or: [{ notNull: 'remaining' }, summed] } : summed,
    },
  ];
}

interface Bound {
  now: Date;
  points: number;
  share: number;
}

// --- the SQL reader -------------------------------------------------------------------------

function valueSql(v: Value, b: Bound): RawBuilder<unknown> {
  if ('col' in v) return sql.raw(`st.${v.col}`);
  if ('param' in v) {
    if (v.param === 'now') return sql`${b.now}::timestamptz`;
    if (v.param === 'points') return sql`${b.points}::int`;
    return sql`${b.share}::float8`;
  }
  // Parenthesised: a sum or a difference may be an operand of another.
  if ('sum' in v)
    return sql`(${sql.join(
      v.sum.map((x) => valueSql(x, b)),
      sql` + `,
    )})`;
  if ('minus' in v) return sql`(${valueSql(v.minus[0], b)} - ${valueSql(v.minus[1], b)})`;
  return sql`floor(${valueSql(v.floorTimes[0], b)} * ${valueSql(v.floorTimes[1], b)})`;
}

function conditionSql(c: Condition, b: Bound): RawBuilder<unknown> {
  if ('isNull' in c) return sql.raw(`st.${c.isNull} IS NULL`);
  if ('notNull' in c) return sql.raw(`st.${c.notNull} IS NOT NULL`);
  if ('atMost' in c) return sql`${valueSql(c.atMost[0], b)} <= ${valueSql(c.atMost[1], b)}`;
  if ('atLeast' in c) return sql`${valueSql(c.atLeast[0], b)} >= ${valueSql(c.atLeast[1], b)}`;
  return sql`(${sql.join(
    c.or.map((x) => conditionSql(x, b)),
    sql` OR `,
  )})`;
}

/**
 * The rule as SQL over `st` (a row of window.ts's CTEs): true where a request of `purpose`
 * of `points` may be spent now. The reservation inserts only where it holds.
 */
export function allowsSql(purpose: RequestPurpose, share: number, now: Date, points = 1) {
  const b = { now, points, share };
  return sql`(${sql.join(
    spendRule(purpose, share).map((check) => conditionSql(check.holds, b)),
    sql` AND `,
  )})`;
}

/**
 * How much of `purpose` `st` may still spend in its window: its allowance's rest, within what
 * GitHub has left (the pick's order: most room first). From the same terms as the rule.
 */
export function roomSql(purpose: RequestPurpose, share: number) {
  const { spent, allowance } = allowanceTerms(purpose);
  const b = { now: new Date(0), points: 0, share };
  const left = valueSql({ minus: [allowance, spent] }, b);
  if (wholeWindow(share)) return sql`COALESCE(st.remaining, ${left})`;
  return sql`LEAST(${left}, COALESCE(st.remaining, ${left}))`;
}

// --- the TypeScript reader ------------------------------------------------------------------

/** A value as SQL computes it: NULL (null) in any operand makes the result NULL. */
function evaluate(v: Value, row: StateRow, b: Bound): number | null {
  if ('col' in v) {
    const x = row[v.col];
    return x === null ? null : x instanceof Date ? x.getTime() : Number(x);
  }
  if ('param' in v) return v.param === 'now' ? b.now.getTime() : b[v.param];
  const args = 'sum' in v ? v.sum : 'minus' in v ? v.minus : v.floorTimes;
  const xs = args.map((x) => evaluate(x, row, b));
  if (xs.some((x) => x === null)) return null;
  const [a, c] = xs as number[];
  if ('sum' in v) return (xs as number[]).reduce((s, x) => s + x, 0);
  if ('minus' in v) return a! - c!;
  return Math.floor(a! * c!);
}

/** A condition with SQL's three values: true, false, or null (unknown). */
function truthOf(c: Condition, row: StateRow, b: Bound): boolean | null {
  if ('isNull' in c) return row[c.isNull] === null;
  if ('notNull' in c) return row[c.notNull] !== null;
  if ('or' in c) {
    const xs = c.or.map((x) => truthOf(x, row, b));
    if (xs.includes(true)) return true;
    return xs.includes(null) ? null : false;
  }
  const [l, r] = 'atMost' in c ? c.atMost : c.atLeast;
  const x = evaluate(l, row, b);
  const y = evaluate(r, row, b);
  if (x === null || y === null) return null;
  return 'atMost' in c ? x <= y : x >= y;
}

/**
 * When a spent budget frees. Within GitHub's known hour, at its reset. Past it (or before we
 * ever saw one) the window is the last 60 minutes, which frees when its oldest spend leaves
 * it — not "now", which made every refused source due again at once, tick after tick.
 */
function freesAt(state: State, oldest: Date | null, now: Date): Date {
  if (state.rl && state.rl.resetAt.getTime() > now.getTime()) return state.window.end;
  const at = oldest ? oldest.getTime() + HOUR_MS : now.getTime();
  return new Date(Math.max(at, now.getTime() + 1000));
}

/** When the key a check refused frees: the block's end, or the oldest spend that counts leaving. */
function retryAt(
  reason: Refusal['reason'],
  row: StateRow,
  purpose: RequestPurpose,
  now: Date,
): Date {
  if (reason === 'blocked') return row.blocked_until!;
  const state = toState(row);
  const { oldest } = state.spent;
  if (reason === 'remaining') return freesAt(state, oldest.any, now);
  return freesAt(state, isBackground(purpose) ? oldest.background : oldest.poll, now);
}

/**
 * Why `row` (a row of the budget state) cannot spend a request of `purpose` now — the first
 * check of the rule that does not hold, and when it frees — or null when it can: where
 * allowsSql is true, this is null, and the other way round.
 */
export function decide(
  row: StateRow,
  share: number,
  purpose: RequestPurpose,
  now: Date,
  /** What the request spends: a GraphQL query's estimated points, 1 for a REST request. */
  points = 1,
): Refusal | null {
  const b = { now, points, share };
  const failed = spendRule(purpose, share).find((check) => truthOf(check.holds, row, b) !== true);
  if (!failed) return null;
  const refusal: Refusal = {
    ok: false,
    reason: failed.refuses,
    retryAt: retryAt(failed.refuses, row, purpose, now),
    credential: row.credential,
  };
  if (failed.refuses === 'blocked') refusal.blockReason = row.block_reason;
  return refusal;
}
