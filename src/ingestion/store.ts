import { sql } from 'kysely';
import {
  type CommitsContext,
  DEFAULT_COMMITS,
  inlineCommitRows,
  planCommits,
} from '../commits/inline.ts';
import { storeCommits } from '../commits/store.ts';
import type { Db } from '../db/pool.ts';
import { compareIds } from '../json/exact.ts';
import type { PushRow } from './mapping.ts';

/**
 * Writing pushes and the people and repositories behind them. Callers pass a
 * transaction: a page (poll) or a delivery (webhook) is stored all or nothing.
 *
 * Rows are written in key order so that two transactions touching the same actors,
 * repositories or pushes (two sources, or a poll and a webhook) take row locks in the
 * same order and cannot deadlock each other.
 */

export interface StoreOptions {
  origin: 'poll' | 'webhook';
  sourceId?: number | null;
  runId?: number | null;
  /** Who gets commits and what addresses become (ADR 0070); absent: nobody, hashed. */
  commits?: CommitsContext;
}

export interface StoreResult {
  /** push_events rows this call inserted (a push already held, by either origin, is not new). */
  created: number;
  /** Actors / repositories inserted (state 'pending': they need enriching). */
  newActors: number;
  newRepositories: number;
  /** Pushes this call inserted with commits_state 'pending' (a fetch-commits hint after COMMIT). */
  commitsPending: number;
}

export interface NamedEntity {
  /** GitHub id as a canonical decimal string (64-bit: never a JS number). */
  id: string;
  name: string;
}

/** One entry per id; the last one given wins (callers pass oldest first). */
function byId(entities: NamedEntity[]): NamedEntity[] {
  const m = new Map<string, NamedEntity>();
  for (const e of entities) m.set(e.id, e);
  return [...m.values()].sort((a, b) => compareIds(a.id, b.id));
}

/**
 * Inserts the actors and repositories not yet known (enrichment_state 'pending') and
 * updates the login / full_name of known ones that changed — both are keyed by numeric id
 * because logins change and repositories are renamed or transferred. One statement for
 * both tables (a round trip per page saved); rows go in id order, actors first, as before.
 * Returns how many of each were inserted.
 */
export async function upsertActorsAndRepositories(
  db: Db,
  actors: NamedEntity[],
  repositories: NamedEntity[],
): Promise<{ newActors: number; newRepositories: number }> {
  const a = byId(actors);
  const r = byId(repositories);
  if (a.length === 0 && r.length === 0) return { newActors: 0, newRepositories: 0 };
  // xmax = 0 only on a freshly inserted row version: inserted vs. renamed.
  const result = await sql<{ actors: string; repositories: string }>`
    WITH a AS (
      INSERT INTO actors (id, login)
      SELECT id, login
      FROM unnest(${a.map((e) => e.id)}::bigint[], ${a.map((e) => e.name)}::text[]) AS v (id, login)
      ORDER BY id
      ON CONFLICT (id) DO UPDATE SET login = excluded.login, updated_at = now()
        WHERE actors.login IS DISTINCT FROM excluded.login
      RETURNING xmax = 0 AS inserted
    ), r AS (
      INSERT INTO repositories (id, full_name)
      SELECT id, full_name
      FROM unnest(${r.map((e) => e.id)}::bigint[], ${r.map((e) => e.name)}::text[]) AS v (id, full_name)
      ORDER BY id
      ON CONFLICT (id) DO UPDATE SET full_name = excluded.full_name, updated_at = now()
        WHERE repositories.full_name IS DISTINCT FROM excluded.full_name
      RETURNING xmax = 0 AS inserted
    )
    SELECT (SELECT count(*) FILTER (WHERE inserted) FROM a) AS actors,
           (SELECT count(*) FILTER (WHERE inserted) FROM r) AS repositories`.execute(db);
  const row = result.rows[0]!;
  return { newActors: Number(row.actors), newRepositories: Number(row.repositories) };
}

function naturalKeyOrder(a: PushRow, b: PushRow): number {
  return (
    compareIds(a.repository.id, b.repository.id) ||
    a.ref.localeCompare(b.ref) ||
    a.before.localeCompare(b.before) ||
    a.head.localeCompare(b.head)
  );
}

