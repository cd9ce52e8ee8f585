import { type RawBuilder, sql } from 'kysely';
import { routeTemplate } from '../github/pacing.ts';
import type { RequestPurpose } from '../platform/db/columns.ts';
import { int4Key, LockSpace } from '../platform/db/locks.ts';
import type { Db } from '../platform/db/pool.ts';
import { GENERIC_PLANS, prepared } from '../platform/db/prepared.ts';
import { ASYNC_COMMIT, type ReservationRow, SPENDS_QUOTA, UNSPECIFIED_PATH } from './ledger.ts';
import { allowsSql, decide, roomSql } from './spend-rule.ts';
import { type BudgetDecision, isBackground, type Refusal } from './types.ts';
import {
  type BudgetPolicy,
  type CredentialPolicy,
  POINTS,
  type StateRow,
  stateCtes,
  windowCtes,
  windowFloor,
} from './window.ts';

/**
 * Reservations against the pool of credentials (ADR 0003). Each credential has
 * its own window, allowance split and ledger rows; a request of a purpose goes to the
 * credential with the most of that purpose's allowance left, and the pool says no only
 * when every credential does — with the earliest time any of them frees.
 */

type Meta = Omit<ReservationRow, 'credential' | 'purpose'>;
type Trx = Parameters<Parameters<ReturnType<Db['transaction']>['execute']>[0]>[0];

/**
 * The reservation statement reserveOn runs (a test plans it generically): prepared, and
 * where the transaction asked for it planned once a session (src/platform/db/prepared.ts).
 */
export function reservationStatement(
  cred: CredentialPolicy,
  share: number,
  purpose: RequestPurpose,
  meta: Meta,
  /** The open requests the pick saw on `cred` (NULL: no pick to check). */
  seen: number | null = null,
) {
  const now = meta.now;
  const points = meta.points ?? 1;
  return prepared(sql<StateRow & { id: string | null }>`
    WITH ${stateCtes([cred], now)},
    ins AS (
      INSERT INTO github_requests (credential, purpose, method, path, outcome, reserved_at,
        job_id, run_id, entity_class, entity_id, points)
      SELECT st.credential, ${purpose}, ${meta.method ?? 'GET'}, ${meta.path ?? UNSPECIFIED_PATH},
        'reserved', ${now}::timestamptz, ${meta.jobId ?? null}::text, ${meta.runId ?? null}::bigint,
        ${meta.entity?.class ?? null}::text, ${meta.entity?.id ?? null}::bigint,
        ${meta.points ?? null}::int
      FROM st WHERE ${allowsSql(purpose, share, now, points)}
        AND (${seen}::int IS NULL OR st.open <= ${seen}::int)
      RETURNING id
    )
    SELECT st.*, (SELECT id FROM ins) AS id FROM st`);
}

/**
 * ONE statement that reads the credential's state after its lock, applies the spend rule and
 * inserts the row when it allows it; decide() reads the same rule on the row to explain a no
 * (src/budget/spend-rule.ts: the two are one table, so they cannot disagree).
 * `seen`, from a pool's pick: the open requests its snapshot showed on `cred`. More now, under
 * the lock, is a reservation committed there after that snapshot (its lock released with
 * it): the pick read a credential as idle that is not — 'raced', nothing inserted, pick again.
 */
function reserveOn(
  trx: Trx,
  cred: CredentialPolicy,
  share: number,
  purpose: RequestPurpose,
  meta: Meta,
): Promise<BudgetDecision>;
function reserveOn(
  trx: Trx,
  cred: CredentialPolicy,
  share: number,
  purpose: RequestPurpose,
  meta: Meta,
  seen: number | null,
): Promise<BudgetDecision | 'raced'>;
async function reserveOn(
  trx: Trx,
  cred: CredentialPolicy,
  share: number,
  purpose: RequestPurpose,
  meta: Meta,
  seen: number | null = null,
): Promise<BudgetDecision | 'raced'> {
  const r = await reservationStatement(cred, share, purpose, meta, seen).execute(trx);
  const row = r.rows[0]!;
  if (row.id === null && seen !== null && row.open > seen) return 'raced';
  if (row.id === null) return decide(row, share, purpose, meta.now, meta.points ?? 1)!;
  return { ok: true, reservation: { id: Number(row.id), purpose, credential: cred.label } };
}

/**
 * The pool's answer when every credential refuses: it frees when the first of them does.
 * An auth block (401) is the reported cause only when every credential is auth-blocked —
 * one rejected token in a pool is that token's problem, not the reason work waits.
 */
