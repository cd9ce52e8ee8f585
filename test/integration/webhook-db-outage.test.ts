import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDb } from '../../src/platform/db/pool.ts';
import { useTestDatabase } from '../support/db.ts';
import { adminQuery } from '../support/postgres-server.ts';
import { deliver, pushPayload, startTestWeb, type TestWeb } from '../support/web.ts';

/**
 * Persist-then-ack when the database is gone: the delivery must be answered 500 (so
 * GitHub, or an operator pressing "Redeliver", sends it again) and the redelivery, once
 * the database is back, must be stored exactly once.
 */

const t = useTestDatabase();
let web: TestWeb;

beforeAll(async () => {
  // The server gets its own pool: the one this test takes away from it.
  web = await startTestWeb(t, { db: createDb(t.newPool(2)) });
});
afterAll(async () => {
  await adminQuery(t.adminUrl, `ALTER DATABASE ${t.name} ALLOW_CONNECTIONS true`);
  await web?.close();
});

async function takeDatabaseAway(): Promise<void> {
  await adminQuery(t.adminUrl, `ALTER DATABASE ${t.name} ALLOW_CONNECTIONS false`);
  await adminQuery(
    t.adminUrl,
    `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
     WHERE datname = $1 AND application_name = 'test-extra'`,
    [t.name],
  );
}

describe('webhook intake while the database is unavailable', () => {
  it('answers 500, stores nothing, and a later redelivery is stored once', async () => {
    const body = JSON.stringify(pushPayload());
    // Warm the pool so the outage hits live connections, not just new ones.
    expect(
      (await deliver(web.url, { event: 'ping', deliveryId: 'warm-up', body: '{"zen":"z"}' }))
        .status,
    ).toBe(200);

    await takeDatabaseAway();
    const during = await deliver(web.url, { deliveryId: 'd-outage', body });
    expect(during).toEqual({ status: 500, json: { error: 'storage unavailable' } });
    const ready = await fetch(`${web.url}/readyz`);
    expect(ready.status).toBe(503);
    expect(((await ready.json()) as { reason: string }).reason).toMatch(/^database unreachable/);
    const failed = web.logs.map((l) => JSON.parse(l)).filter((l) => l.event === 'webhook.failed');
    expect(failed.map((l) => l.delivery_id)).toEqual(['d-outage']);

    await adminQuery(t.adminUrl, `ALTER DATABASE ${t.name} ALLOW_CONNECTIONS true`);
    const redelivered = await deliver(web.url, { deliveryId: 'd-outage', body });
    expect(redelivered).toEqual({
      status: 202,
      json: { ok: true, routing: 'push:created', created: true },
    });
    expect(await deliver(web.url, { deliveryId: 'd-outage', body })).toEqual({
      status: 200,
      json: { ok: true, duplicate: true },
    });

    const pushes = await t.db.selectFrom('push_events').select('origin').execute();
    expect(pushes).toEqual([{ origin: 'webhook' }]);
    const deliveries = await t.db
      .selectFrom('webhook_deliveries')
      .select('delivery_id')
      .orderBy('delivery_id')
      .execute();
    expect(deliveries.map((d) => d.delivery_id)).toEqual(['d-outage', 'warm-up']);
  });
});
