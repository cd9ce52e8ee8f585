import { type RawBuilder, sql } from 'kysely';
import {
  FixtureMiss,
  GitHubRequestFailed,
  GitHubUnavailable,
  MalformedResponse,
} from '../github/errors.ts';
import { failedAttempt, type LadderName } from '../platform/attempts.ts';
import type { Db } from '../platform/db/pool.ts';

/**
 * The attempt half of leased work, the same for an entity to enrich and a push whose commits
 * to fetch: a claimed row is written only while its lease is still the claimer's (`ours`, the
 * WHERE each pipeline's claim gives), every write that ends an attempt releases the lease, and
 * a transient failure climbs the row's ladder until its last allowed attempt makes it
 * `failed`. Each pipeline keeps its own claim (which row is due next differs) and its own
 * successes; the columns differ only by name, and LEASED_ROWS names them.
 */

export interface LeasedRows {
  table: 'actors' | 'repositories' | 'push_events';
  /** What every write that ends an attempt also sets: the lease, and any in-flight mark, cleared. */
  release: RawBuilder<unknown>;
  /** The state column, and what a failure below the limit leaves in it. */
  state: string;
  retryState: RawBuilder<unknown>;
  attempts: string;
  error: string;
  nextAttemptAt: string;
  /** A column every failure stamps with its time, if the table keeps one. */
  updatedAt: string | null;
  ladder: LadderName;
}

const entityRows = (table: 'actors' | 'repositories'): LeasedRows => ({
  table,
  release: sql`claimed_until = NULL, claimed_by = NULL`,
  state: 'enrichment_state',
  retryState: sql`'pending'`,
  attempts: 'attempts',
  error: 'last_error',
  nextAttemptAt: 'next_attempt_at',
  updatedAt: 'updated_at',
  ladder: 'entity',
});

/** Every table of leased work, by what it holds. */
export const LEASED_ROWS = {
  actor: entityRows('actors'),
  repository: entityRows('repositories'),
  /**
   * A push's commits. A settle also closes the attempt a fetch opened before its request
   * (commits/deaths.ts); an unverified push stays so on the ladder, its mirror's commits
   * still unproven.
   */
  commits: {
    table: 'push_events',
    release: sql`commits_claimed_until = NULL, commits_fetch_started_at = NULL,
      commits_fetch_group = NULL`,
    state: 'commits_state',
    retryState: sql`commits_state`,
    attempts: 'commits_attempts',
    error: 'commits_error',
    nextAttemptAt: 'commits_next_attempt_at',
    updatedAt: null,
    ladder: 'commits',
  },
} as const satisfies Record<string, LeasedRows>;

/** `set` written to the row `ours` selects; false when the lease was no longer ours. */
export async function writeIfOurs(
  db: Db,
  table: LeasedRows['table'],
  ours: RawBuilder<unknown>,
  set: RawBuilder<unknown>,
): Promise<boolean> {
  const r = await sql`UPDATE ${sql.table(table)} SET ${set} WHERE ${ours}`.execute(db);
  return Number(r.numAffectedRows ?? 0) === 1;
}

/** An attempt ends: `set` written and the lease released, while it is still ours. */
export function settleLeased(
  db: Db,
  rows: LeasedRows,
  ours: RawBuilder<unknown>,
  set: RawBuilder<unknown>,
): Promise<boolean> {
  return writeIfOurs(db, rows.table, ours, sql`${set}, ${rows.release}`);
}

/**
 * A transient failure (5xx, timeout, malformed answer): one more attempt spent. Below the
 * limit the row waits its step on the ladder; at the limit it is `failed`, terminal, so a
 * permanently broken row costs at most maxAttempts requests, never a loop.
 */
export async function failLeasedAttempt(
  db: Db,
  rows: LeasedRows,
  ours: RawBuilder<unknown>,
  o: { attempts: number; detail: string; now: Date; maxAttempts: number },
): Promise<{ applied: boolean; terminal: boolean; nextAttemptAt: Date }> {
  const { attempts, terminal, nextAttemptAt } = failedAttempt(
    rows.ladder,
    o.attempts,
    o.now,
    o.maxAttempts,
  );
  const col = (name: string) => sql.ref(name);
  const stamped = rows.updatedAt ? sql`, ${col(rows.updatedAt)} = ${o.now}` : sql``;
  const applied = await settleLeased(
    db,
    rows,
    ours,
    sql`${col(rows.state)} = ${terminal ? sql`'failed'` : rows.retryState},
        ${col(rows.attempts)} = ${attempts}, ${col(rows.error)} = ${o.detail},
        ${col(rows.nextAttemptAt)} = ${nextAttemptAt}${stamped}`,
  );
  return { applied, terminal, nextAttemptAt };
}

/**
 * A failure of this one attempt that may heal, in any pipeline: GitHub unavailable (5xx, a
 * timeout, no connection), an answer that is not what it should be, or `invalid` (the
 * pipeline's own check of the answer). Counted against the row, retried on its ladder.
 */
export function isTransientFailure(
  err: unknown,
  invalid: abstract new (...args: never[]) => Error,
): err is Error {
  return (
    err instanceof GitHubUnavailable ||
    err instanceof MalformedResponse ||
    err instanceof GitHubRequestFailed ||
    err instanceof invalid ||
    err instanceof FixtureMiss
  );
}

/** The HTTP status an error carries, if it carries one. */
export function errorStatus(err: unknown): number | null {
  const status = (err as { status?: unknown }).status;
  return typeof status === 'number' ? status : null;
}