export function poolRefusal(refusals: readonly Refusal[]): Refusal {
  const byTime = [...refusals].sort((a, b) => a.retryAt.getTime() - b.retryAt.getTime());
  const first = byTime[0]!;
  const allAuth = refusals.every((r) => r.reason === 'blocked' && r.blockReason === 'auth');
  if (allAuth) return first;
  const cause = byTime.find((r) => !(r.reason === 'blocked' && r.blockReason === 'auth'))!;
  return { ...cause, retryAt: first.retryAt };
}

/**
 * The candidates of CTE `from` (credential, lock_key) for which `allows` holds, in the pick's
 * order — fewest open requests, soonest pacing slot for the endpoint (a 304 leaves the room
 * unchanged: free requests must not all go to the credential with the most room while it waits
 * for its slot), most `room`, then chance — and the first of them whose budget lock nobody
 * holds (another reservation in progress on a credential read from the same snapshot
 * would take its slot first), tried one at a time. None free: wait for the best one's, unless
 * `wait` is false (the transaction already holds a budget lock: waiting for another could
 * deadlock with a transaction doing the same the other way round).
 * CTEs `ordered` and `free` (and `waited`); `picked` is the chosen credential, or NULL, and
 * `seen` its open requests in this statement's snapshot — taken before the lock, so the
 * reservation checks them again under it (reserveOn).
 */
function lockInOrder(o: {
  from: 'st' | 'ap';
  open: RawBuilder<unknown>;
  room: RawBuilder<unknown>;
  allows: RawBuilder<unknown>;
  path: string | undefined;
  now: Date;
  wait: boolean;
}) {
  const endpoint = o.path && o.path !== UNSPECIFIED_PATH ? routeTemplate(o.path) : null;
  const from = sql.table(o.from);
  const ctes = sql`ordered AS (
      SELECT ${from}.credential, ${from}.lock_key, ${o.open} AS open, row_number() OVER (
        ORDER BY ${o.open}, GREATEST(pace.next_at, ${o.now}::timestamptz), ${o.room} DESC, random()
      ) AS rank
      FROM ${from}
      LEFT JOIN github_endpoint_pace pace
        ON pace.credential = ${from}.credential AND pace.endpoint = ${endpoint}::text
      WHERE ${o.allows}
    ),
    free AS (
      SELECT f.credential FROM (SELECT * FROM ordered ORDER BY rank OFFSET 0) f
      WHERE pg_try_advisory_xact_lock(${LockSpace.budget}, f.lock_key) LIMIT 1
    )${
      o.wait
        ? sql`,
    waited AS (
      SELECT credential, pg_advisory_xact_lock(${LockSpace.budget}, lock_key)::text AS l
      FROM ordered WHERE rank = 1 AND NOT EXISTS (SELECT 1 FROM free)
    )`
        : sql``
    }`;
  const picked = o.wait
    ? sql`COALESCE((SELECT credential FROM free), (SELECT credential FROM waited))`
    : sql`(SELECT credential FROM free)`;
  const seen = sql`(SELECT ordered.open FROM ordered WHERE ordered.credential = ${picked})`;
  return { ctes, picked, seen };
}

/**
 * Pick a credential for `purpose` and take its budget lock, in one statement: among those
 * with room, the one with the fewest requests open (in flight or waiting for its gate), then
 * the soonest pacing slot for the endpoint, then the most room left, then at random — so
 * concurrent requests go to idle gates rather than queue behind one, and the spend stays even
 * (an open reservation counts as spent). The first in that order whose budget lock is free
 * wins; only when none is does it wait for the best one's.
 * The choice reads a snapshot taken before the lock, so it is only a choice: the
 * reservation statement after it decides under the lock. Returns every credential's row.
 */
async function pickAndLock(
  trx: Trx,
  policy: BudgetPolicy,
  purpose: RequestPurpose,
  now: Date,
  exclude: ReadonlySet<string>,
  path: string | undefined,
  wait: boolean,
  points = 1,
) {
  const candidates = policy.credentials.filter((c) => !exclude.has(c.label));
  const order = lockInOrder({
    from: 'st',
    open: sql`st.open`,
    room: roomSql(purpose, policy.share),
    allows: allowsSql(purpose, policy.share, now, points),
    path,
    now,
    wait,
  });
  // The reservation after it planned once a session (GENERIC_PLANS; src/platform/db/prepared.ts).
  const r = await prepared(sql<StateRow & { picked: string | null; seen: number | null }>`
    WITH ${stateCtes(candidates, now)}, ${order.ctes}
    SELECT st.*, ${order.picked} AS picked, ${order.seen} AS seen, ${ASYNC_COMMIT} AS async_commit,
      ${GENERIC_PLANS} AS generic_plans
    FROM st ORDER BY st.ord`).execute(trx);
  const picked = r.rows[0]?.picked ?? null;
  const seen = r.rows[0]?.seen ?? null;
  const refusals = r.rows.map((row) => decide(row, policy.share, purpose, now, points));
  const allRefuse = refusals.every((x) => x !== null);
  // Not waiting, every one with room may have its lock held elsewhere: contended, not a no.
  const contended = !wait && picked === null && !allRefuse;
  return {
    picked: candidates.find((c) => c.label === picked) ?? null,
    seen,
    refusals: refusals.filter((x): x is Refusal => x !== null),
    contended,
  };
}

