import { sql } from 'kysely';
import type { PgBoss } from 'pg-boss';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createBoss } from '../../src/jobs/boss.ts';
import { JobLiveness, LIVENESS_APPLICATION_NAME } from '../../src/jobs/liveness.ts';
import {
  failOrphanedJobs,
  ORPHAN_GRACE_SECONDS,
  unlockedActiveJobs,
} from '../../src/jobs/orphaned-jobs.ts';
import { QUEUES, type QueueName } from '../../src/jobs/queue-names.ts';
import { captureLogger, testConfig, waitFor } from '../recovery/helpers.ts';
import { useTestDatabase } from '../support/db.ts';

/**
 * The orphan sweep against real Postgres sessions and locks (ADR 0011). A "dead worker" is
 * a pg-boss fetch whose job no liveness session holds a lock for — exactly what a worker
 * leaves when it is SIGKILLed (its session, and the lock, die with it). The real-process
 * version, a worker killed mid-job on each queue, is test/recovery/orphaned-jobs.test.ts.
 */

const t = useTestDatabase();
const config = testConfig();
const { logger, events } = captureLogger();
let boss: PgBoss;
const sessions: JobLiveness[] = [];

function liveness(): JobLiveness {
  const l = new JobLiveness(t.url, logger);
  sessions.push(l);
  return l;
}

beforeAll(async () => {
  boss = createBoss(t.url, config, logger, { role: 'test', supervise: false, max: 2 });
  await boss.start();
});

afterEach(async () => {
  await Promise.all(sessions.splice(0).map((s) => s.stop()));
  await sql`DELETE FROM pgboss.job`.execute(t.db);
});

afterAll(async () => {
  await boss.stop({ graceful: false });
});

/** A job made active by a fetch, as a worker's fetch makes it. */
async function activeJob(queue: QueueName): Promise<string> {
  await boss.send(queue, {});
  const [job] = await boss.fetch(queue);
  expect(job, `a ${queue} job to fetch`).toBeDefined();
  return job!.id;
}

async function stateOf(id: string): Promise<string> {
  const r = await sql<{
    state: string;
  }>`SELECT state::text FROM pgboss.job WHERE id = ${id}`.execute(t.db);
  return r.rows[0]!.state;
}

const sweep = (graceSeconds?: number) =>
  failOrphanedJobs({ db: t.db, boss, pgbossSchema: 'pgboss', logger, graceSeconds });

describe('orphan sweep', () => {
  it('never fails a job whose worker holds its lock, however old', async () => {
    const worker = liveness();
    await worker.start();
    const id = await activeJob(QUEUES.pollSources);
    await worker.hold(id);
    const result = await sweep(0);
    expect(result.failed).toEqual([]);
    expect(await stateOf(id)).toBe('active');
  });

  it('fails at once a job that started before every live worker (its own worker is gone)', async () => {
    const id = await activeJob(QUEUES.reconcile);
    // A worker starts after the job: whoever fetched it is not alive any more.
    await liveness().start();
    const result = await sweep(ORPHAN_GRACE_SECONDS);
    expect(result.failed.map((j) => [j.id, j.queue])).toEqual([[id, QUEUES.reconcile]]);
    expect(await stateOf(id)).toBe('failed');
    // What the README's psql recipe looks for.
    const output = await sql<{ message: string }>`
      SELECT output->>'message' AS message FROM pgboss.job WHERE id = ${id}`.execute(t.db);
    expect(output.rows[0]!.message).toMatch(/^orphaned: /);
    expect(events('reconcile.job_orphaned')).toEqual([
      expect.objectContaining({ queue: QUEUES.reconcile, orphan_job_id: id }),
    ]);
    // Failed once: a second sweep finds nothing, and the queue takes a new job.
    expect((await sweep(0)).failed).toEqual([]);
    expect(await boss.send(QUEUES.reconcile, {})).toEqual(expect.any(String));
  });

  it('with an older worker alive, waits out the grace, then fails it', async () => {
    await liveness().start();
    const id = await activeJob(QUEUES.maintenance);
    const early = await sweep(60);
    expect(early.failed).toEqual([]);
    expect(await stateOf(id)).toBe('active');
    // The sweep says when to look again: the moment the job can be judged.
    const [row] = await unlockedActiveJobs(t.db, 'pgboss', [QUEUES.maintenance], 60);
    expect(early.recheckAt).toEqual(row!.judge_at);
    expect(early.recheckAt!.getTime() - row!.started_on.getTime()).toBe(60_000);

    const late = await waitFor(
      async () => {
        const r = await sweep(1);
        return r.failed.length ? r : null;
      },
      { timeoutMs: 30_000, what: 'the job to be judged after a 1 s grace' },
    );
    expect(late.failed.map((j) => j.id)).toEqual([id]);
    expect(await stateOf(id)).toBe('failed');
  });

  it('sees every queue of ours, and only ours', async () => {
    await liveness().start();
    const ours = [];
    for (const q of [QUEUES.enrichActor, QUEUES.enrichRepository]) ours.push(await activeJob(q));
    await boss.createQueue('someone-elses');
    await boss.send('someone-elses', {});
    const [theirs] = await boss.fetch('someone-elses');
    const failed = (await sweep(0)).failed.map((j) => j.id).sort();
    expect(failed).toEqual(ours.sort());
    expect(await stateOf(theirs!.id)).toBe('active');
    await boss.deleteQueue('someone-elses');
  });

  it('a liveness session cut by the server takes its jobs locks again by itself', async () => {
    const worker = liveness();
    await worker.start();
    const id = await activeJob(QUEUES.pollSources);
    await worker.hold(id);
    const cut = await sql<{ n: number }>`
      SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity
      WHERE datname = current_database() AND application_name = ${LIVENESS_APPLICATION_NAME}`.execute(
      t.db,
    );
    expect(cut.rows[0]!.n).toBe(1);
    await waitFor(
      async () => (await unlockedActiveJobs(t.db, 'pgboss', [QUEUES.pollSources], 0)).length === 0,
      { timeoutMs: 30_000, what: 'the lock to be held again after the reconnect' },
    );
    expect((await sweep(0)).failed).toEqual([]);
    expect(await stateOf(id)).toBe('active');
    await worker.release(id);
    expect((await unlockedActiveJobs(t.db, 'pgboss', [QUEUES.pollSources], 0)).length).toBe(1);
  });
});
