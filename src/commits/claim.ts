import { sql } from 'kysely';
import type { EnrichmentState } from '../platform/db/columns.ts';
import type { Db } from '../platform/db/pool.ts';
import { dueSql } from '../work/commits-due.ts';
import { writeIfOurs } from '../work/leased-rows.ts';

/**
 * Claiming the next pending push to fetch commits for, under a lease (ADR 0071), like an
 * entity claim: `commits_claimed_until` is the only thing a claim writes on the
 * push, so a fetcher that dies mid-request leaves a lease that simply expires.
 *
 * The policy is fair ACROSS repositories: among the repositories with a due push, the one
 * served least recently (commit_fetch_turns; never served first), then the one whose
 * oldest due push is oldest; within it, its oldest due push. A repository pushing 10,000
 * times is one candidate among the others, so it gets one turn in N, not the budget.
 *
 * Concurrent claimers (processes, or lanes of one cycle) never take one push: the
 * pick is `FOR UPDATE SKIP LOCKED`, and the lease it writes is unique to the claim (a random
 * sub-millisecond part), which every later write checks (stillOurs).
 */

/** The push's natural key (push_events_natural_key), as stored. */
export interface PushKey {
  /** Decimal string: 64-bit. */
  repositoryId: string;
  ref: string;
  before: string;
  head: string;
}

export interface CommitsClaim extends PushKey {
  attempts: number;
  /** The repository's full name and default branch as stored when claimed (null: unknown). */
  fullName: string | null;
  defaultBranch: string | null;
  repositoryState: EnrichmentState | null;
  /**
   * The lease as Postgres text (microseconds kept): what proves the claim is still ours. A
   * batch that renews its leases (renewClaims) writes the new one here.
   */
  lease: string;
  previousLease: string | null;
  /** commits_error as the claim found it (why the last attempt did not end the push). */
  lastError: string | null;
  /** Fetches of this push alone, and batch queries about it, that died mid-request. */
  deaths: number;
  batchDeaths: number;
  /** A request about it was in flight when its last fetcher stopped: a death to charge. */
  diedInFlight: boolean;
}

export interface CommitsClaimOptions {
  now: Date;
  leaseSeconds: number;
}

// How many repositories the claim orders before locking: enough that a few claimers at once
// each find an unlocked push (SKIP LOCKED) without walking every candidate's pushes.
const CANDIDATES = 8;

interface ClaimRow {
  repository_id: string;
  ref: string;
  before: string;
  head: string;
  attempts: number;
  lease: string;
  prev_until: string | null;
  full_name: string | null;
  default_branch: string | null;
  enrichment_state: EnrichmentState | null;
  last_error: string | null;
  deaths: number;
  batch_deaths: number;
  died_in_flight: boolean;
}

/**
 * The repositories that have pushes for the fetcher (pending or unverified), one index
 * probe each however many pushes they hold (a skip scan of push_events_commits_pending_repo).
 */
export function pendingRepositoriesCte() {
  return sql`
    repos (repository_id) AS (
      (SELECT repository_id FROM push_events WHERE commits_state IN ('pending', 'unverified')
       ORDER BY repository_id LIMIT 1)
      UNION ALL
      SELECT (SELECT p.repository_id FROM push_events p
              WHERE p.commits_state IN ('pending', 'unverified')
                AND p.repository_id > r.repository_id
              ORDER BY p.repository_id LIMIT 1)
      FROM repos r WHERE r.repository_id IS NOT NULL
    )`;
}

/** The claim as a statement (exported so a test can EXPLAIN it). */
export function claimStatement(opts: CommitsClaimOptions) {
  const leaseUntil = new Date(opts.now.getTime() + opts.leaseSeconds * 1000);
  return sql<ClaimRow>`
    WITH RECURSIVE ${pendingRepositoriesCte()},
    cand AS (
      SELECT r.repository_id, d.next_at, t.served_at
      FROM repos r
      CROSS JOIN LATERAL (
        SELECT p.commits_next_attempt_at AS next_at FROM push_events p
        WHERE p.repository_id = r.repository_id AND ${dueSql('p', opts.now)}
        ORDER BY p.commits_next_attempt_at LIMIT 1
      ) d
      LEFT JOIN commit_fetch_turns t ON t.repository_id = r.repository_id
      WHERE r.repository_id IS NOT NULL
      ORDER BY t.served_at NULLS FIRST, d.next_at, r.repository_id
      LIMIT ${CANDIDATES}
    ),
    pick AS (
      SELECT x.* FROM cand CROSS JOIN LATERAL (
        SELECT p.repository_id, p.ref, p.before, p.head,
               p.commits_claimed_until::text AS prev_until
        FROM push_events p
        WHERE p.repository_id = cand.repository_id AND ${dueSql('p', opts.now)}
        ORDER BY p.commits_next_attempt_at, p.created_at
        LIMIT 1
        FOR UPDATE OF p SKIP LOCKED
      ) x
      ORDER BY cand.served_at NULLS FIRST, cand.next_at, cand.repository_id
      LIMIT 1
    ),
    claimed AS (
      UPDATE push_events t
      -- A random sub-millisecond part makes each lease unique: it is the claim's identity.
      SET commits_claimed_until = ${leaseUntil}::timestamptz
            + make_interval(secs => floor(random() * 1000) / 1000000.0)
      FROM pick
      WHERE t.repository_id = pick.repository_id AND t.ref = pick.ref
        AND t.before = pick.before AND t.head = pick.head
      RETURNING t.repository_id, t.ref, t.before, t.head, t.commits_attempts AS attempts,
        t.commits_claimed_until::text AS lease, pick.prev_until, t.commits_error AS last_error,
        t.commits_deaths AS deaths, t.commits_batch_deaths AS batch_deaths,
        t.commits_fetch_started_at IS NOT NULL AS died_in_flight
    ),
    turn AS (
      INSERT INTO commit_fetch_turns (repository_id, served_at)
      SELECT repository_id, ${opts.now}::timestamptz FROM claimed
      ON CONFLICT (repository_id) DO UPDATE SET served_at = EXCLUDED.served_at
    )
    SELECT claimed.repository_id::text AS repository_id, claimed.ref, claimed.before,
      claimed.head, claimed.attempts, claimed.lease, claimed.prev_until, claimed.last_error,
      claimed.deaths, claimed.batch_deaths, claimed.died_in_flight, repo.full_name, repo.default_branch, repo.enrichment_state
    FROM claimed LEFT JOIN repositories repo ON repo.id = claimed.repository_id`;
}

