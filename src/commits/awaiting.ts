import { sql } from 'kysely';
import type { Db } from '../platform/db/pool.ts';
import { isTargeted, loadCommitsTargets } from '../store/commits-targets.ts';

/**
 * Pushes that wait for a credential (ADR 0186): a push a source covers, stored by a process
 * with no GitHub credential and carrying no commits, is `skipped` with
 * `commits_next_attempt_at` set (when it was set aside). A process that can fetch (a worker's
 * reconciler, `bin/commits`) makes the newest of them `pending` a batch at a time, and only
 * while no other push is due: new pushes first, history newest first, the oldest last, all
 * fetched within the commits share like any pending push. A push no enabled source with
 * commits on covers any more becomes plainly `skipped`.
 *
 * Both reads are short range scans of push_events_commits_awaiting (migration
 * 2026-12-04T1110): the waiting pushes alone, by push time.
 */

/** Pushes made pending at a time: a few GraphQL batches' worth, so new pushes stay first. */
export const AWAITING_RELEASE_BATCH = 500;

/** The predicate of push_events_commits_awaiting (the same text, so the planner uses it). */
const AWAITING = sql`commits_state = 'skipped' AND commits_next_attempt_at IS NOT NULL`;

export function countAwaitingStatement() {
  return sql<{ n: string }>`SELECT count(*) AS n FROM push_events WHERE ${AWAITING}`;
}

/** How many pushes wait for a credential (an index-only count of the partial index). */
export async function countAwaitingCredential(db: Db): Promise<number> {
  const r = await countAwaitingStatement().execute(db);
  return Number(r.rows[0]!.n);
}

/** The newest `limit` waiting pushes, locked (others' locks skipped), with their names. */
export function awaitingPickStatement(limit: number) {
  return sql<Picked>`
      SELECT p.repository_id, p.ref, p.before, p.head, a.login, r.full_name
      FROM (SELECT repository_id, ref, before, head, actor_id FROM push_events
            WHERE ${AWAITING} ORDER BY created_at DESC LIMIT ${limit}
            FOR UPDATE SKIP LOCKED) p
      LEFT JOIN actors a ON a.id = p.actor_id
      LEFT JOIN repositories r ON r.id = p.repository_id`;
}

export interface AwaitingRelease {
  /** Made pending, due at `now`. */
  released: number;
  /** No longer covered by any enabled source with commits on: plainly skipped now. */
  dropped: number;
}

interface Picked {
  repository_id: string;
  ref: string;
  before: string;
  head: string;
  login: string | null;
  full_name: string | null;
}

/**
 * Makes up to `limit` of the newest waiting pushes pending (due at `now`), each one still
 * covered by the sources as they are now; the rest of the batch are plainly skipped. One
 * transaction; concurrent callers take disjoint pushes (FOR UPDATE SKIP LOCKED).
 */
export async function releaseAwaitingPushes(
  db: Db,
  now: Date,
  limit = AWAITING_RELEASE_BATCH,
): Promise<AwaitingRelease> {
  return db.transaction().execute(async (trx) => {
    const picked = await awaitingPickStatement(limit).execute(trx);
    if (picked.rows.length === 0) return { released: 0, dropped: 0 };
    const targets = await loadCommitsTargets(trx);
    // Whether a push was a private repository's is not stored: the sources covered it when
    // it was set aside, and a public source still covers what it covered then.
    const covered = picked.rows.map((row) =>
      isTargeted(targets, {
        actor: { login: row.login ?? '' },
        repository: { fullName: row.full_name ?? '' },
      }),
    );
    const col = <T>(f: (row: Picked) => T) => picked.rows.map(f);
    await sql`
      UPDATE push_events p
      SET commits_state = CASE WHEN v.covered THEN 'pending' ELSE 'skipped' END,
          commits_next_attempt_at = CASE WHEN v.covered THEN ${now}::timestamptz END
      FROM unnest(${col((r) => r.repository_id)}::bigint[], ${col((r) => r.ref)}::text[],
                  ${col((r) => r.before)}::text[], ${col((r) => r.head)}::text[],
                  ${covered}::boolean[]) AS v (repository_id, ref, before, head, covered)
      WHERE p.repository_id = v.repository_id AND p.ref = v.ref AND p.before = v.before
        AND p.head = v.head AND p.commits_state = 'skipped'`.execute(trx);
    const released = covered.filter(Boolean).length;
    return { released, dropped: covered.length - released };
  });
}
