import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { reserve } from '../../src/budget/reserve.ts';
import { createDb } from '../../src/platform/db/pool.ts';
import { GENERIC_PLANS, PREPARED_MARK, preparedName } from '../../src/platform/db/prepared.ts';
import { useTestDatabase } from '../support/db.ts';

/**
 * The budget's statements are planned once a session (src/platform/db/prepared.ts): named prepared
 * statements of the session that runs them, with generic plans where the transaction asked
 * for them — and custom plans, as before, where it did not. Read from the session's own
 * pg_prepared_statements (its generic_plans and custom_plans counters, Postgres 14 and later).
 * That the generic plans keep the short range scans: test/integration/hot-path-plans.test.ts.
 */

const t = useTestDatabase();

const policy = {
  credentials: ['token:p1', 'token:p2', 'token:p3'].map((label) => ({ label, defaultQuota: 5000 })),
  share: 2 / 3,
};

interface Prepared {
  name: string;
  statement: string;
  generic_plans: number;
  custom_plans: number;
}

describe('prepared budget statements', () => {
  it('a pool reservation asking for generic plans plans its statements once a session', async () => {
    const db = createDb(t.newPool(1)); // one session: the prepared statements live on it
    for (let i = 0; i < 8; i++) {
      await db.transaction().execute(async (trx) => {
        await sql`SELECT ${GENERIC_PLANS}`.execute(trx);
        const d = await reserve(trx, policy, 'poll', { now: new Date(), path: `/r/${i}` }, true);
        expect(d.ok).toBe(true);
      });
    }
    const r = await sql<Prepared>`
      SELECT name, statement, generic_plans::int, custom_plans::int
      FROM pg_prepared_statements WHERE name LIKE 'gpi\\_%'`.execute(db);
    // The pick and the reservation, each parsed once and planned generically every time.
    expect(r.rows.length).toBe(2);
    for (const row of r.rows) {
      expect(row.statement.startsWith(PREPARED_MARK)).toBe(true);
      expect(row.name).toBe(preparedName(row.statement));
      expect(row.custom_plans).toBe(0);
      expect(row.generic_plans).toBe(8);
    }
    // Eight reservations, spread by the pick over the pool.
    const spent = await sql<{ n: number }>`
      SELECT count(*)::int AS n FROM github_requests WHERE purpose = 'poll'`.execute(db);
    expect(spent.rows[0]!.n).toBe(8);
  });

  it('without the ask they stay prepared, planned custom as any statement', async () => {
    const db = createDb(t.newPool(1));
    for (let i = 0; i < 3; i++) {
      const d = await reserve(db, policy, 'enrich', { now: new Date(), path: `/users/u${i}` });
      expect(d.ok).toBe(true);
    }
    const r = await sql<Prepared>`
      SELECT name, statement, generic_plans::int, custom_plans::int
      FROM pg_prepared_statements WHERE name LIKE 'gpi\\_%' ORDER BY statement`.execute(db);
    // The pick asks for the reservation after it: only the pick itself is planned custom.
    const pick = r.rows.find((x) => !x.statement.includes('INSERT INTO github_requests'))!;
    const reservation = r.rows.find((x) => x.statement.includes('INSERT INTO github_requests'))!;
    expect(pick.custom_plans).toBe(3);
    expect(reservation.generic_plans).toBe(3);
  });

  it('a statement gone stale on its session fails once, then is parsed anew', async () => {
    const db = createDb(t.newPool(1));
    const reserveOnce = () =>
      db.transaction().execute(async (trx) => {
        await sql`SELECT ${GENERIC_PLANS}`.execute(trx);
        return reserve(trx, policy, 'poll', { now: new Date(), path: '/r/stale' }, true);
      });
    expect((await reserveOnce()).ok).toBe(true);
    // The server forgets them (a DEALLOCATE): 26000 once, then parsed again under new names.
    await sql`DEALLOCATE ALL`.execute(db);
    await expect(reserveOnce()).rejects.toMatchObject({ code: '26000' });
    expect((await reserveOnce()).ok).toBe(true);
    // A migration changes the type of a column the statements return, from another session:
    // 0A000 once ("cached plan must not change result type"), then parsed again.
    await sql`ALTER TABLE github_rate_limits ALTER COLUMN auth_failures TYPE bigint`.execute(t.db);
    await expect(reserveOnce()).rejects.toMatchObject({ code: '0A000' });
    expect((await reserveOnce()).ok).toBe(true);
    expect((await reserveOnce()).ok).toBe(true);
  });
});
