import http from 'node:http';
import { sign } from '@octokit/webhooks-methods';
import { sql } from 'kysely';
import type { PgBoss } from 'pg-boss';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createBoss } from '../../src/jobs/boss.ts';
import { createLogger } from '../../src/platform/log.ts';
import type { PushRow } from '../../src/store/mapping.ts';
import { storePushes } from '../../src/store/pushes.ts';
import { MAX_WEBHOOK_BODY_BYTES } from '../../src/web/webhook-route.ts';
import { useTestDatabase } from '../support/db.ts';
import {
  deliver,
  pushPayload,
  startTestWeb,
  TEST_WEBHOOK_SECRET,
  type TestWeb,
} from '../support/web.ts';

const t = useTestDatabase();
let web: TestWeb;

beforeAll(async () => {
  web = await startTestWeb(t);
});
afterAll(async () => {
  await web?.close();
});
beforeEach(async () => {
  await sql`TRUNCATE push_events, webhook_deliveries, actors, repositories`.execute(t.db);
  web.logs.length = 0;
});

async function counts() {
  const r = await sql<{ pushes: string; deliveries: string; actors: string; repos: string }>`
    SELECT (SELECT count(*) FROM push_events) AS pushes,
           (SELECT count(*) FROM webhook_deliveries) AS deliveries,
           (SELECT count(*) FROM actors) AS actors,
           (SELECT count(*) FROM repositories) AS repos`.execute(t.db);
  const row = r.rows[0]!;
  return {
    pushes: Number(row.pushes),
    deliveries: Number(row.deliveries),
    actors: Number(row.actors),
    repos: Number(row.repos),
  };
}

const nothingStored = { pushes: 0, deliveries: 0, actors: 0, repos: 0 };

/** The PushRow polling would produce for the same push (event id and push_id known). */
function polledCopy(p: ReturnType<typeof pushPayload>, eventId: string): PushRow {
  return {
    id: eventId,
    actor: { id: String(p.sender.id), login: p.sender.login },
    repository: { id: String(p.repository.id), fullName: p.repository.full_name },
    pushId: '31000000001',
    ref: p.ref,
    head: p.after,
    before: p.before,
    createdAt: new Date('2026-11-29T09:00:00Z'),
    payload: {
      repository_id: p.repository.id,
      push_id: 31_000_000_001,
      ref: p.ref,
      head: p.after,
      before: p.before,
    },
    size: null,
    distinctSize: null,
  };
}

describe('POST /webhooks/github: signatures', () => {
  it('stores a signed push: one push row, its actor and repository pending, the delivery recorded', async () => {
    const p = pushPayload({ commits: 2 });
    const body = JSON.stringify(p);
    const res = await deliver(web.url, { deliveryId: 'd-signed-1', body });
    expect(res).toEqual({
      status: 202,
      json: { ok: true, routing: 'push:created', created: true },
    });

    const push = await t.db.selectFrom('push_events').selectAll().executeTakeFirstOrThrow();
    expect(push).toMatchObject({
      id: null,
      origin: 'webhook',
      repository_id: String(p.repository.id),
      actor_id: String(p.sender.id),
      ref: p.ref,
      head: p.after,
      before: p.before,
      size: 2,
      distinct_size: 2,
    });
    // What the columns hold is not kept again in the payload (ADR 0199).
    expect(push.payload === null || !('head' in (push.payload as object))).toBe(true);
    const actor = await t.db.selectFrom('actors').selectAll().executeTakeFirstOrThrow();
    expect(actor).toMatchObject({ login: p.sender.login, enrichment_state: 'pending' });
    const delivery = await t.db
      .selectFrom('webhook_deliveries')
      .selectAll()
      .executeTakeFirstOrThrow();
    expect(delivery).toMatchObject({
      delivery_id: 'd-signed-1',
      event: 'push',
      routing: 'push:created',
      hook_id: '123456',
      repository_id: String(p.repository.id),
      repository_full_name: p.repository.full_name,
    });
    expect(delivery.payload_sha256).toMatch(/^[0-9a-f]{64}$/);
  });

  it('rejects a missing signature with 401 and stores nothing', async () => {
    const res = await deliver(web.url, {
      deliveryId: 'd-unsigned',
      body: JSON.stringify(pushPayload()),
      signature: null,
    });
    expect(res).toEqual({ status: 401, json: { error: 'missing signature' } });
    expect(await counts()).toEqual(nothingStored);
  });

  it('rejects a bad signature (wrong secret, tampered body) with 401 and stores nothing', async () => {
    const body = JSON.stringify(pushPayload());
    const wrongSecret = await deliver(web.url, {
      deliveryId: 'd-wrong-secret',
      body,
      signature: await sign('not the secret', body),
    });
    const tampered = await deliver(web.url, {
      deliveryId: 'd-tampered',
      body: body.replace('refs/heads/main', 'refs/heads/evil'),
      signature: await sign(TEST_WEBHOOK_SECRET, body),
    });
    const garbage = await deliver(web.url, {
      deliveryId: 'd-garbage',
      body,
      signature: 'sha256=abc',
    });
    for (const res of [wrongSecret, tampered, garbage]) {
      expect(res).toEqual({ status: 401, json: { error: 'bad signature' } });
    }
    expect(await counts()).toEqual(nothingStored);
  });

  it('logs every rejection with its delivery id, never the secret or the body', async () => {
    const body = JSON.stringify(pushPayload({ login: 'very-distinctive-login' }));
    await deliver(web.url, { deliveryId: 'd-log-1', body, signature: 'sha256=00' });
    await deliver(web.url, { deliveryId: 'd-log-2', body, contentType: 'text/plain' });
    const rejected = web.logs
      .map((l) => JSON.parse(l))
      .filter((l) => l.event === 'webhook.rejected');
    expect(rejected.map((l) => [l.delivery_id, l.status])).toEqual([
      ['d-log-1', 401],
      ['d-log-2', 415],
    ]);
    const all = web.logs.join('\n');
    expect(all).not.toContain(TEST_WEBHOOK_SECRET);
    expect(all).not.toContain('very-distinctive-login');
  });
});

