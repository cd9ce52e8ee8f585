import { sql } from 'kysely';
import { COMMITS_STATES, type CommitsState } from '../platform/db/columns.ts';
import type { Db } from '../platform/db/pool.ts';

/**
 * "Are commits due?" — asked of committed state by the reconciler every tick and by the
 * share rule before every reservation: one range probe of push_events_commits_due.
 */

/** Due, and free: the same predicate in every part of the statement and in the claim (src/commits/claim.ts). */
export function dueSql(alias: string, now: Date) {
  const p = sql.ref(alias);
  return sql`${p}.commits_state IN ('pending', 'unverified')
    AND ${p}.commits_next_attempt_at <= ${now}::timestamptz
    AND (${p}.commits_claimed_until IS NULL OR ${p}.commits_claimed_until <= ${now}::timestamptz)`;
}

export function commitsDueStatement(now: Date) {
  return sql<{ due: boolean }>`
    SELECT EXISTS (SELECT 1 FROM push_events p WHERE ${dueSql('p', now)}) AS due`;
}

export async function hasDueCommits(db: Db, now: Date = new Date()): Promise<boolean> {
  const r = await commitsDueStatement(now).execute(db);
  return r.rows[0]!.due;
}

/** Pending pushes due now (O(backlog), index-only on the partial index: for status and bin/commits). */
export async function countDueCommits(db: Db, now: Date = new Date()): Promise<number> {
  const r = await sql<{ n: string }>`
    SELECT count(*) AS n FROM push_events p WHERE ${dueSql('p', now)}`.execute(db);
  return Number(r.rows[0]!.n);
}

/** Pushes per commits_state (reads the whole table: a status page, not a hot path). */
export async function commitsByState(db: Db): Promise<Record<CommitsState, number>> {
  const out = Object.fromEntries(COMMITS_STATES.map((s) => [s, 0])) as Record<CommitsState, number>;
  const r = await sql<{ state: CommitsState; n: string }>`
    SELECT commits_state AS state, count(*) AS n FROM push_events GROUP BY 1`.execute(db);
  for (const row of r.rows) out[row.state] = Number(row.n);
  return out;
}
