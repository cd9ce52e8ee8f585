import { type RawBuilder, sql } from 'kysely';
import type { Db } from '../platform/db/pool.ts';
import type { PushKey } from './claim.ts';

/**
 * The default branch's tip when a new branch was pushed, from the pushes to the default
 * branch this database holds (ADR 0111). A new branch's commits are those
 * reachable from its head and not from that tip.
 *
 * `proven`: the last push before the new branch's and the first one after it agree (the
 * one after starts where the one before ended): the tip did not move in between, as far as
 * GitHub's own push records go. Otherwise no tip is proven, and `around` holds every tip
 * the records show near the push — the last one before (its head), the first one after
 * (its before), and those of pushes at the very same time — each of which may have been
 * the tip at push time. The fetchers then store only what is reachable from none of them
 * nor from the tip now: a default branch that moved between its last stored push and the
 * branch push, and was rewritten after, can hide no commit of its own in the result.
 * `candidate`: no push after it yet, so the last tip before is proven only if it is still
 * the tip now.
 */
export interface DefaultTip {
  proven: string | null;
  candidate: string | null;
  around: string[];
}

type TipRow = { prev_head: string | null; next_before: string | null; ties: string[] | null };

/** Pushes at the push's very time read at most: any of them may hold the tip. */
const TIES_READ = 4;

/**
 * The pushes to the default branch just before and just after the new branch's push, and
 * those at its very time: three probes of push_events_ref_created_at (repository_id,
 * hashtext(ref), created_at: the ref by its hash in the index, by its text in the filter),
 * never a walk of a busy default branch's whole history. The push's time is
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
         AND hashtext(p.ref) = hashtext(${ref}) AND p.ref = ${ref}
         AND p.created_at < (SELECT created_at FROM me)
         ORDER BY p.created_at DESC LIMIT 1) AS prev_head,
      (SELECT p.before FROM push_events p WHERE p.repository_id = ${push.repositoryId}::bigint
         AND hashtext(p.ref) = hashtext(${ref}) AND p.ref = ${ref}
         AND p.created_at > (SELECT created_at FROM me)
         ORDER BY p.created_at LIMIT 1) AS next_before,
      (SELECT array_agg(x) FROM (
         SELECT unnest(ARRAY[p.before, p.head]) AS x FROM push_events p
         WHERE p.repository_id = ${push.repositoryId}::bigint
           AND hashtext(p.ref) = hashtext(${ref}) AND p.ref = ${ref}
           AND p.created_at = (SELECT created_at FROM me)
         LIMIT ${TIES_READ * 2}) t) AS ties`;
}

const isSha = (s: string | null): s is string => s !== null && !/^0+$/.test(s);

export async function defaultTipAtPush(
  db: Db,
  push: PushKey,
  defaultBranch: string,
): Promise<DefaultTip> {
  const r = await defaultTipStatement(push, defaultBranch).execute(db);
  const row = r.rows[0];
  const prev = row?.prev_head ?? null;
  const next = row?.next_before ?? null;
  const ties = (row?.ties ?? []).filter(isSha);
  const around = [...new Set([prev, next, ...ties].filter(isSha))];
  const tied = (row?.ties ?? []).length > 0;
  if (!tied && isSha(prev) && next !== null && next === prev) {
    return { proven: prev, candidate: null, around };
  }
  return { proven: null, candidate: !tied && isSha(prev) && next === null ? prev : null, around };
}