describe('POST /webhooks/github: idempotency and the cross-source key', () => {
  it('a delivery replayed three times stores one push and one delivery', async () => {
    const body = JSON.stringify(pushPayload());
    const first = await deliver(web.url, { deliveryId: 'd-replay', body });
    expect(first.status).toBe(202);
    for (let i = 0; i < 3; i++) {
      expect(await deliver(web.url, { deliveryId: 'd-replay', body })).toEqual({
        status: 200,
        json: { ok: true, duplicate: true },
      });
    }
    expect(await counts()).toEqual({ pushes: 1, deliveries: 1, actors: 1, repos: 1 });
  });

  it('concurrent copies of one delivery store it once', async () => {
    const body = JSON.stringify(pushPayload());
    const results = await Promise.all(
      Array.from({ length: 5 }, () => deliver(web.url, { deliveryId: 'd-race', body })),
    );
    expect(results.map((r) => r.status).sort()).toEqual([200, 200, 200, 200, 202]);
    expect(await counts()).toEqual({ pushes: 1, deliveries: 1, actors: 1, repos: 1 });
  });

  it('the same push from a second hook (new delivery id) is recorded but stays one row', async () => {
    const body = JSON.stringify(pushPayload());
    await deliver(web.url, { deliveryId: 'd-hook-a', body });
    const second = await deliver(web.url, { deliveryId: 'd-hook-b', body });
    expect(second).toEqual({
      status: 202,
      json: { ok: true, routing: 'push:known', created: false },
    });
    expect(await counts()).toMatchObject({ pushes: 1, deliveries: 2 });
  });

  it('webhook first, then the polled copy: one row, the event id filled in', async () => {
    const p = pushPayload();
    await deliver(web.url, { deliveryId: 'd-then-poll', body: JSON.stringify(p) });
    const stored = await t.db
      .transaction()
      .execute((trx) => storePushes(trx, [polledCopy(p, '45000000001')], { origin: 'poll' }));
    expect(stored.created).toBe(0);
    const rows = await t.db.selectFrom('push_events').select(['id', 'origin', 'head']).execute();
    expect(rows).toEqual([{ id: '45000000001', origin: 'webhook', head: p.after }]);
  });

  it('polled first, then the webhook: one row, the delivery routed push:known', async () => {
    const p = pushPayload();
    await t.db
      .transaction()
      .execute((trx) => storePushes(trx, [polledCopy(p, '45000000002')], { origin: 'poll' }));
    const res = await deliver(web.url, { deliveryId: 'd-after-poll', body: JSON.stringify(p) });
    expect(res).toEqual({ status: 202, json: { ok: true, routing: 'push:known', created: false } });
    const rows = await t.db.selectFrom('push_events').select(['id', 'origin']).execute();
    expect(rows).toEqual([{ id: '45000000002', origin: 'poll' }]);
  });
});

