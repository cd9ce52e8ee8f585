import { type RawBuilder, sql } from 'kysely';

/**
 * How every pipeline retries and when it gives up: one table of ladders and one crash limit.
 *
 * A ladder is the waits after consecutive failures of one kind of work, in seconds: the n-th
 * failure in a row waits the n-th step, and every failure past the last step waits the last.
 * A statement that climbs a ladder in SQL takes its step from ladderSql, which is built from
 * the same steps as ladderSeconds, so the two cannot say different things
 * (test/unit/attempt-ladders.test.ts checks them against each other on Postgres).
 *
 * A death is work found still in flight after its process died (killed, or out of memory):
 * a poll on its answer, a commits fetch mid-request, a gap fill, an archive import. Work
 * that killed its process MAX_DEATHS times is set aside, so that a poison answer or file
 * cannot crash-loop whoever keeps retrying it.
 */

/** Work found in flight after its process died this many times is set aside. */
export const MAX_DEATHS = 2;

/** first, first × factor, first × factor² … while below cap, then cap. */
function doubling(first: number, factor: number, cap: number): readonly number[] {
  const steps: number[] = [];
  for (let s = first; s < cap; s *= factor) steps.push(s);
  steps.push(cap);
  return steps;
}

/**
 * Every ladder, by the work that climbs it.
 * - poll: a source's failed polls (a budget refusal or a rate limit climbs nothing).
 * - entity: an actor's or a repository's failed enrichment attempts, until ENRICH_MAX_ATTEMPTS.
 * - commits: a push's failed commit fetches, until the same limit.
 * - fill: a gap's fill attempts, and a mirror asked again for an hour it lacked.
 * - auth: a credential's 401s in a row, each blocking it for every process.
 */
export const LADDERS = {
  /** 1, 2, 4 … 32 minutes, then an hour. */
  poll: doubling(60, 2, 3600),
  /** 1, 4, 16, 64, 256 minutes, then 6 hours. */
  entity: doubling(60, 4, 6 * 3600),
  /** As the entities'. */
  commits: doubling(60, 4, 6 * 3600),
  /** 1, 2, 4 … 32 minutes, then an hour. */
  fill: doubling(60, 2, 3600),
  /**
   * 1, 5, 15, then 60 minutes: a token GitHub rejected once by a glitch is tried again in a
   * minute; a revoked one costs four requests in the first hour and one an hour after that.
   */
  auth: [60, 300, 900, 3600],
} as const satisfies Record<string, readonly number[]>;

export type LadderName = keyof typeof LADDERS;

/** The wait after the n-th consecutive failure (n below 1 counts as the first). */
export function ladderSeconds(ladder: LadderName, failures: number): number {
  const steps = LADDERS[ladder];
  const i = Math.min(Math.max(1, failures), steps.length) - 1;
  return steps[i]!;
}

/** ladderSeconds in SQL: the wait (an int, in seconds) after the `failures`-th failure. */
export function ladderSql(ladder: LadderName, failures: RawBuilder<unknown>): RawBuilder<number> {
  const steps = LADDERS[ladder];
  // Literals, not parameters: the numbers are ours, and a statement keeps one text a ladder.
  const array = sql.join(steps.map((s) => sql.lit(s)));
  return sql<number>`(ARRAY[${array}]::int[])[LEAST(GREATEST(1, ${failures}), ${sql.lit(steps.length)})]`;
}

/** ladderSql as an interval, to add to a timestamptz. */
export function ladderIntervalSql(
  ladder: LadderName,
  failures: RawBuilder<unknown>,
): RawBuilder<string> {
  return sql<string>`make_interval(secs => ${ladderSql(ladder, failures)})`;
}

/**
 * One more failed attempt of leased work (an entity, a push's commits): how many now,
 * whether that was the last one allowed, and when the next may run.
 */
export function failedAttempt(
  ladder: LadderName,
  previous: number,
  now: Date,
  maxAttempts: number,
): { attempts: number; terminal: boolean; nextAttemptAt: Date } {
  const attempts = previous + 1;
  return {
    attempts,
    terminal: attempts >= maxAttempts,
    nextAttemptAt: new Date(now.getTime() + ladderSeconds(ladder, attempts) * 1000),
  };
}
