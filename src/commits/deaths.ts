import { sql } from 'kysely';
import { ladderSeconds, MAX_DEATHS } from '../platform/attempts.ts';
import type { Db } from '../platform/db/pool.ts';
import { writeIfOurs } from '../work/leased-rows.ts';
import { batchStillOurs, type CommitsClaim, claimArrays, claimKey, stillOurs } from './claim.ts';

/**
 * Commit fetches that killed their process (ADR 0120), as gap fills'.
 *
 * A request about a push is in flight from just before it is sent until its answer (or
 * failure) is read: the push's attempt is open (commits_fetch_started_at set) for exactly
 * that long, with how many pushes the request asks about (commits_fetch_group). A REST
 * compare asks about one push and opens its attempt before its first request, in one
 * committed statement (openFetchAttempt: commits_attempts + 1, commits_next_attempt_at on
 * the backoff ladder); every settle of the push (state.ts) closes it. A GraphQL batch opens
 * an attempt on the pushes of each query as the query is marked sent (openQueryAttempts) and
 * closes them once its answer is read (closeQueryAttempts): a push whose query was never sent,
 * or was answered, has no attempt open when its batch dies.
 *
 * A process that dies with a request in flight leaves the attempt open; its lease lapses and
 * the next claim finds it (the claim's `diedInFlight`) and charges the death:
 * - to the push alone when it was the request's only push (commits_deaths): the second such
 *   death sets the push aside, `failed`, with commits_error naming why — never a crash loop;
 * - to each push of a batch query when there were several (commits_batch_deaths): any one of
 *   them may have killed it, so each is a suspect, asked alone from then on (a second death
 *   is then its own), and never set aside for a batch's death.
 *
 * Any fetcher charges the deaths its claims found before its first request, and skips a push
 * it sets aside; a fetcher that gives a claim back without an answer (the budget said no
 * after all, the gate stayed busy) calls abandonFetchAttempt.
 */

export type OpenedFetch =
  /** The attempt is open and committed: send the request. */
  | { kind: 'opened'; attempts: number; deaths: number; nextAttemptAt: Date }
  /** Set aside (`failed`): its fetches died too often, or its last allowed attempt died. */
  | { kind: 'set_aside'; attempts: number; deaths: number; reason: string }
  /** The lease was no longer ours: another fetcher has the push. */
  | { kind: 'lost' };

interface Row {
  attempts: number;
  deaths: number;
  set_aside: boolean;
  next_at: Date;
  error: string | null;
}

/**
 * The open attempt was this push's alone (a REST compare, a query about it alone, or one
 * opened before commits_fetch_group existed): the push's own death, not a batch's.
 */
const aloneDeath = sql<boolean>`(commits_fetch_started_at IS NOT NULL
  AND coalesce(commits_fetch_group, 1) = 1)`;
/** The open attempt was a batch query's, about this push and others: a suspect's. */
const batchDeath = sql<boolean>`(commits_fetch_started_at IS NOT NULL
  AND coalesce(commits_fetch_group, 1) > 1)`;

/** The verdict on a push whose death `cur` counted: set aside, or not yet. */
const setAside = (maxAttempts: number) =>
  sql<boolean>`deaths >= ${MAX_DEATHS} OR (died_at IS NOT NULL AND attempts >= ${maxAttempts})`;

/** The counted deaths written to the push (alias p) from its verdict (alias v). */
const deathsCounted = sql`
      commits_deaths = v.deaths,
      commits_batch_deaths = v.batch_deaths,
      commits_state = CASE WHEN v.set_aside THEN 'failed' ELSE p.commits_state END,
      commits_error = CASE
        WHEN v.deaths >= ${MAX_DEATHS} THEN format(
          'the fetch of this push killed its process %s times (killed, or out of memory; last attempt started %s); not retried',
          v.deaths, to_char(v.died_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS "UTC"'))
        WHEN v.set_aside THEN format(
          'the last of %s attempts died before it ended (killed, or out of memory); not retried',
          v.attempts)
        ELSE p.commits_error END`;

/**
 * Before the first request for a claimed push: count the death an open attempt stands for,
 * then either set the push aside or open this attempt — one statement, committed before any
 * byte is sent.
 */
