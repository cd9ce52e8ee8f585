import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { GateTimeout } from '../../src/github/errors.ts';
import { int4Key, LockSpace } from '../../src/platform/db/locks.ts';
import { useTestDatabase } from '../support/db.ts';
import { clientFactory, randomToken } from '../support/github-client.ts';
import { userProfile } from '../support/github-factories.ts';
import { useFakeGitHub } from '../support/use-fake-github.ts';
import { waitFor } from '../support/wait.ts';

/** The request gate: one request in flight per credential across processes, bounded wait. */

const t = useTestDatabase();
const clients = clientFactory(t);
const fake = useFakeGitHub();

beforeEach(() => {
  for (let i = 0; i < 8; i++) fake.setUser(userProfile({ id: i + 1, login: `u${i}` }));
});
afterEach(() => clients.closeAll());

describe('request gate', () => {
  it('serializes two clients with separate sessions: GitHub never sees two requests at once', async () => {
    const token = randomToken();
    const a = clients.make({ apiUrl: fake.url, token });
    const b = clients.make({ apiUrl: fake.url, token });
    // Every answer takes a while, so any overlap would be seen by the fake.
    fake.fail({ path: /^\/users\//, delayMs: 60, times: Number.POSITIVE_INFINITY });

    const results = await Promise.all(
      Array.from({ length: 8 }, (_, i) =>
        (i % 2 ? a : b).request({ purpose: 'enrich', path: `/users/u${i}` }),
      ),
    );

    expect(results.map((r) => r.status)).toEqual(Array(8).fill(200));
    expect(fake.requests).toHaveLength(8);
    expect(fake.maxInFlight).toBe(1);
    expect(fake.secondaryLimitHits).toBe(0);
  });

  it('different credentials do not wait for each other', async () => {
    const a = clients.make({ apiUrl: fake.url });
    const b = clients.make({ apiUrl: fake.url });
    expect(a.credential).not.toBe(b.credential);
    let release!: () => void;
    const held = new Promise<void>((r) => {
      release = r;
    });
    fake.onRequest = async (req) => {
      if (req.path === '/users/u0') await held;
    };
    const slow = a.request({ purpose: 'enrich', path: '/users/u0' });
    try {
      await waitFor(() => fake.inFlight === 1, { what: 'a request in flight' });
      // b is not held back by a's gate: it is answered while a is still in flight. GitHub's
      // concurrency limit is per credential, so neither is a secondary-limit 403.
      expect((await b.request({ purpose: 'enrich', path: '/users/u1' })).status).toBe(200);
      expect(fake.inFlight).toBe(1);
      expect(fake.maxInFlight).toBe(2);
      expect(fake.maxInFlightByCredential).toEqual({ [a.credential]: 1, [b.credential]: 1 });
      expect(fake.secondaryLimitHits).toBe(0);
    } finally {
      release();
    }
    expect((await slow).status).toBe(200);
  });

  it('gives up after GATE_WAIT_SECONDS with GateTimeout, sends nothing, gives the reservation back', async () => {
    const gh = clients.make({ apiUrl: fake.url, gateWaitSeconds: 1 });
    const holder = await t.newPool(1).connect();
    try {
      await holder.query('SELECT pg_advisory_lock($1, $2)', [
        LockSpace.gate,
        int4Key(gh.credential),
      ]);
      const err = await gh.request({ purpose: 'poll', path: '/users/u0' }).catch((e) => e);
      expect(err).toBeInstanceOf(GateTimeout);
      expect(fake.requests).toHaveLength(0);
      const row = await t.db
        .selectFrom('github_requests')
        .select(['outcome', 'sent_at'])
        .where('credential', '=', gh.credential)
        .executeTakeFirstOrThrow();
      expect(row).toEqual({ outcome: 'abandoned', sent_at: null });
    } finally {
      await holder.query('SELECT pg_advisory_unlock($1, $2)', [
        LockSpace.gate,
        int4Key(gh.credential),
      ]);
      holder.release();
    }
    // Once the holder lets go, the same client gets through.
    expect((await gh.request({ purpose: 'poll', path: '/users/u0' })).status).toBe(200);
  });

  it('a lock left by a session that ended is gone with it', async () => {
    const gh = clients.make({ apiUrl: fake.url, gateWaitSeconds: 2 });
    const pool = t.newPool(1);
    const holder = await pool.connect();
    await holder.query('SELECT pg_advisory_lock($1, $2)', [LockSpace.gate, int4Key(gh.credential)]);
    holder.release(new Error('simulated crash: destroy the session'));
    expect((await gh.request({ purpose: 'poll', path: '/users/u1' })).status).toBe(200);
  });
});
