import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useTestDatabase } from '../support/db.ts';
import { waitFor } from '../support/wait.ts';
import { deliver, pushPayload, startTestWeb, type TestWeb } from '../support/web.ts';

/**
 * /readyz says when webhook intake cannot store (ADR 0185): GitHub does not
 * redeliver on its own, so a web answering deliveries 500 must say so where a load balancer
 * or an operator looks. The web here has its own intake pool of one connection, as bin/web
 * has its own (of two).
 *
 * - A transaction holds webhook_deliveries: the first delivery waits on it holding intake's
 *   connection, the next ones wait for that connection: /readyz is 503 naming intake; once
 *   the table is free every delivery is stored and /readyz is 200.
 * - The database refuses the delivery (a trigger raising): answered 500, and /readyz is 503
 *   naming the failed delivery until one is stored again.
 */

const t = useTestDatabase();
let web: TestWeb;

beforeAll(async () => {
  // What the checks find is asked here, not that they end by the 2 s deadline (that is
  // web-readiness.test.ts's): on a loaded machine the first check, which also loads every
  // migration's module to list them, took longer, and /readyz said 'no answer within 2000 ms'.
  web = await startTestWeb(t, { pools: { intake: 1, archive: 1 }, readinessTimeoutMs: 60_000 });
});
afterAll(async () => {
  await sql`DROP TRIGGER IF EXISTS refuse_deliveries ON webhook_deliveries`.execute(t.db);
  await web?.close();
});

async function readyz() {
  const res = await fetch(`${web.url}/readyz`);
  return { status: res.status, body: (await res.json()) as { ready: boolean; reason?: string } };
}

describe('/readyz and webhook intake', () => {
  it('is 503 while every intake connection is stuck and deliveries wait, and 200 once they are stored', async () => {
    expect((await readyz()).status).toBe(200);
    const hold = await t.pool.connect();
    let deliveries: Promise<{ status: number }>[] = [];
    try {
      await hold.query('BEGIN');
      await hold.query('LOCK TABLE webhook_deliveries IN ACCESS EXCLUSIVE MODE');
      deliveries = Array.from({ length: 3 }, () =>
        deliver(web.url, { body: JSON.stringify(pushPayload()) }),
      );
      // Every delivery has reached intake's pool: one holds its connection (waiting on the
      // lock), two wait for it. Asked before, the check would wait for a connection itself.
      const intake = web.deps.pools!.intake.pool;
      await waitFor(() => intake.totalCount === 1 && intake.waitingCount === 2, {
        what: "one delivery on intake's connection and two waiting for it",
      });
      const stuck = await waitFor(
        async () => {
          const r = await readyz();
          return r.status === 503 ? r : null;
        },
        { what: '/readyz to say intake cannot store' },
      );
      expect(stuck.body.reason).toMatch(
        /^webhook intake cannot store now: all 1 of its database connections are busy and \d+ deliveries wait for one$/,
      );
    } finally {
      await hold.query('COMMIT');
      hold.release();
    }
    expect((await Promise.all(deliveries)).map((d) => d.status)).toEqual([202, 202, 202]);
    expect(await readyz()).toEqual({ status: 200, body: { ready: true } });
  });

  it('is 503 after a delivery the database refused, until one is stored again', async () => {
    await sql
      .raw(`
      CREATE OR REPLACE FUNCTION refuse_delivery() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN RAISE EXCEPTION 'disk full (test)'; END $$`)
      .execute(t.db);
    await sql`CREATE TRIGGER refuse_deliveries BEFORE INSERT ON webhook_deliveries
      FOR EACH ROW EXECUTE FUNCTION refuse_delivery()`.execute(t.db);
    const body = JSON.stringify(pushPayload());
    const refused = await deliver(web.url, { deliveryId: 'refused-1', body });
    expect(refused).toEqual({ status: 500, json: { error: 'storage unavailable' } });
    const r = await readyz();
    expect(r.status).toBe(503);
    expect(r.body.reason).toMatch(
      /^webhook intake could not store its last delivery \(.+, answered 500 "storage unavailable"\); none stored since$/,
    );

    await sql`DROP TRIGGER refuse_deliveries ON webhook_deliveries`.execute(t.db);
    // The same delivery, redelivered by hand once the database takes it.
    expect((await deliver(web.url, { deliveryId: 'refused-1', body })).status).toBe(202);
    expect(await readyz()).toEqual({ status: 200, body: { ready: true } });
  });
});