export async function openFetchAttempt(
  db: Db,
  claim: CommitsClaim,
  o: { now: Date; maxAttempts: number },
): Promise<OpenedFetch> {
  const attempts = claim.attempts + 1;
  const nextAt = new Date(o.now.getTime() + ladderSeconds('commits', attempts) * 1000);
  const r = await sql<Row>`
    WITH cur AS (
      SELECT commits_deaths + ${aloneDeath}::int AS deaths,
             commits_batch_deaths + ${batchDeath}::int AS batch_deaths,
             CASE WHEN ${aloneDeath} THEN commits_fetch_started_at END AS died_at,
             commits_attempts AS attempts
      FROM push_events WHERE ${stillOurs(claim)} FOR UPDATE
    ),
    verdict AS (
      SELECT deaths, batch_deaths, died_at, attempts, ${setAside(o.maxAttempts)} AS set_aside
      FROM cur
    )
    UPDATE push_events p SET
      ${deathsCounted},
      commits_attempts = CASE WHEN v.set_aside THEN p.commits_attempts ELSE ${attempts}::int END,
      commits_next_attempt_at = CASE WHEN v.set_aside THEN p.commits_next_attempt_at
        ELSE ${nextAt}::timestamptz END,
      commits_fetch_started_at = CASE WHEN v.set_aside THEN NULL ELSE ${o.now}::timestamptz END,
      commits_fetch_group = CASE WHEN v.set_aside THEN NULL ELSE 1 END,
      commits_claimed_until = CASE WHEN v.set_aside THEN NULL ELSE p.commits_claimed_until END
    FROM verdict v
    WHERE ${stillOursAs(claim)}
    RETURNING p.commits_attempts AS attempts, p.commits_deaths AS deaths, v.set_aside,
      p.commits_next_attempt_at AS next_at, p.commits_error AS error`.execute(db);
  const row = r.rows[0];
  if (!row) return { kind: 'lost' };
  if (row.set_aside) {
    return { kind: 'set_aside', attempts: row.attempts, deaths: row.deaths, reason: row.error! };
  }
  return { kind: 'opened', attempts: row.attempts, deaths: row.deaths, nextAttemptAt: row.next_at };
}

/**
 * An opened attempt given back without an answer that says anything about the push (the
 * budget or the share said no after all, the gate stayed busy, a failure that is not the
 * push's): its count and backoff undone, the push due again, the lease as before the claim.
 */
export function abandonFetchAttempt(db: Db, claim: CommitsClaim, now: Date): Promise<boolean> {
  return writeIfOurs(
    db,
    'push_events',
    stillOurs(claim),
    sql`commits_attempts = ${claim.attempts},
      commits_fetch_started_at = NULL,
      commits_fetch_group = NULL,
      commits_next_attempt_at = LEAST(commits_next_attempt_at, ${now}::timestamptz),
      commits_claimed_until = ${claim.previousLease}::timestamptz`,
  );
}

/** stillOurs on the alias `p` (the UPDATE … FROM above). */
function stillOursAs(claim: CommitsClaim) {
  return sql`p.repository_id = ${claim.repositoryId}::bigint AND p.ref = ${claim.ref}
    AND p.before = ${claim.before} AND p.head = ${claim.head}
    AND p.commits_state IN ('pending', 'unverified')
    AND p.commits_claimed_until = ${claim.lease}::timestamptz`;
}

/** What a batch's claim found for one push whose last fetch died with a request in flight. */
export type ChargedDeath =
  | { kind: 'charged'; deaths: number; batchDeaths: number }
  | { kind: 'set_aside'; deaths: number; reason: string };

/**
 * A batch's claims that found a request in flight (`diedInFlight`): each death charged as
 * openFetchAttempt charges it — the push's own when it was asked alone, a suspect's when its
 * query asked about others too — in one statement, the attempt closed, no new one opened (a
 * batch opens attempts query by query). A push whose own second death this is, or whose last
 * allowed attempt died alone, is set aside. Keyed by claimKey; a claim no longer ours is absent.
 */
