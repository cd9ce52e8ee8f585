import { sql } from 'kysely';
import type { Db } from '../db/pool.ts';

/**
 * Who gets commits (ADR 0070): a push is targeted when its repository (full name), its
 * organisation (the repository's owner) or its actor (login) is the target of an enabled
 * source whose commits are on — whichever way the push arrived. Read once per batch from
 * event_sources into three sets (names compared without case, as GitHub does), so deciding
 * for a push is three set probes, never a query.
 */
export interface CommitsTargets {
  readonly repositories: ReadonlySet<string>;
  readonly owners: ReadonlySet<string>;
  readonly actors: ReadonlySet<string>;
}

export const NO_TARGETS: CommitsTargets = {
  repositories: new Set(),
  owners: new Set(),
  actors: new Set(),
};

export interface TargetedPush {
  actor: { login: string };
  repository: { fullName: string };
}

export function isTargeted(targets: CommitsTargets, push: TargetedPush): boolean {
  const repo = push.repository.fullName.toLowerCase();
  if (targets.repositories.has(repo)) return true;
  const slash = repo.indexOf('/');
  if (slash > 0 && targets.owners.has(repo.slice(0, slash))) return true;
  return targets.actors.has(push.actor.login.toLowerCase());
}

export async function loadCommitsTargets(db: Db): Promise<CommitsTargets> {
  const r = await sql<{ kind: string; target: string }>`
    SELECT DISTINCT kind, lower(target) AS target FROM event_sources
    WHERE enabled AND commits_enabled AND target IS NOT NULL`.execute(db);
  const repositories = new Set<string>();
  const owners = new Set<string>();
  const actors = new Set<string>();
  for (const { kind, target } of r.rows) {
    if (kind === 'repo') repositories.add(target);
    else if (kind === 'org') owners.add(target);
    else if (kind === 'user') actors.add(target);
  }
  return { repositories, owners, actors };
}

/**
 * The targets, read at most once per `ttlMs` per database: a poll writes a page every few
 * hundred milliseconds, and event_sources may hold 10,000 rows. A change made with
 * `bin/sources commits` reaches a running process within ttlMs.
 */
export class CommitsTargetsCache {
  readonly ttlMs: number;
  readonly #now: () => number;
  #held: { at: number; targets: Promise<CommitsTargets> } | null = null;

  constructor(ttlMs = 10_000, now: () => number = Date.now) {
    if (!Number.isFinite(ttlMs) || ttlMs < 0) throw new RangeError('ttlMs must be >= 0');
    this.ttlMs = ttlMs;
    this.#now = now;
  }

  get(db: Db): Promise<CommitsTargets> {
    const at = this.#now();
    if (this.#held && at - this.#held.at < this.ttlMs) return this.#held.targets;
    const targets = loadCommitsTargets(db);
    this.#held = { at, targets };
    // A failed read is not kept: the next batch asks again.
    targets.catch(() => {
      if (this.#held?.targets === targets) this.#held = null;
    });
    return targets;
  }

  forget(): void {
    this.#held = null;
  }
}

const caches = new WeakMap<Db, CommitsTargetsCache>();

/** The process's cache for `db`: pass the pool's Db, not a transaction (one cache per pool). */
export function commitsTargets(db: Db): Promise<CommitsTargets> {
  let cache = caches.get(db);
  if (!cache) {
    cache = new CommitsTargetsCache();
    caches.set(db, cache);
  }
  return cache.get(db);
}

/** Drops what the process holds for `db` (after changing a source in-process). */
export function forgetCommitsTargets(db: Db): void {
  caches.get(db)?.forget();
}