/** Claims the next due pending push by the fair policy, or returns null when none is due. */
export async function claimNextPush(
  db: Db,
  opts: CommitsClaimOptions,
): Promise<CommitsClaim | null> {
  const r = await claimStatement(opts).execute(db);
  const row = r.rows[0];
  if (!row) return null;
  return {
    repositoryId: row.repository_id,
    ref: row.ref,
    before: row.before,
    head: row.head,
    attempts: row.attempts,
    fullName: row.full_name,
    defaultBranch: row.default_branch,
    repositoryState: row.enrichment_state,
    lease: row.lease,
    previousLease: row.prev_until,
    lastError: row.last_error,
    deaths: row.deaths,
    batchDeaths: row.batch_deaths,
    diedInFlight: row.died_in_flight,
  };
}

/**
 * The WHERE that proves a claim is still ours: the push, still waiting for the fetcher
 * (pending, or unverified: a mirror's commits to prove), under our lease.
 */
export function stillOurs(claim: CommitsClaim) {
  return sql`repository_id = ${claim.repositoryId}::bigint AND ref = ${claim.ref}
    AND before = ${claim.before} AND head = ${claim.head}
    AND commits_state IN ('pending', 'unverified')
    AND commits_claimed_until = ${claim.lease}::timestamptz`;
}

/** Gives a claim back untouched (the budget said no). False when the lease was no longer ours. */
export function releasePush(db: Db, claim: CommitsClaim): Promise<boolean> {
  return writeIfOurs(
    db,
    'push_events',
    stillOurs(claim),
    sql`commits_claimed_until = ${claim.previousLease}::timestamptz`,
  );
}

/** The claims as parallel arrays, for statements over a batch's pushes (unnest). */
export function claimArrays(claims: readonly CommitsClaim[]) {
  return {
    ids: claims.map((c) => c.repositoryId),
    refs: claims.map((c) => c.ref),
    befores: claims.map((c) => c.before),
    heads: claims.map((c) => c.head),
    leases: claims.map((c) => c.lease),
  };
}

/**
 * stillOurs for a batch's statements: the push `p` is the claim `v` (a row of claimArrays,
 * unnested), still waiting for the fetcher, under that claim's lease.
 */
export const batchStillOurs = sql`p.repository_id = v.repository_id AND p.ref = v.ref
  AND p.before = v.before AND p.head = v.head AND p.commits_state IN ('pending', 'unverified')
  AND p.commits_claimed_until = v.lease`;

/** The key a batch's statements return a push by. */
export const claimKey = (c: PushKey) => `${c.repositoryId}|${c.ref}|${c.before}|${c.head}`;

/**
 * Renews the leases of a batch's claims still ours, to `seconds` from `now`: a
 * batch runs for as long as its rounds and fallbacks take, so it renews before each step for
 * as long as that step may take, and no other fetcher takes a push it is still working on.
 * Each renewed lease is new (a fresh sub-millisecond part, as a claim's) and written back
 * into its claim; the claims no longer ours are returned (another fetcher has them).
 */
export async function renewClaims(
  db: Db,
  claims: readonly CommitsClaim[],
  o: { now: Date; seconds: number },
): Promise<CommitsClaim[]> {
  if (claims.length === 0) return [];
  const until = new Date(o.now.getTime() + o.seconds * 1000);
  const a = claimArrays(claims);
  const r = await sql<{
    repository_id: string;
    ref: string;
    before: string;
    head: string;
    lease: string;
  }>`
    UPDATE push_events p
    SET commits_claimed_until = ${until}::timestamptz
          + make_interval(secs => floor(random() * 1000) / 1000000.0)
    FROM unnest(${a.ids}::bigint[], ${a.refs}::text[], ${a.befores}::text[], ${a.heads}::text[],
                ${a.leases}::timestamptz[]) AS v(repository_id, ref, before, head, lease)
    WHERE ${batchStillOurs}
    RETURNING p.repository_id::text AS repository_id, p.ref, p.before, p.head,
      p.commits_claimed_until::text AS lease`.execute(db);
  const renewed = new Map(
    r.rows.map((row) => [claimKey({ ...row, repositoryId: row.repository_id }), row.lease]),
  );
  const lost: CommitsClaim[] = [];
  for (const c of claims) {
    const lease = renewed.get(claimKey(c));
    if (lease === undefined) lost.push(c);
    else c.lease = lease;
  }
  return lost;
}
