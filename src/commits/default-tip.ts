import { type RawBuilder, sql } from 'kysely';
import type { Db } from '../db/pool.ts';
import type { PushKey } from './claim.ts';

/**
 * The default branch's tip when a new branch was pushed, from the pushes to the default
 * branch this database holds (ADR 0111): the last one before the new branch's push, when
 * the first one after it started where that one ended (its `before` is that head) — the
 * tip did not move in between, as far as GitHub's own push records go. `candidate`: no
 * push after it yet, so the tip at push time is proven only if it is still the tip now.
 * Null: no record (the tip now is all there is, and a result of 0 commits is not trusted).
 */
export interface DefaultTip {
  sha: string;
  proven: boolean;
}

type TipRow = { prev_head: string | null; next_before: string | null; ties: string };

/**
 * The pushes to the default branch just before and just after the new branch's push, and
 * those at its very time: three probes of push_events_ref_created_at (repository_id, ref,
 * created_at), never a walk of a busy default branch's whole history. The push's time is
 * a scalar (an init plan), so each probe bounds the index scan rather than filtering a
 * join: no row (the push is gone) makes it NULL, and every probe finds nothing.
 */
export function defaultTipStatement(push: PushKey, defaultBranch: string): RawBuilder<TipRow> {
  const ref = `refs/heads/${defaultBranch}`;
  return sql<TipRow>`
    WITH me AS (
      SELECT created_at FROM push_events
      WHERE repository_id = ${push.repositoryId}::bigint AND ref = ${push.ref}
        AND before = ${push.before} AND head = ${push.head}
    )
    SELECT
      (SELECT p.head FROM push_events p WHERE p.repository_id = ${push.repositoryId}::bigint
         AND p.ref = ${ref} AND p.created_at < (SELECT created_at FROM me)
         ORDER BY p.created_at DESC LIMIT 1) AS prev_head,
      (SELECT p.before FROM push_events p WHERE p.repository_id = ${push.repositoryId}::bigint
         AND p.ref = ${ref} AND p.created_at > (SELECT created_at FROM me)
         ORDER BY p.created_at LIMIT 1) AS next_before,
      (SELECT count(*) FROM push_events p WHERE p.repository_id = ${push.repositoryId}::bigint
         AND p.ref = ${ref} AND p.created_at = (SELECT created_at FROM me))::text AS ties`;
}

export async function defaultTipAtPush(
  db: Db,
  push: PushKey,
  defaultBranch: string,
): Promise<DefaultTip | null> {
  const r = await defaultTipStatement(push, defaultBranch).execute(db);
  const row = r.rows[0];
  if (!row?.prev_head || row.ties !== '0' || /^0+$/.test(row.prev_head)) return null;
  if (row.next_before === null) return { sha: row.prev_head, proven: false };
  return row.next_before === row.prev_head ? { sha: row.prev_head, proven: true } : null;
}
