import { sql } from 'kysely';
import { forgetCommitsTargets } from '../commits/targets.ts';
import type { Config } from '../config.ts';
import type { Db } from '../db/pool.ts';
import type { EventSource, GithubMode, SourceKind } from '../db/schema.ts';
import { AppError, ConfigError, NotFound } from '../errors.ts';
import { quoted } from '../quote.ts';

/**
 * Event sources: the feeds we poll. One row per (kind, target, mode); a process only
 * ever polls sources of its own GITHUB_MODE (a live worker must never ask api.github.com
 * for a fixture source, and vice versa).
 */

export type SourceSpec =
  | { kind: 'public' }
  | { kind: Exclude<SourceKind, 'public'>; target: string };

export const SOURCE_KINDS: readonly SourceKind[] = ['public', 'repo', 'org', 'user'];

/** A source description that is not what GitHub would accept. */
export class InvalidSource extends AppError {
  constructor(message: string) {
    super('INVALID_SOURCE', message);
  }
}

// GitHub's rules: a login (user or org) is 1–39 characters, letters, digits and hyphens,
// not starting or ending with a hyphen. (New accounts cannot have "--", but some old ones
// do, so it is allowed.) A repository name is 1–100 of letters, digits, '.', '_', '-',
// and never "." or "..".
const LOGIN = /^[A-Za-z0-9](?:[A-Za-z0-9-]{0,37}[A-Za-z0-9])?$/;
const REPO_NAME = /^[A-Za-z0-9._-]{1,100}$/;

function checkLogin(what: string, value: string): string {
  if (!LOGIN.test(value)) {
    throw new InvalidSource(
      `${what} ${quoted(value)} is not a GitHub login (1-39 letters, digits or hyphens; no leading or trailing hyphen)`,
    );
  }
  return value;
}

/** Validates a kind and its target; returns the canonical spec. */
export function sourceSpec(kind: string, target?: string | null): SourceSpec {
  const t = target?.trim() || undefined;
  switch (kind) {
    case 'public':
      if (t !== undefined) throw new InvalidSource('a public source takes no target');
      return { kind: 'public' };
    case 'org':
    case 'user':
      if (t === undefined) throw new InvalidSource(`a ${kind} source needs a login`);
      return { kind, target: checkLogin(kind, t) };
    case 'repo': {
      if (t === undefined) throw new InvalidSource('a repo source needs OWNER/NAME');
      const parts = t.split('/');
      if (parts.length !== 2) throw new InvalidSource(`repo ${quoted(t)} is not OWNER/NAME`);
      const [owner, name] = parts as [string, string];
      checkLogin('repo owner', owner);
      if (!REPO_NAME.test(name) || name === '.' || name === '..') {
        throw new InvalidSource(
          `repo name ${quoted(name)} is not a GitHub repository name (1-100 letters, digits, '.', '_' or '-')`,
        );
      }
      return { kind: 'repo', target: `${owner}/${name}` };
    }
    default:
      throw new InvalidSource(
        `unknown source kind ${quoted(kind)} (expected ${SOURCE_KINDS.join(', ')})`,
      );
  }
}

/**
 * Parses SOURCES: comma-separated `public`, `repo:OWNER/NAME`, `org:ORG`, `user:LOGIN`.
 * Blank entries (a trailing comma) are ignored; anything else bad is a ConfigError.
 */
export function parseSourcesList(raw: string): SourceSpec[] {
  const specs: SourceSpec[] = [];
  for (const entry of raw.split(',').map((e) => e.trim())) {
    if (entry === '') continue;
    const colon = entry.indexOf(':');
    const kind = colon === -1 ? entry : entry.slice(0, colon);
    const target = colon === -1 ? undefined : entry.slice(colon + 1);
    try {
      specs.push(sourceSpec(kind.trim().toLowerCase(), target));
    } catch (err) {
      if (err instanceof InvalidSource) {
        throw new ConfigError('SOURCES', `has a bad entry ${quoted(entry)}: ${err.message}`);
      }
      throw err;
    }
  }
  return specs;
}

/**
 * Whether a new source asks for its pushes' commits (ADR 0070): a repository, organisation
 * or user is followed on purpose; the public timeline is strangers' pushes, whose commits
 * would spend the background allowance for nobody, so it starts off.
 */
export function commitsEnabledFor(kind: SourceKind): boolean {
  return kind !== 'public';
}

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
 * Safe against a concurrent add: ON CONFLICT DO NOTHING, then read the winner.
 */
export async function addSource(
  db: Db,
  spec: SourceSpec,
  mode: GithubMode,
): Promise<{ source: EventSource; created: boolean }> {
  const inserted = await db
    .insertInto('event_sources')
    .values({
      kind: spec.kind,
      target: targetOf(spec),
      mode,
      commits_enabled: commitsEnabledFor(spec.kind),
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
 * Enables or disables a source. Enabling also clears the failure ladder and makes the
 * source due now: an operator who re-enables a source wants it polled, not backed off.
 */
export async function setSourceEnabled(db: Db, id: number, enabled: boolean): Promise<EventSource> {
  const updated = await db
    .updateTable('event_sources')
    .set(
      enabled
        ? { enabled, consecutive_failures: 0, next_poll_at: sql`now()`, updated_at: sql`now()` }
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
 * Turns commits on or off for a source (ADR 0070): from now on, pushes it targets are
 * stored `pending` (fetched) or `skipped`. Pushes already stored keep their state.
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