/**
 * The pick from what is cheap to read: each candidate's whole-minute counters from
 * the first minute its window touches, its open requests, its rate-limit row and its pacing
 * slot — not the exact window the reservation statement reads. It may err either way (a
 * minute too much; only the open requests taken off the observed remaining): a wrong choice
 * costs one refusal of reserveOn and another try, never a spend. The same order as pickAndLock's, the same
 * try-then-wait on the budget lock. Only a choice: reserveOn decides, exactly, under the lock;
 * when no candidate seems to have room, pickAndLock reads them exactly (and explains a no).
 */
async function quickPickAndLock(
  trx: Trx,
  policy: BudgetPolicy,
  purpose: RequestPurpose,
  now: Date,
  exclude: ReadonlySet<string>,
  path: string | undefined,
  wait: boolean,
  points = 1,
): Promise<{ picked: CredentialPolicy; seen: number | null } | null> {
  const candidates = policy.credentials.filter((c) => !exclude.has(c.label));
  if (candidates.length === 0) return null;
  const r = await quickPickStatement(
    { ...policy, credentials: candidates },
    purpose,
    now,
    path,
    wait,
    points,
  ).execute(trx);
  const label = r.rows[0]?.picked ?? null;
  const picked = candidates.find((c) => c.label === label);
  return picked ? { picked, seen: r.rows[0]!.seen } : null;
}

/** The statement of quickPickAndLock over `policy`'s credentials (a test plans it generically). */
export function quickPickStatement(
  policy: BudgetPolicy,
  purpose: RequestPurpose,
  now: Date,
  path: string | undefined,
  wait: boolean,
  points = 1,
) {
  const floor = sql`${windowFloor(now)}::timestamptz`;
  const background = sql`floor(ap.quota * ${policy.share}::float8)`;
  const left = isBackground(purpose)
    ? sql`(${background} - ap.background)`
    : sql`(ap.quota - ${background} - ap.poll)`;
  const order = lockInOrder({
    from: 'ap',
    open: sql`ap.open`,
    room: left,
    allows: sql`(ap.blocked_until IS NULL OR ap.blocked_until <= ${now}::timestamptz)
      AND (ap.rl_quota IS NULL
        OR (CASE WHEN ap.fresh THEN ap.rl_remaining - ap.open
                 ELSE ap.quota - ap.poll - ap.background END) >= ${points}::int)
      AND ${left} >= ${points}::int`,
    path,
    now,
    wait,
  });
  return prepared(sql<{ picked: string | null; seen: number | null }>`
    WITH ${windowCtes(policy.credentials, now)},
    ap AS (
      SELECT w.*, m.poll, m.background, o.open FROM w
      CROSS JOIN LATERAL (
        SELECT COALESCE(sum(n.poll), 0)::int AS poll,
          COALESCE(sum(n.enrich + n.commits), 0)::int AS background
        FROM github_request_minutes n
        WHERE n.credential = w.credential
          AND n.minute >= date_trunc('minute', w.window_start, 'UTC') AND n.minute >= ${floor}
      ) m
      CROSS JOIN LATERAL (
        SELECT ${POINTS} AS open FROM github_requests g
        WHERE g.credential = w.credential AND g.reserved_at >= w.window_start
          AND g.reserved_at >= ${floor} AND ${SPENDS_QUOTA} AND g.finished_at IS NULL
      ) o
    ),
    ${order.ctes}
    SELECT ${order.picked} AS picked, ${order.seen} AS seen, ${ASYNC_COMMIT} AS async_commit,
      ${GENERIC_PLANS} AS generic_plans`);
}

/**
 * Reserve one request of `purpose` on the pool. One credential: its advisory lock (its own
 * statement: under READ COMMITTED a statement's snapshot is taken before it runs, so a
 * count in the statement that waited for the lock could miss the reservation committed by
 * the lock's previous holder), then the reservation statement — four round trips (BEGIN,
 * lock, statement, COMMIT). Several: the choice takes the chosen credential's lock, then the
 * same reservation statement — also four. The choice's snapshot predates its lock, so the
 * reservation statement (a new snapshot, under the lock) checks it: if another process took
 * that credential's last request meanwhile, the next best is tried; if it only put a request
 * there (the credential is no longer as idle as the choice read it), the choice is made again.
 */
