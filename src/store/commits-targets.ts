import { sql } from 'kysely';
import type { Config } from '../platform/config/config.ts';
import type { Db } from '../platform/db/pool.ts';

/**
 * Who gets commits (ADR 0070): a push is targeted when an enabled source whose commits are
 * on covers it — whichever way the push arrived (poll, webhook, bin/backfill, gap fill,
 * another instance's archive). A `repo`, `org` or `user` source covers the pushes to its
 * repository, to its organisation's repositories (the repository's owner) or by its actor
 * (login); the `public` source covers every public push. Read once per batch from
 * event_sources into three sets and a flag (names compared without case, as GitHub does),
 * so deciding for a push is at most three set probes, never a query.
 */
export interface CommitsTargets {
  /**
   * false: the storing process has no GitHub credential, so a covered push cannot be fetched
   * now; it is stored `skipped`, waiting for one (planCommits). Absent: it has one.
   */
  readonly credential?: boolean;
  /** An enabled public source has commits on: every push not known to be private. */
  readonly publicPushes: boolean;
  readonly repositories: ReadonlySet<string>;
  readonly owners: ReadonlySet<string>;
  readonly actors: ReadonlySet<string>;
}

export const NO_TARGETS: CommitsTargets = {
  publicPushes: false,
  repositories: new Set(),
  owners: new Set(),
  actors: new Set(),
};

export interface TargetedPush {
  actor: { login: string };
  repository: { fullName: string };
  /**
   * True when the push is known to be a private repository's (a delivery's
   * `repository.private`, an event's `public: false`): the public source does not cover it.
   * Absent for an archive line (GH Archive holds public events only).
   */
  private?: boolean;
}

export function isTargeted(targets: CommitsTargets, push: TargetedPush): boolean {
  if (targets.publicPushes && push.private !== true) return true;
  const repo = push.repository.fullName.toLowerCase();
  if (targets.repositories.has(repo)) return true;
  const slash = repo.indexOf('/');
  if (slash > 0 && targets.owners.has(repo.slice(0, slash))) return true;
  return targets.actors.has(push.actor.login.toLowerCase());
}

/**
 * Why nobody gets commits in this process, or null when a source may turn them on: fetching
 * commits needs a credential (GitHub's GraphQL API refuses an anonymous caller, and 60 REST
 * requests an hour fetch next to nothing). Fixture mode answers as a credential would.
 */
export function commitsOffReason(github: Pick<Config['github'], 'mode' | 'tokens' | 'app'>) {
  if (github.mode === 'fixture' || github.tokens.length > 0 || github.app) return null;
  return 'no GitHub credential: commits are fetched with GraphQL, which needs one (set GITHUB_TOKEN, GITHUB_TOKENS or GITHUB_APP_ID)';
}

export async function loadCommitsTargets(db: Db): Promise<CommitsTargets> {
  const r = await sql<{ kind: string; target: string | null }>`
    SELECT DISTINCT kind, lower(target) AS target FROM event_sources
    WHERE enabled AND commits_enabled`.execute(db);
  let publicPushes = false;
  const repositories = new Set<string>();
  const owners = new Set<string>();
  const actors = new Set<string>();
  for (const { kind, target } of r.rows) {
    if (kind === 'public') publicPushes = true;
    else if (target === null) continue;
    else if (kind === 'repo') repositories.add(target);
    else if (kind === 'org') owners.add(target);
    else if (kind === 'user') actors.add(target);
  }
  return { publicPushes, repositories, owners, actors };
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

/**
 * The targets a batch stores with: the cached read of event_sources, marked `credential:
 * false` when this process has none (`off`: commitsOffReason said why) — its covered pushes
 * then wait for a credential instead of being fetched.
 */
export async function commitsTargetsFor(off: boolean, db: Db): Promise<CommitsTargets> {
  const targets = await commitsTargets(db);
  return off ? { ...targets, credential: false } : targets;
}

/** Drops what the process holds for `db` (after changing a source in-process). */
export function forgetCommitsTargets(db: Db): void {
  caches.get(db)?.forget();
}
