import { sql } from 'kysely';
import { beforeEach, describe, expect, it } from 'vitest';
import { reserve } from '../../src/budget/reserve.ts';
import type { BudgetPolicy } from '../../src/budget/window.ts';
import { int4Key, LockSpace } from '../../src/platform/db/locks.ts';
import { createDb } from '../../src/platform/db/pool.ts';
import { useTestDatabase } from '../support/db.ts';

/**
 * A pool's pick reads the credentials' open requests in a snapshot taken before it has the
 * chosen credential's budget lock. A reservation committed on that credential in between (its
 * lock released with the commit) is not in that snapshot: the pick must not put a second
 * request on a credential that now has one while others are idle — that lane would wait at
 * the credential's gate instead of using an idle one (ADR 0198).
 */

const t = useTestDatabase();
const labels = ['race:a', 'race:b', 'race:c'];
const policy: BudgetPolicy = {
  credentials: labels.map((label) => ({ label, defaultQuota: 5000 })),
  share: 2 / 3,
};

beforeEach(async () => {
  await sql`TRUNCATE github_requests, github_rate_limits`.execute(t.db);
});

/** The budget-lock key the session of `pid` waits for, once it waits for one. */
async function waitedKey(pid: number): Promise<number> {
  for (let i = 0; i < 500; i++) {
    const r = await sql<{ objid: string }>`
      SELECT objid::text FROM pg_locks
      WHERE pid = ${pid}::int AND locktype = 'advisory' AND NOT granted
        AND classid = ${LockSpace.budget}::oid`.execute(t.db);
    if (r.rows[0]) return Number(r.rows[0].objid) | 0;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error('the reservation never waited for a budget lock');
}

async function openOn(): Promise<Record<string, number>> {
  const r = await sql<{ credential: string; n: string }>`
    SELECT credential, count(*) AS n FROM github_requests
    WHERE finished_at IS NULL GROUP BY credential`.execute(t.db);
  return Object.fromEntries(r.rows.map((x) => [x.credential, Number(x.n)]));
}

describe('a pool reservation racing another on the credential it picked', () => {
  it.each([
    ['its own transaction', false],
    ["the caller's transaction (a poll's)", true],
  ])(
    'a reservation committed on the pick between the snapshot and the lock: the next one goes to an idle credential (%s)',
    async (_, inTransaction) => {
      const lane = t.newPool(1);
      const laneDb = createDb(lane);
      const laneClient = await lane.connect();
      const pid = Number((await laneClient.query('SELECT pg_backend_pid() AS p')).rows[0].p);
      laneClient.release();
      const other = await t.pool.connect();
      try {
        // Three reservations in progress elsewhere: every budget lock held, so the lane reads
        // its snapshot (all three idle) and waits for the lock of the best of them.
        await other.query('BEGIN');
        for (const label of labels) {
          await other.query('SELECT pg_advisory_xact_lock($1, $2)', [
            LockSpace.budget,
            int4Key(label),
          ]);
        }
        const meta = { now: new Date(), path: '/users/x' };
        const decision = inTransaction
          ? laneDb.transaction().execute((trx) => reserve(trx, policy, 'poll', meta, true))
          : reserve(laneDb, policy, 'enrich', meta);
        const key = await waitedKey(pid);
        const waitedFor = labels.find((l) => int4Key(l) === key)!;
        expect(waitedFor).toBeDefined();
        // The one in progress on that credential reserves and commits; the others reserve nothing.
        await other.query(
          `INSERT INTO github_requests (credential, purpose, method, path, outcome, reserved_at)
         VALUES ($1, 'enrich', 'GET', '/users/y', 'reserved', now())`,
          [waitedFor],
        );
        await other.query('COMMIT');
        const d = await decision;
        expect(d.ok).toBe(true);
        const picked = d.ok ? d.reservation.credential : null;
        // Two idle credentials were there for it: not a second request on the busy one.
        expect(picked).not.toBe(waitedFor);
        const open = await openOn();
        expect(open[waitedFor]).toBe(1);
        expect(Object.values(open).every((n) => n === 1)).toBe(true);
      } finally {
        other.release();
        await laneDb.destroy();
      }
    },
  );

  it('three reservations at once on three idle credentials, many rounds: one a credential each time', async () => {
    const lanes = [0, 1, 2].map(() => createDb(t.newPool(1)));
    try {
      for (let round = 0; round < 60; round++) {
        const now = new Date();
        const ds = await Promise.all(
          lanes.map((db) => reserve(db, policy, 'enrich', { now, path: '/users/x' })),
        );
        const creds = ds.map((d) => (d.ok ? d.reservation.credential : null));
        expect(new Set(creds).size, `round ${round}: ${creds}`).toBe(3);
        await sql`UPDATE github_requests SET outcome = 'completed', status = 200, sent_at = now(),
          finished_at = now() WHERE finished_at IS NULL`.execute(t.db);
      }
    } finally {
      await Promise.all(lanes.map((db) => db.destroy()));
    }
  });
});