describe('POST /webhooks/github: events other than push', () => {
  it('answers ping with 200 and records it', async () => {
    const res = await deliver(web.url, {
      event: 'ping',
      deliveryId: 'd-ping',
      body: JSON.stringify({ zen: 'Keep it logically awesome.', hook_id: 123456 }),
    });
    expect(res).toEqual({ status: 200, json: { ok: true, routing: 'ping' } });
    expect(await counts()).toEqual({ ...nothingStored, deliveries: 1 });
  });

  it('records other events as ignored:<event> and stores nothing else', async () => {
    const res = await deliver(web.url, {
      event: 'issues',
      deliveryId: 'd-issues',
      body: JSON.stringify({ action: 'opened', repository: { id: 5, full_name: 'o/r' } }),
    });
    expect(res).toEqual({ status: 200, json: { ok: true, routing: 'ignored:issues' } });
    const row = await t.db.selectFrom('webhook_deliveries').selectAll().executeTakeFirstOrThrow();
    expect(row).toMatchObject({ routing: 'ignored:issues', action: 'opened', repository_id: '5' });
    expect(await counts()).toEqual({ ...nothingStored, deliveries: 1 });
  });
});

describe('POST /webhooks/github: malformed requests store nothing', () => {
  it('missing X-GitHub-Delivery → 400 {"error":"missing delivery id"}', async () => {
    const res = await deliver(web.url, { deliveryId: null, body: JSON.stringify(pushPayload()) });
    expect(res).toEqual({ status: 400, json: { error: 'missing delivery id' } });
    expect(await counts()).toEqual(nothingStored);
  });

  it('signed but not JSON → 400', async () => {
    const res = await deliver(web.url, {
      deliveryId: 'd-not-json',
      body: '{"ref": "refs/heads/ma',
    });
    expect(res).toEqual({ status: 400, json: { error: 'invalid JSON' } });
    expect(await counts()).toEqual(nothingStored);
  });

  it('a signed push without a repository → 422 naming the field, recorded as rejected:malformed (ADR 0021)', async () => {
    const { repository: _r, ...rest } = pushPayload();
    const res = await deliver(web.url, { deliveryId: 'd-no-repo', body: JSON.stringify(rest) });
    expect(res.status).toBe(422);
    expect((res.json as { error: string }).error).toMatch(/repository/);
    // Persisted (the delivery row), but no push and no entity: nothing else is stored.
    expect(await counts()).toEqual({ ...nothingStored, deliveries: 1 });
    const row = await sql<{ routing: string; detail: string }>`
      SELECT routing, detail FROM webhook_deliveries WHERE delivery_id = 'd-no-repo'`.execute(t.db);
    expect(row.rows).toEqual([{ routing: 'rejected:malformed', detail: 'repository is missing' }]);
    await sql`DELETE FROM webhook_deliveries WHERE delivery_id = 'd-no-repo'`.execute(t.db);
  });

  it('a push the database itself refuses → 422 rejected:store_failed, nothing half-stored, a redelivery answered the same', async () => {
    // Something the rules did not foresee, stood in for by a constraint of this test's
    // database (as backfill-import.test.ts does).
    await sql`ALTER TABLE push_events ADD CONSTRAINT test_refuse CHECK (ref <> 'refs/heads/refused-by-db')`.execute(
      t.db,
    );
    try {
      const body = JSON.stringify(pushPayload({ ref: 'refs/heads/refused-by-db' }));
      const res = await deliver(web.url, { deliveryId: 'd-refused', body });
      expect(res.status).toBe(422);
      // The delivery is recorded as rejected; its push, actor and repository are not kept.
      expect(await counts()).toEqual({ ...nothingStored, deliveries: 1 });
      const row = await sql<{ routing: string; detail: string }>`
        SELECT routing, detail FROM webhook_deliveries WHERE delivery_id = 'd-refused'`.execute(
        t.db,
      );
      expect(row.rows[0]!.routing).toBe('rejected:store_failed');
      expect(row.rows[0]!.detail).toMatch(
        /the database refused the push \(SQLSTATE 23514\).*test_refuse/,
      );
      const again = await deliver(web.url, { deliveryId: 'd-refused', body });
      expect(again.status).toBe(422);
      expect(await counts()).toEqual({ ...nothingStored, deliveries: 1 });
    } finally {
      await sql`ALTER TABLE push_events DROP CONSTRAINT test_refuse`.execute(t.db);
    }
  });

  it('wrong content type → 415', async () => {
    const res = await deliver(web.url, {
      deliveryId: 'd-text',
      body: JSON.stringify(pushPayload()),
      contentType: 'text/plain',
    });
    expect(res.status).toBe(415);
    expect(await counts()).toEqual(nothingStored);
  });

  it("accepts GitHub's form encoding (payload=<json>), signed over the form body", async () => {
    const body = new URLSearchParams({ payload: JSON.stringify(pushPayload()) }).toString();
    const res = await deliver(web.url, {
      deliveryId: 'd-form',
      body,
      contentType: 'application/x-www-form-urlencoded',
    });
    expect(res.status).toBe(202);
    expect(await counts()).toMatchObject({ pushes: 1, deliveries: 1 });
  });

  it('a declared body over 25 MB → 413 before reading it', async () => {
    const status = await rawPost({ 'content-length': String(MAX_WEBHOOK_BODY_BYTES + 1) }, []);
    expect(status).toBe(413);
    expect(await counts()).toEqual(nothingStored);
  });

  it('a streamed (chunked) body that grows past 25 MB → 413', async () => {
    const chunk = Buffer.alloc(1024 * 1024, 0x61);
    const status = await rawPost({ 'transfer-encoding': 'chunked' }, Array(27).fill(chunk));
    expect(status).toBe(413);
    expect(await counts()).toEqual(nothingStored);
  });
});

