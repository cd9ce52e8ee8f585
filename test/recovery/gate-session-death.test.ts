import { sql } from 'kysely';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { createGitHubClient } from '../../src/budget/client.ts';
import type { GitHubClient } from '../../src/budget/client-types.ts';
import { settleAbandonedReservations } from '../../src/budget/ledger.ts';
import type { RawResponse, Transport } from '../../src/github/transport.ts';
import { int4Key, LockSpace } from '../../src/platform/db/locks.ts';
import { createLogger } from '../../src/platform/log.ts';
import { useTestDatabase } from '../support/db.ts';
import { reserve, testConfig } from '../support/github-client.ts';
import { waitFor } from './helpers.ts';

/**
 * The request gate's own session killed by the server (pg_terminate_backend) at the steps
 * the redesign added (ADR 0080): the gate's lock statement now also marks the request sent
 * and takes its pacing slot; its unlock statement also settles the answer. Whatever dies,
 * no reservation stays open past the sweep, nothing unsent is counted, nothing sent goes
 * uncounted, and the next request goes through without anyone cleaning up.
 */

const t = useTestDatabase();
const open: GitHubClient[] = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((c) => c.close()));
});

const answer304 = (path: string): RawResponse => ({
  status: 304,
  headers: {},
  body: null,
  url: `https://api.github.test${path}`,
});

/** Terminates every gate session of this database (the client's gate connections). */
async function killGateSessions(): Promise<number> {
  const r = await sql<{ n: number }>`
    SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity
    WHERE datname = current_database() AND application_name = 'gpi-gate'`.execute(t.db);
  return r.rows[0]!.n;
}

function client(transport: Transport): GitHubClient {
  const gh = createGitHubClient({
    config: testConfig(t, { apiUrl: 'https://api.github.test' }),
    db: t.db,
    databaseUrl: t.url,
    logger: createLogger('silent'),
    transport,
  });
  open.push(gh);
  return gh;
}

async function ledger(id: number) {
  return t.db
    .selectFrom('github_requests')
    .select(['outcome', 'sent_at', 'counted', 'status'])
    .where('id', '=', String(id))
    .executeTakeFirstOrThrow();
}

describe('the gate session dies', () => {
  it('while the request is out: the answer is not settled, the row counts, the sweep closes it, the gate frees', async () => {
    let killDuringSend = true;
    const gh = client({
      async send(req) {
        if (killDuringSend) {
          killDuringSend = false;
          expect(await killGateSessions()).toBe(1);
        }
        return answer304(req.path);
      },
    });
    const reservation = (await reserve(gh, 'poll', { path: '/repos/o/r/events' }))!;
    const err = await gh
      .request({ purpose: 'poll', path: '/repos/o/r/events', reservation })
      .catch((e) => e);
    // The settle rode on the unlock's statement, which the dead session never ran.
    expect(err).toBeInstanceOf(Error);
    const row = await ledger(reservation.id);
    expect(row).toMatchObject({ outcome: 'sent', status: null });
    expect(row.sent_at).not.toBeNull();
    // Sent and unanswered as far as the ledger knows: it counts until settled, then still counts.
    expect((await gh.budget()).spent.poll).toBe(1);
    expect(await settleAbandonedReservations(t.db, 0)).toBe(1);
    expect(await ledger(reservation.id)).toMatchObject({ outcome: 'abandoned' });
    expect((await gh.budget()).spent.poll).toBe(1);

    // The lock died with the session: the next request takes the gate at once.
    const next = await gh.request({ purpose: 'poll', path: '/repos/o/r2/events' });
    expect(next.status).toBe(304);
    expect(await ledger(next.requestId)).toMatchObject({ outcome: 'completed', counted: false });
  });

  it('while its lock statement waits: nothing marked sent or sent, the reservation goes back unspent', async () => {
    let sent = 0;
    const gh = client({
      async send(req) {
        sent++;
        return answer304(req.path);
      },
    });
    // Another process holds this credential's gate, so the lock statement waits on it.
    const holder = new pg.Client({ connectionString: t.url, application_name: 'holder' });
    await holder.connect();
    try {
      await holder.query('SELECT pg_advisory_lock($1, $2)', [
        LockSpace.gate,
        int4Key(gh.credential),
      ]);
      const reservation = (await reserve(gh, 'poll', { path: '/repos/o/r/events' }))!;
      const request = gh
        .request({ purpose: 'poll', path: '/repos/o/r/events', reservation })
        .catch((e: Error) => e);
      await waitFor(
        async () => {
          const r = await sql<{ n: number }>`
            SELECT count(*)::int AS n FROM pg_stat_activity
            WHERE datname = current_database() AND application_name = 'gpi-gate'
              AND wait_event_type = 'Lock'`.execute(t.db);
          return r.rows[0]!.n === 1;
        },
        { what: 'the gate statement to wait for the lock' },
      );
      expect(await killGateSessions()).toBe(1);
      expect(await request).toBeInstanceOf(Error);
      expect(sent).toBe(0);
      expect(await ledger(reservation.id)).toMatchObject({ outcome: 'abandoned', sent_at: null });
      expect(await settleAbandonedReservations(t.db, 0)).toBe(0);
      expect((await gh.budget()).spent.poll).toBe(0);
    } finally {
      await holder.end();
    }
    // The holder is gone: the next request takes the gate on a new session.
    const next = await gh.request({ purpose: 'poll', path: '/repos/o/r2/events' });
    expect(next.status).toBe(304);
    expect(sent).toBe(1);
  });
});
