import { defaultQuota } from '../platform/config/credential-label.ts';
import type { RequestPurpose } from '../platform/db/columns.ts';
import type { Db } from '../platform/db/pool.ts';
import { type BudgetSnapshot, isBackground, type PoolBudget } from './types.ts';
import {
  allowanceFor,
  type BudgetPolicy,
  budgetStateStatement,
  type StateRow,
  toState,
} from './window.ts';

/**
 * The budget as it is now, read and not reserved: each credential's window, allowance, spend
 * and block, the pool's total, and whether a purpose would be refused. What /status, the
 * poll schedule, the reconciler and GitHubClient.budget() show; reserve.ts decides.
 */

export function snapshotOf(row: StateRow, share: number, now: Date): BudgetSnapshot {
  const state = toState(row);
  const blocked = state.rl?.blockedUntil;
  const isBlocked = !!blocked && blocked.getTime() > now.getTime();
  return {
    credential: state.credential,
    quota: state.quota,
    remaining: state.remaining === null ? null : Math.max(0, state.remaining),
    resetAt: state.rl ? state.window.end : null,
    allowance: allowanceFor(state.quota, share),
    spent: { poll: state.spent.poll, enrich: state.spent.enrich, commits: state.spent.commits },
    blockedUntil: isBlocked ? blocked : null,
    blockReason: isBlocked ? (state.rl?.blockReason ?? null) : null,
  };
}

function earliest(dates: (Date | null)[]): Date | null {
  const known = dates.filter((d): d is Date => d !== null);
  return known.length ? new Date(Math.min(...known.map((d) => d.getTime()))) : null;
}

/**
 * The pool in total: quotas, allowances, spend and remaining summed (a credential GitHub
 * has not answered yet counts with what its quota leaves after our own spend), the
 * earliest reset, and a block only when every credential is blocked. With one credential
 * it is that credential's snapshot.
 */
export function poolTotal(credentials: BudgetSnapshot[]): BudgetSnapshot {
  if (credentials.length === 1) return credentials[0]!;
  const sum = (f: (s: BudgetSnapshot) => number) => credentials.reduce((n, s) => n + f(s), 0);
  const allBlocked = credentials.every((s) => s.blockedUntil !== null);
  const firstFree = allBlocked
    ? credentials.reduce((a, b) => (a.blockedUntil! <= b.blockedUntil! ? a : b))
    : null;
  return {
    credential: 'pool',
    quota: sum((s) => s.quota),
    remaining: credentials.every((s) => s.remaining === null)
      ? null
      : sum(
          (s) =>
            s.remaining ?? Math.max(0, s.quota - s.spent.poll - s.spent.enrich - s.spent.commits),
        ),
    resetAt: earliest(credentials.map((s) => s.resetAt)),
    allowance: { poll: sum((s) => s.allowance.poll), enrich: sum((s) => s.allowance.enrich) },
    spent: {
      poll: sum((s) => s.spent.poll),
      enrich: sum((s) => s.spent.enrich),
      commits: sum((s) => s.spent.commits),
    },
    blockedUntil: firstFree?.blockedUntil ?? null,
    blockReason: firstFree
      ? credentials.every((s) => s.blockReason === 'auth')
        ? 'auth'
        : 'rate_limit'
      : null,
  };
}

/** Every credential's budget (one statement) and the pool's total. */
export async function budgetSnapshot(db: Db, policy: BudgetPolicy, now: Date): Promise<PoolBudget> {
  const r = await budgetStateStatement(policy.credentials, now).execute(db);
  const credentials = r.rows.map((row) => snapshotOf(row, policy.share, now));
  return { ...poolTotal(credentials), credentials };
}

/**
 * Would this credential refuse a reservation of `purpose` right now? enrich and commits both
 * ask whether the background allowance (their spend together) is used up.
 */
export function credentialRefuses(s: BudgetSnapshot, purpose: RequestPurpose): boolean {
  const full = isBackground(purpose)
    ? s.spent.enrich + s.spent.commits >= s.allowance.enrich
    : s.spent.poll >= s.allowance.poll;
  return s.blockedUntil !== null || (s.remaining !== null && s.remaining <= 0) || full;
}

/**
 * Would the pool refuse a reservation of `purpose` right now — every credential? Read from
 * a snapshot, so a caller that only decides whether to start work (the reconciler) asks
 * without reserving.
 */
export function snapshotRefuses(b: PoolBudget, purpose: RequestPurpose): boolean {
  return b.credentials.every((s) => credentialRefuses(s, purpose));
}

/**
 * The shortest poll interval the pool's poll budget allows each of `enabledSources`
 * sources: ceil(3600 × sources / the sum of every credential's poll allowance). Ingestion
 * takes the larger of this and the feed's X-Poll-Interval for next_poll_at.
 */
export async function pollIntervalFloorSeconds(
  db: Db,
  credentials: string | readonly string[],
  enabledSources: number,
  share = 2 / 3,
): Promise<number> {
  const labels = typeof credentials === 'string' ? [credentials] : [...credentials];
  const rows = await db
    .selectFrom('github_rate_limits')
    .select(['credential', 'quota'])
    .where('credential', 'in', labels)
    .execute();
  const quota = new Map(rows.map((r) => [r.credential, r.quota]));
  const poll = labels.reduce(
    (n, label) => n + allowanceFor(quota.get(label) ?? defaultQuota(label), share).poll,
    0,
  );
  return Math.ceil((3600 * Math.max(1, enabledSources)) / Math.max(1, poll));
}