describe('POST /webhooks/github: configuration and hints', () => {
  it('answers 404 when WEBHOOK_SECRET is not set, even to a validly signed push', async () => {
    const unconfigured = await startTestWeb(t, { env: { WEBHOOK_SECRET: '' } });
    try {
      const res = await deliver(unconfigured.url, {
        deliveryId: 'd-404',
        body: JSON.stringify(pushPayload()),
      });
      expect(res.status).toBe(404);
    } finally {
      await unconfigured.close();
    }
    expect(await counts()).toEqual(nothingStored);
  });

  it('after commit, sends one enrichment cycle per class that got new pending rows', async () => {
    let boss: PgBoss | undefined;
    const withBoss = await (async () => {
      boss = createBoss(t.url, web.config, createLogger('silent'), {
        role: 'test',
        max: 2,
        supervise: false,
      });
      await boss.start();
      return startTestWeb(t, { boss });
    })();
    try {
      await sql`DELETE FROM pgboss.job WHERE name LIKE 'enrich-%'`.execute(t.db);
      const res = await deliver(withBoss.url, {
        deliveryId: 'd-hint',
        body: JSON.stringify(pushPayload()),
      });
      expect(res.status).toBe(202);
      const jobs = await sql<{ name: string; data: { class: string; reason: string } }>`
        SELECT name, data FROM pgboss.job WHERE name LIKE 'enrich-%' ORDER BY name`.execute(t.db);
      expect(jobs.rows).toEqual([
        { name: 'enrich-actor', data: { class: 'actor', reason: 'hint' } },
        { name: 'enrich-repository', data: { class: 'repository', reason: 'hint' } },
      ]);
      const dispatched = withBoss.logs
        .map((l) => JSON.parse(l))
        .filter((l) => l.event === 'enrichment.dispatched');
      expect(dispatched.map((l) => l.delivery_id)).toEqual(['d-hint', 'd-hint']);
    } finally {
      await withBoss.close();
      await boss?.stop({ graceful: false });
    }
  });
});

/** A POST written by hand, for bodies fetch() will not send (lying or endless lengths). */
function rawPost(headers: Record<string, string>, chunks: Buffer[]): Promise<number> {
  const { hostname, port } = new URL(web.url);
  return new Promise((resolve, reject) => {
    const req = http.request({
      host: hostname,
      port,
      method: 'POST',
      path: '/webhooks/github',
      headers: {
        'content-type': 'application/json',
        'x-github-event': 'push',
        'x-github-delivery': 'd-large',
        // Shaped like a signature, so the body is read (and the signature found wrong).
        'x-hub-signature-256': `sha256=${'0'.repeat(64)}`,
        ...headers,
      },
    });
    req.on('response', (res) => {
      res.resume();
      resolve(res.statusCode!);
    });
    // The server drops the connection after answering 413; what we were still writing fails.
    req.on('error', (err) => reject(err));
    const write = (i: number) => {
      if (i >= chunks.length) return;
      if (req.destroyed) return;
      req.write(chunks[i], () => write(i + 1));
    };
    if (chunks.length === 0) req.flushHeaders();
    else write(0);
  });
}
