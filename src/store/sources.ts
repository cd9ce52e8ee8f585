import { sql } from 'kysely';
import type { Config } from '../platform/config/config.ts';
import {
  commitsEnabledFor,
  parseSourcesList,
  type SourceSpec,
} from '../platform/config/source-spec.ts';
import type { GithubMode } from '../platform/db/columns.ts';
import type { Db } from '../platform/db/pool.ts';
import type { EventSource } from '../platform/db/schema.ts';
import { NotFound } from '../platform/errors.ts';
import { forgetCommitsTargets } from './commits-targets.ts';

/**
 * Event sources: the feeds we poll. One row per (kind, target, mode); a process only
 * ever polls sources of its own GITHUB_MODE (a live worker must never ask api.github.com
 * for a fixture source, and vice versa).
 */

function targetOf(spec: SourceSpec): string | null {
  return spec.kind === 'public' ? null : spec.target;
}

/** The events feed of a source, relative to GITHUB_API_URL. */
export function feedPath(source: Pick<EventSource, 'kind' | 'target'>): string {
  switch (source.kind) {
    case 'public':
      return '/events';
    case 'repo':
      return `/repos/${source.target}/events`;
    case 'org':
      return `/orgs/${source.target}/events`;
    case 'user':
      return `/users/${source.target}/events`;
  }
}

/** "public", "repo octocat/Hello-World" — how operators see a source. */
export function describeSource(source: Pick<EventSource, 'kind' | 'target'>): string {
  return source.target === null ? source.kind : `${source.kind} ${source.target}`;
}

/** Finds the source with this kind and target (case-insensitively) in a mode. */
async function findSource(
  db: Db,
  spec: SourceSpec,
  mode: GithubMode,
): Promise<EventSource | undefined> {
  const target = targetOf(spec);
  return db
    .selectFrom('event_sources')
    .selectAll()
    .where('kind', '=', spec.kind)
    .where('mode', '=', mode)
    .where((eb) =>
      target === null
        ? eb('target', 'is', null)
        : eb(sql`lower(target)`, '=', target.toLowerCase()),
    )
    .executeTakeFirst();
}

/**
 * Adds a source unless it already exists (same kind, target ignoring case, and mode).
 * Looked up first: an INSERT that conflicts still takes an identity value, so every
 * `bin/setup` (and SOURCES seed) of a source that exists would use up an id, and the ids a
 * user sees would depend on how often setup ran. Safe against a concurrent add: ON CONFLICT
 * DO NOTHING, then read the winner (only such a race uses up an id).
 */
export async function addSource(
  db: Db,
  spec: SourceSpec,
  mode: GithubMode,
): Promise<{ source: EventSource; created: boolean }> {
  const found = await findSource(db, spec, mode);
  if (found) return { source: found, created: false };
  const inserted = await db
    .insertInto('event_sources')
    .values({
      kind: spec.kind,
      target: targetOf(spec),
      mode,
      commits_enabled: commitsEnabledFor(spec.kind),
      // Due at once, to the millisecond: now()'s microseconds would leave a new source not
      // yet due for a process whose (millisecond) clock reads the same millisecond.
      next_poll_at: sql<Date>`date_trunc('milliseconds', now())`,
    })
    .onConflict((oc) => oc.doNothing())
    .returningAll()
    .executeTakeFirst();
  if (inserted) {
    forgetCommitsTargets(db);
    return { source: inserted, created: true };
  }
  const existing = await findSource(db, spec, mode);
  if (!existing)
    throw new Error(
      `source ${describeSource({ kind: spec.kind, target: targetOf(spec) })} conflicted but was not found`,
    );
  return { source: existing, created: false };
}

export async function listSources(
  db: Db,
  filter: { mode?: GithubMode } = {},
): Promise<EventSource[]> {
  let q = db.selectFrom('event_sources').selectAll().orderBy('id');
  if (filter.mode) q = q.where('mode', '=', filter.mode);
  return q.execute();
}

export async function getSource(db: Db, id: number): Promise<EventSource> {
  const source = await db
    .selectFrom('event_sources')
    .selectAll()
    .where('id', '=', String(id))
    .executeTakeFirst();
  if (!source) throw new NotFound('source', id);
  return source;
}

/**
 * Enables or disables a source. Enabling also clears the failure ladder and the deaths that
 * set it aside, and makes the source due now: an operator who re-enables a source wants it
 * polled, not backed off. (`enable` on an enabled source is how a set-aside one is retried.)
 */
export async function setSourceEnabled(db: Db, id: number, enabled: boolean): Promise<EventSource> {
  const updated = await db
    .updateTable('event_sources')
    .set(
      enabled
        ? {
            enabled,
            consecutive_failures: 0,
            // A source set aside after its polls died is the operator's to retry.
            poll_deaths: 0,
            next_poll_at: sql`now()`,
            updated_at: sql`now()`,
          }
        : { enabled, updated_at: sql`now()` },
    )
    .where('id', '=', String(id))
    .returningAll()
    .executeTakeFirst();
  if (!updated) throw new NotFound('source', id);
  forgetCommitsTargets(db);
  return updated;
}

/**
 * Turns commits on or off for a source: from now on, pushes it targets are stored `pending`
 * (fetched) or `skipped`. Pushes already stored keep their state.
 */
export async function setSourceCommits(db: Db, id: number, on: boolean): Promise<EventSource> {
  const updated = await db
    .updateTable('event_sources')
    .set({ commits_enabled: on, updated_at: sql`now()` })
    .where('id', '=', String(id))
    .returningAll()
    .executeTakeFirst();
  if (!updated) throw new NotFound('source', id);
  forgetCommitsTargets(db);
  return updated;
}

/**
 * Seeds the sources listed in SOURCES (bin/setup), in the process's mode. Idempotent;
 * returns only the sources this call created.
 */
export async function seedSources(db: Db, config: Config): Promise<EventSource[]> {
  const added: EventSource[] = [];
  for (const spec of parseSourcesList(config.sources)) {
    const { source, created } = await addSource(db, spec, config.github.mode);
    if (created) added.push(source);
  }
  return added;
}