/**
 * A push first delivered by webhook has no event id. When the poll brings the same push
 * (same natural key) with its id, record the id on the existing row rather than adding
 * a second one. Skipped if that id is somehow already on another row. Called only with
 * the pushes the insert did not add: a push it added had no row to merge with.
 */
async function fillInEventIds(db: Db, pushes: PushRow[]): Promise<void> {
  const withId = pushes.filter((p) => p.id !== null);
  if (withId.length === 0) return;
  const values = sql.join(
    withId.map(
      (p) => sql`(${p.id}::bigint, ${p.repository.id}::bigint, ${p.ref}, ${p.before}, ${p.head})`,
    ),
  );
  await sql`
    UPDATE push_events p SET id = v.id
    FROM (VALUES ${values}) AS v (id, repository_id, ref, before, head)
    WHERE p.id IS NULL
      AND (p.repository_id, p.ref, p.before, p.head) = (v.repository_id, v.ref, v.before, v.head)
      AND NOT EXISTS (SELECT 1 FROM push_events q WHERE q.id = v.id)`.execute(db);
}

/**
 * Stores pushes with their actors and repositories. A push is identified by its natural
 * key (repository_id, ref, before, head) — the same push polled twice, polled by two
 * sources, or delivered by webhook and polled, is ONE row. Event ids are kept as a
 * unique attribute when known.
 */
export async function storePushes(
  trx: Db,
  pushes: PushRow[],
  opts: StoreOptions,
): Promise<StoreResult> {
  if (pushes.length === 0)
    return { created: 0, newActors: 0, newRepositories: 0, commitsPending: 0 };
  // Oldest first, so the newest login/full_name seen in this batch is the one kept.
  const chronological = [...pushes].sort((a, b) => a.createdAt.getTime() - b.createdAt.getTime());
  const { newActors, newRepositories } = await upsertActorsAndRepositories(
    trx,
    chronological.map((p) => ({ id: p.actor.id, name: p.actor.login })),
    chronological.map((p) => ({ id: p.repository.id, name: p.repository.fullName })),
  );
  const ordered = [...pushes].sort(naturalKeyOrder);
  const ctx = opts.commits ?? DEFAULT_COMMITS;
  const plans = ordered.map((p) => planCommits(p, ctx.targets, opts.origin === 'webhook'));
  const inserted = await trx
    .insertInto('push_events')
    .values(
      ordered.map((p, i) => ({
        id: p.id,
        actor_id: p.actor.id,
        repository_id: p.repository.id,
        push_id: p.pushId,
        ref: p.ref,
        head: p.head,
        before: p.before,
        created_at: p.createdAt,
        payload: JSON.stringify(p.payload),
        size: p.size,
        distinct_size: p.distinctSize,
        origin: opts.origin,
        source_id: opts.sourceId ?? null,
        run_id: opts.runId ?? null,
        commit_count: plans[i]!.count,
        commits_state: plans[i]!.state,
        commits_next_attempt_at: plans[i]!.state === 'pending' ? sql<Date>`now()` : null,
      })),
    )
    // Either key may conflict: the natural key (held already, by any origin) or the
    // event id (held already under another key would be GitHub's bug, not ours to fix).
    .onConflict((oc) => oc.doNothing())
    .returning(['id', 'commits_state'])
    .execute();
  if (opts.origin === 'poll' && inserted.length < ordered.length) {
    // Only a push the insert skipped can be a webhook copy waiting for its id; in a page
    // of new pushes (the common case) there is nothing to merge and no UPDATE to send.
    const added = new Set(inserted.map((r) => r.id));
    await fillInEventIds(
      trx,
      ordered.filter((p) => !added.has(p.id)),
    );
  }
  const commits = inlineCommitRows(ordered, plans);
  if (commits.length > 0) await storeCommits(trx, commits, { emails: ctx.emails });
  return {
    created: inserted.length,
    newActors,
    newRepositories,
    commitsPending: inserted.filter((r) => r.commits_state === 'pending').length,
  };
}
