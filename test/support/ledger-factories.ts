import type { Db } from '../../src/platform/db/pool.ts';

/**
 * Request-ledger rows as other processes would have left them (not a test file): `n`
 * finished requests of `purpose` on `credential`, at `at` or `ageSeconds` ago (default 60:
 * inside the current window), a 200 unless told otherwise (a 304 is free, an abandoned unsent row too).
 */
export async function spendRows(
  db: Db,
  credential: string,
  purpose: 'poll' | 'enrich' | 'commits',
  n: number,
  o: {
    status?: number;
    outcome?: 'completed' | 'abandoned';
    sent?: boolean;
    ageSeconds?: number;
    /** When they were sent (a test with an injected clock); overrides `ageSeconds`. */
    at?: Date;
  } = {},
): Promise<void> {
  if (n === 0) return;
  const at = o.at ?? new Date(Date.now() - (o.ageSeconds ?? 60) * 1000);
  const rows = Array.from({ length: n }, () => ({
    credential,
    purpose,
    path: '/elsewhere',
    outcome: o.outcome ?? ('completed' as const),
    status: o.status ?? 200,
    counted: (o.status ?? 200) !== 304,
    reserved_at: at,
    sent_at: o.sent === false ? null : at,
    finished_at: at,
  }));
  await db.insertInto('github_requests').values(rows).execute();
}