export async function reserve(
  db: Db,
  policy: BudgetPolicy,
  purpose: RequestPurpose,
  meta: Meta,
  /**
   * `db` is the caller's transaction (a poll opens its run in the reservation's
   * transaction): the budget locks are held, and the row committed, with it.
   */
  inTransaction = false,
  /** Credentials not to choose (a pool only; never all of them). */
  skip: ReadonlySet<string> = new Set(),
): Promise<BudgetDecision> {
  const { credentials, share } = policy;
  const within = <T>(fn: (trx: Trx) => Promise<T>): Promise<T> =>
    inTransaction ? fn(db as Trx) : db.transaction().execute(fn);
  if (credentials.length === 1) {
    const cred = credentials[0]!;
    return within(async (trx) => {
      // Asynchronous commit: the row is visible to every other session the moment
      // it commits; only a crash of the Postgres server itself within ~200 ms could lose it.
      await sql`SELECT pg_advisory_xact_lock(${LockSpace.budget}, ${int4Key(cred.label)}),
                       ${ASYNC_COMMIT}, ${GENERIC_PLANS}`.execute(trx);
      return reserveOn(trx, cred, share, purpose, meta);
    });
  }
  const d = await reservePool(within, policy, purpose, meta, inTransaction, skip, false);
  // Waiting is allowed on the first try, so only a second try within the caller's transaction
  // can find every lock held: the pool is not spent, its locks are busy — try again shortly.
  return d ?? contendedRefusal(policy, meta.now);
}

/**
 * reserve() on a pool within the caller's transaction, never waiting for a budget lock (the
 * transaction holds one already): null when every credential with room has its lock held by
 * another transaction right now.
 */
export function reserveIfFree(
  trx: Db,
  policy: BudgetPolicy,
  purpose: RequestPurpose,
  meta: Meta,
  skip: ReadonlySet<string>,
): Promise<BudgetDecision | null> {
  return reservePool((fn) => fn(trx as Trx), policy, purpose, meta, true, skip, true);
}

function contendedRefusal(policy: BudgetPolicy, now: Date): Refusal {
  return {
    ok: false,
    reason: 'allowance',
    retryAt: new Date(now.getTime() + 1000),
    credential: policy.credentials[0]!.label,
  };
}

/**
 * How many times a pool reservation picks again after finding, under the lock, that the
 * credential it picked got a request after its snapshot. Each costs a statement (within the
 * caller's transaction) or a transaction, and only happens when reservations cross.
 */
const MAX_REPICKS = 3;

async function reservePool(
  within: <T>(fn: (trx: Trx) => Promise<T>) => Promise<T>,
  policy: BudgetPolicy,
  purpose: RequestPurpose,
  meta: Meta,
  inTransaction: boolean,
  skip: ReadonlySet<string>,
  noWait: boolean,
): Promise<BudgetDecision | null> {
  const { credentials, share } = policy;
  const lost = new Set<string>(skip);
  const refused: Refusal[] = [];
  let repicks = 0;
  for (;;) {
    // A later try within one transaction holds the lock of the credential that refused (or
    // that another reservation reached first).
    const wait = !noWait && !(inTransaction && (refused.length > 0 || repicks > 0));
    const out = await within(async (trx) => {
      // The cheap choice first; the exact one only when it sees no room anywhere.
      const pts = meta.points ?? 1;
      const quick = await quickPickAndLock(
        trx,
        policy,
        purpose,
        meta.now,
        lost,
        meta.path,
        wait,
        pts,
      );
      const exact = quick
        ? { ...quick, refusals: [], contended: false }
        : await pickAndLock(trx, policy, purpose, meta.now, lost, meta.path, wait, pts);
      if (exact.contended) return { contended: true } as const;
      if (!exact.picked) {
        return { final: true, d: poolRefusal([...refused, ...exact.refusals]) } as const;
      }
      // Past MAX_REPICKS the pick stands: others keep reaching the pool first, it is busy.
      const seen = repicks < MAX_REPICKS ? exact.seen : null;
      const d = await reserveOn(trx, exact.picked, share, purpose, meta, seen);
      if (d === 'raced') return { raced: true } as const;
      return { final: d.ok, d } as const;
    });
    if ('raced' in out) {
      // A fresh snapshot orders the credentials again, that one's new request counted.
      repicks += 1;
      continue;
    }
    if ('contended' in out)
      return refused.length
        ? { ...poolRefusal(refused), retryAt: new Date(meta.now.getTime() + 1000) }
        : null;
    if (out.final || out.d.ok) return out.d;
    // Another process took the chosen credential's last request first: try the others.
    lost.add(out.d.credential);
    refused.push(out.d);
    if (lost.size >= credentials.length) return poolRefusal(refused.length ? refused : [out.d]);
  }
}
