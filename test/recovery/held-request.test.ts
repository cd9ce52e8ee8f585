import { sql } from 'kysely';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { GitHubClient } from '../../src/budget/client-types.ts';
import { settleAbandonedReservations } from '../../src/budget/ledger.ts';
import { int4Key, LockSpace } from '../../src/platform/db/locks.ts';
import { pollSource } from '../../src/poll/poll-source.ts';
import { addSource } from '../../src/store/sources.ts';
import { useTestDatabase } from '../support/db.ts';
import { type FakeGitHub, startFakeGitHub } from '../support/fake-github.ts';
import { clientFactory, memoryLogger, randomToken, testConfig } from '../support/github-client.ts';
import { pushEvent } from '../support/github-factories.ts';
import { waitFor } from './helpers.ts';

/**
 * The held request (ADR 0082): a poll's page 1 is reserved, its credential's gate taken on
 * the poll's own session and its sent mark written in the run's opening transaction; a 304 is
 * settled, and the gate released, in the finalize's. Here: that the answer really rides in
 * the finalize's commit, that the poll's session dying with its request out leaks neither the
 * gate nor an unsettled reservation past the sweep, and that a busy gate falls back to the
 * gate's own path.
 */

const t = useTestDatabase();
const clients = clientFactory(t);
let fake: FakeGitHub;
let github: GitHubClient;
let token: string;

beforeAll(async () => {
  fake = await startFakeGitHub();
});
beforeEach(() => {
  fake.reset();
  token = randomToken();
  github = clients.make({ apiUrl: fake.url, token });
});
afterEach(async () => {
  fake.onRequest = null;
  await clients.closeAll();
});
afterAll(async () => {
  await fake.close();
});

function deps() {
  return {
    config: testConfig(t, { apiUrl: fake.url, token }),
    db: t.db,
    pool: t.pool,
    github,
    logger: memoryLogger('silent').logger,
    workerId: 'test-host:1',
  };
}

let seq = 0;
async function newSource() {
  seq++;
  const target = `held-${seq}/feed-${seq}`;
  const { source } = await addSource(t.db, { kind: 'repo', target }, 'live');
  return { id: Number(source.id), feed: `repo:${target}`, path: `/repos/${target}/%` };
}

/** Who holds a request gate of this database now (LockSpace.gate), by backend pid. */
async function gateHolders(): Promise<number[]> {
  const r = await sql<{ pid: number }>`
    SELECT pid FROM pg_locks
    WHERE locktype = 'advisory' AND classid = ${LockSpace.gate} AND granted
      AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`.execute(
    t.db,
  );
  return r.rows.map((x) => x.pid);
}

describe('a held request', () => {
  it('a 304: its ledger row, its run and its source are written by one transaction', async () => {
    const s = await newSource();
    fake.addEvents(s.feed, [pushEvent()]);
    expect((await pollSource(deps(), s.id, { force: true })).outcome).toBe('completed');
    const second = await pollSource(deps(), s.id, { force: true });
    expect(second.outcome).toBe('not_modified');
    const r = await sql<{ run: string; source: string; request: string; outcome: string }>`
      SELECT r.xmin::text AS run, s.xmin::text AS source, g.xmin::text AS request, g.outcome
      FROM ingestion_runs r
      JOIN event_sources s ON s.id = r.source_id
      JOIN github_requests g ON g.run_id = r.id
      WHERE r.id = ${second.runId}`.execute(t.db);
    expect(r.rows).toHaveLength(1);
    const row = r.rows[0]!;
    expect(row.outcome).toBe('completed');
    // The settle of the 304 and the finalize are one commit.
    expect(row.request).toBe(row.run);
    expect(row.source).toBe(row.run);
    expect(await gateHolders()).toEqual([]);
  });

  it('a page of 200: its settle, its store and its run counters are one transaction', async () => {
    const s = await newSource();
    fake.addEvents(s.feed, [pushEvent(), pushEvent()]);
    const run = await pollSource(deps(), s.id, { force: true });
    expect(run.outcome).toBe('completed');
    const r = await sql<{ push: string; request: string }>`
      SELECT min(p.xmin::text) AS push, (SELECT g.xmin::text FROM github_requests g
        WHERE g.run_id = ${run.runId}) AS request
      FROM push_events p WHERE p.source_id = ${s.id}`.execute(t.db);
    expect(r.rows[0]!.request).toBe(r.rows[0]!.push);
  });

  it('its session killed while the request is out: the gate frees at once, the row counts, the sweep closes it', async () => {
    const s = await newSource();
    let killed = 0;
    fake.onRequest = async () => {
      if (killed++ > 0) return;
      const holders = await gateHolders();
      expect(holders).toHaveLength(1);
      await sql`SELECT pg_terminate_backend(${holders[0]!})`.execute(t.db);
      await waitFor(async () => (await gateHolders()).length === 0, {
        what: 'the dead session to drop its gate',
      });
    };
    const err = await pollSource(deps(), s.id, { force: true }).catch((e: Error) => e);
    expect(err).toBeInstanceOf(Error);
    const rows = await t.db
      .selectFrom('github_requests')
      .select(['outcome', 'sent_at'])
      .where('path', 'like', s.path)
      .execute();
    // Marked sent before it left: it counts, and only the sweep closes it.
    expect(rows).toHaveLength(1);
    expect(rows[0]!.outcome).toBe('sent');
    expect(rows[0]!.sent_at).not.toBeNull();
    expect((await github.budget()).spent.poll).toBe(1);
    expect(await settleAbandonedReservations(t.db, 0)).toBe(1);
    expect((await github.budget()).spent.poll).toBe(1);
    expect(await gateHolders()).toEqual([]);
    // Nobody cleaned up the gate: the next poll takes it.
    const again = await pollSource(deps(), s.id, { force: true });
    expect(again.outcome).toBe('completed');
  });

  it('a busy gate: the reservation is sent through the gate once it frees, as before', async () => {
    const s = await newSource();
    fake.addEvents(s.feed, [pushEvent()]);
    const holder = new pg.Client({ connectionString: t.url, application_name: 'holder' });
    await holder.connect();
    const credential = github.credential;
    try {
      await holder.query('SELECT pg_advisory_lock($1, $2)', [LockSpace.gate, int4Key(credential)]);
      const poll = pollSource(deps(), s.id, { force: true });
      await waitFor(
        async () => {
          const r = await sql<{ n: number }>`
            SELECT count(*)::int AS n FROM pg_stat_activity
            WHERE datname = current_database() AND application_name = 'gpi-gate'
              AND wait_event_type = 'Lock'`.execute(t.db);
          return r.rows[0]!.n === 1;
        },
        { what: "the poll's request to wait on the gate's own session" },
      );
      expect(fake.requests).toHaveLength(0);
      await holder.query('SELECT pg_advisory_unlock($1, $2)', [
        LockSpace.gate,
        int4Key(credential),
      ]);
      expect((await poll).outcome).toBe('completed');
      expect(fake.requests).toHaveLength(1);
    } finally {
      await holder.end();
    }
    expect(await gateHolders()).toEqual([]);
  });
});