export async function chargeDeaths(
  db: Db,
  claims: readonly CommitsClaim[],
  o: { maxAttempts: number },
): Promise<Map<string, ChargedDeath>> {
  const out = new Map<string, ChargedDeath>();
  if (claims.length === 0) return out;
  const a = claimArrays(claims);
  const r = await sql<{
    repository_id: string;
    ref: string;
    before: string;
    head: string;
    deaths: number;
    batch_deaths: number;
    set_aside: boolean;
    error: string | null;
  }>`
    WITH cur AS (
      SELECT p.repository_id, p.ref, p.before, p.head,
             p.commits_deaths + ${aloneDeath}::int AS deaths,
             p.commits_batch_deaths + ${batchDeath}::int AS batch_deaths,
             CASE WHEN ${aloneDeath} THEN p.commits_fetch_started_at END AS died_at,
             p.commits_attempts AS attempts
      FROM push_events p
      JOIN unnest(${a.ids}::bigint[], ${a.refs}::text[], ${a.befores}::text[], ${a.heads}::text[],
                  ${a.leases}::timestamptz[]) AS v(repository_id, ref, before, head, lease)
        ON ${batchStillOurs}
      FOR UPDATE OF p
    ),
    verdict AS (
      SELECT *, ${setAside(o.maxAttempts)} AS set_aside
      FROM cur
    )
    UPDATE push_events p SET
      ${deathsCounted},
      commits_fetch_started_at = NULL,
      commits_fetch_group = NULL,
      commits_claimed_until = CASE WHEN v.set_aside THEN NULL ELSE p.commits_claimed_until END
    FROM verdict v
    WHERE p.repository_id = v.repository_id AND p.ref = v.ref AND p.before = v.before
      AND p.head = v.head
    RETURNING p.repository_id::text AS repository_id, p.ref, p.before, p.head,
      p.commits_deaths AS deaths, p.commits_batch_deaths AS batch_deaths, v.set_aside,
      p.commits_error AS error`.execute(db);
  for (const row of r.rows) {
    const key = claimKey({ ...row, repositoryId: row.repository_id });
    out.set(
      key,
      row.set_aside
        ? { kind: 'set_aside', deaths: row.deaths, reason: row.error! }
        : { kind: 'charged', deaths: row.deaths, batchDeaths: row.batch_deaths },
    );
  }
  return out;
}

/**
 * A batch query about `claims` is being sent (its ledger row marked sent): their attempts open
 * together, as one request's (commits_fetch_group = how many). Asked alone, the attempt is
 * counted and backed off as a REST compare's is; asked with others, only backed off — a death
 * now makes each a suspect, not a failure (chargeDeaths). Returns the claims no longer ours.
 */
export async function openQueryAttempts(
  db: Db,
  claims: readonly CommitsClaim[],
  now: Date,
): Promise<CommitsClaim[]> {
  if (claims.length === 0) return [];
  const a = claimArrays(claims);
  const counted = claims.length === 1 ? 1 : 0;
  const attempts = claims.map((c) => c.attempts + counted);
  const nextAt = claims.map(
    (c) => new Date(now.getTime() + ladderSeconds('commits', c.attempts + 1) * 1000),
  );
  const r = await sql<{ repository_id: string; ref: string; before: string; head: string }>`
    UPDATE push_events p SET
      commits_fetch_started_at = ${now}::timestamptz,
      commits_fetch_group = ${claims.length}::int,
      commits_attempts = v.attempts,
      commits_next_attempt_at = v.next_at
    FROM unnest(${a.ids}::bigint[], ${a.refs}::text[], ${a.befores}::text[], ${a.heads}::text[],
                ${a.leases}::timestamptz[], ${attempts}::int[], ${nextAt}::timestamptz[])
      AS v(repository_id, ref, before, head, lease, attempts, next_at)
    WHERE ${batchStillOurs}
    RETURNING p.repository_id::text AS repository_id, p.ref, p.before, p.head`.execute(db);
  const ours = new Set(r.rows.map((row) => claimKey({ ...row, repositoryId: row.repository_id })));
  return claims.filter((c) => !ours.has(claimKey(c)));
}

/**
 * The query's answer (or its failure) is in: the attempts it opened are closed and undone —
 * the push is not in flight, and nothing is counted against it until its outcome is (the
 * settle, or the ladder's markFailedAttempt, counts from the claim's attempts).
 */
export async function closeQueryAttempts(
  db: Db,
  claims: readonly CommitsClaim[],
  now: Date,
): Promise<void> {
  if (claims.length === 0) return;
  const a = claimArrays(claims);
  const attempts = claims.map((c) => c.attempts);
  await sql`
    UPDATE push_events p SET
      commits_fetch_started_at = NULL,
      commits_fetch_group = NULL,
      commits_attempts = v.attempts,
      commits_next_attempt_at = LEAST(p.commits_next_attempt_at, ${now}::timestamptz)
    FROM unnest(${a.ids}::bigint[], ${a.refs}::text[], ${a.befores}::text[], ${a.heads}::text[],
                ${a.leases}::timestamptz[], ${attempts}::int[])
      AS v(repository_id, ref, before, head, lease, attempts)
    WHERE ${batchStillOurs}`.execute(db);
}
