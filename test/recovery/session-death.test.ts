import { sql } from 'kysely';
import pg from 'pg';
import type { PgBoss } from 'pg-boss';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createBoss } from '../../src/jobs/boss.ts';
import { handleEnrichCycle, type JobContext } from '../../src/jobs/handlers.ts';
import { reconcile } from '../../src/jobs/reconciler.ts';
import { int4Key, LockSpace } from '../../src/platform/db/locks.ts';
import { pollSource } from '../../src/poll/poll-source.ts';
import { useTestDatabase } from '../support/db.ts';
import { type FakeGitHub, startFakeGitHub } from '../support/fake-github.ts';
import { captureLogger, waitFor } from './helpers.ts';
import { addPublicSource, liveDeps, seedPushes, type TestDeps } from './world.ts';

/**
 * Advisory locks die with their session. A second session takes the source lock (or the
 * request gate) and is then killed by the server — pg_terminate_backend, not a polite
 * unlock — as a crashed process's connection would be. Before the kill the lock holds
 * (source.busy; gate timeout); after it, with no cleanup by anyone, the work goes through.
 *
 * Residual gap: the dying session is a second connection, not this test process's own.
 */

const t = useTestDatabase();
let fake: FakeGitHub;
let deps: TestDeps;
let boss: PgBoss;
let sourceId: number;
const log = captureLogger();

interface Doomed {
  pid: number;
  kill(): Promise<void>;
}

/** A session that takes a session-level advisory lock and keeps it until killed. */
async function doomedSession(space: number, id: number): Promise<Doomed> {
  const client = new pg.Client({ connectionString: t.url, application_name: 'doomed' });
  client.on('error', () => {}); // it is terminated on purpose
  await client.connect();
  await client.query('SELECT pg_advisory_lock($1, $2)', [space, id]);
  const { pid } = (await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!;
  return {
    pid,
    async kill() {
      await sql`SELECT pg_terminate_backend(${pid})`.execute(t.db);
      await client.end().catch(() => {});
    },
  };
}

/** Whether any session of THIS database holds the lock (pg_locks is cluster-wide). */
async function held(space: number, id: number): Promise<boolean> {
  const r = await sql<{ held: boolean }>`
    SELECT EXISTS (SELECT 1 FROM pg_locks
      WHERE locktype = 'advisory' AND granted AND objsubid = 2
        AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
        AND classid = ${space}::int::oid AND objid = ${id}::int::oid) AS held`.execute(t.db);
  return r.rows[0]!.held;
}

beforeAll(async () => {
  fake = await startFakeGitHub();
  seedPushes(fake, 2, 100);
  deps = liveDeps(t, fake, log.logger, { GATE_WAIT_SECONDS: '1' });
  boss = createBoss(t.url, deps.config, log.logger, { supervise: false, max: 1 });
  await boss.start();
  sourceId = await addPublicSource(t);
});

afterAll(async () => {
  await boss?.stop({ graceful: false });
  await deps?.close();
  await fake?.close();
});

describe('advisory-lock release on session death', () => {
  it('the source lock: busy while the session lives, polled once it is killed', async () => {
    const poller = await doomedSession(LockSpace.source, sourceId);
    // The dead poller's run, as it would have left it.
    const orphan = await t.db
      .insertInto('ingestion_runs')
      .values({ source_id: sourceId, status: 'running', worker: 'doomed:1' })
      .returning('id')
      .executeTakeFirstOrThrow();

    const busy = await pollSource(deps, sourceId, { jobId: 'tick-1' });
    expect(busy.outcome).toBe('busy');
    expect(log.events('source.busy')).toMatchObject([{ source_id: sourceId, level: 'info' }]);
    // While the lock lives, the reconciler leaves its run alone.
    expect((await reconcile({ ...deps, boss })).interruptedRuns).toEqual([]);
    expect(fake.requests).toHaveLength(0);

    await poller.kill();
    await waitFor(async () => !(await held(LockSpace.source, sourceId)), {
      what: 'the server to release the dead session’s lock',
    });

    // Interrupted: a failure of its source, not a death (no request of it was in flight).
    expect((await reconcile({ ...deps, boss })).interruptedRuns).toEqual([
      { runId: Number(orphan.id), sourceId, onAnswer: false, deaths: 0, setAsideUntil: null },
    ]);
    const polled = await pollSource(deps, sourceId, { jobId: 'tick-2' });
    expect(polled).toMatchObject({ outcome: 'completed', eventsCreated: 2 });
  });

  it('the request gate: a cycle is told no while the session lives, enriches once it is killed', async () => {
    const gate = await doomedSession(LockSpace.gate, int4Key(deps.github.credential));
    const ctx: JobContext = { deps, boss };
    const requestsBefore = fake.requests.length;

    const blocked = await handleEnrichCycle(ctx, 'actor', { id: 'gate-held' });
    expect(blocked).toMatchObject({ outcome: 'budget_exhausted', processed: 0 });
    expect(fake.requests.length).toBe(requestsBefore);
    const claimed = await sql<{ n: number }>`
      SELECT count(*)::int AS n FROM actors WHERE claimed_until > now()`.execute(t.db);
    expect(claimed.rows[0]!.n).toBe(0);

    await gate.kill();
    await waitFor(async () => !(await held(LockSpace.gate, int4Key(deps.github.credential))), {
      what: 'the gate to be released',
    });
    const after = await handleEnrichCycle(ctx, 'actor', { id: 'gate-free' });
    expect(after).toMatchObject({ outcome: 'idle', processed: 2 });
    expect(after.outcomes.enriched).toBe(2);
  });
});
