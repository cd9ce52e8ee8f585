import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createBoss } from '../../src/jobs/boss.ts';
import { JobLiveness } from '../../src/jobs/liveness.ts';
import { ORPHAN_GRACE_SECONDS } from '../../src/jobs/orphaned-jobs.ts';
import { ALL_QUEUES, QUEUES, type QueueName } from '../../src/jobs/queue-names.ts';
import { sourceSpec } from '../../src/platform/config/source-spec.ts';
import { addSource } from '../../src/store/sources.ts';
import { type FakeGitHub, startFakeGitHub } from '../support/fake-github.ts';
import { createScratchDatabase, type ScratchDatabase } from '../support/scratch-db.ts';
import { captureLogger, type LogLine, testConfig } from './helpers.ts';
import { type Child, killAll, seedPushes, spawnBin } from './world.ts';

/**
 * A worker SIGKILLed while it runs a job, on each of the five queues. Every queue
 * is stately (one job queued, one active): the dead worker's job used to stay `active` until
 * pg-boss's heartbeat expiry (up to ~90 s) and its queue ran nothing meanwhile. Now the next
 * worker's orphan sweep fails it (its liveness lock died with the process, ADR 0011) in its
 * start-up reconcile, and the queue's next job runs after it without anyone sending it. The
 * seconds it takes are printed (docs/reliability.md), never asserted: on a loaded machine
 * every step is slower, and the order of events is what proves the recovery.
 *
 * FAULT_JOB=<queue> makes the real bin/worker kill itself as soon as it starts a job of that
 * queue, after taking the job's liveness lock — a crash mid-job, nothing stood in for.
 */

const TICK_SECONDS = 1;
const LEASE_SECONDS = 2;

let fake: FakeGitHub;
const children: Child[] = [];
const elders: JobLiveness[] = [];
const figures: string[] = [];

beforeAll(async () => {
  fake = await startFakeGitHub();
});

afterAll(async () => {
  await killAll(children);
  await fake?.close();
  if (figures.length) {
    console.log(
      `\nOrphaned job per queue (TICK_SECONDS=${TICK_SECONDS})\n| queue | orphan failed (s after spawn) | next job of the queue completed (s after spawn) |\n|---|---|---|\n${figures.join('\n')}\n`,
    );
  }
});

function start(env: Record<string, string>): Child {
  const child = spawnBin('worker', env);
  children.push(child);
  return child;
}

/** Sends one job the way a tick or a hint would (maintenance is hourly: the test sends it). */
async function send(url: string, queue: QueueName): Promise<void> {
  const boss = createBoss(url, testConfig(), captureLogger().logger, {
    role: 'test',
    supervise: false,
    max: 1,
  });
  await boss.start();
  try {
    await boss.send(queue, {});
  } finally {
    await boss.stop({ graceful: false });
  }
}

const at = (l: LogLine) => Date.parse(String(l.time));

describe('a worker killed mid-job', () => {
  it('covers every queue', () => {
    expect([...ALL_QUEUES].sort()).toEqual(
      [
        QUEUES.enrichActor,
        QUEUES.enrichRepository,
        QUEUES.maintenance,
        QUEUES.pollSources,
        QUEUES.reconcile,
        QUEUES.backfill,
        QUEUES.fetchCommits,
      ].sort(),
    );
  });

  for (const [i, queue] of ALL_QUEUES.entries()) {
    it(`${queue}: the next worker fails the orphan at start-up, and the queue's next job runs after it`, {
      timeout: 180_000,
    }, async () => {
      let scratch: ScratchDatabase | undefined;
      try {
        scratch = await createScratchDatabase();
        fake.reset();
        seedPushes(fake, 2, 3000 + i * 10);
        await addSource(scratch.db, sourceSpec('public'), 'live');
        if (queue === QUEUES.fetchCommits) {
          // A public source targets no push for commits: one pending push, as a repo source's
          // poll would leave it, gives the reconciler a fetch-commits cycle to send.
          await sql`INSERT INTO repositories (id, full_name) VALUES (4242, 'orphan/commits')`.execute(
            scratch.db,
          );
          await sql`
            INSERT INTO push_events (actor_id, repository_id, ref, before, head, created_at,
              payload, commits_state, commits_next_attempt_at)
            VALUES (1, 4242, 'refs/heads/main', repeat('a', 40), repeat('b', 40), now(), '{}',
              'pending', now())`.execute(scratch.db);
        }
        const env = {
          // Idle jobs log job.completed at debug: the next job of a queue is waited for by it.
          LOG_LEVEL: 'debug',
          DATABASE_URL: scratch.url,
          GITHUB_MODE: 'live',
          GITHUB_API_URL: fake.url,
          TICK_SECONDS: String(TICK_SECONDS),
          ENRICH_LEASE_SECONDS: String(LEASE_SECONDS),
        };

        // 1. A worker dies as it starts a job of this queue.
        const first = start({ ...env, FAULT_JOB: queue });
        if (queue === QUEUES.maintenance) {
          await first.waitForLine((l) => l.event === 'worker.started', 'the worker to start');
          await send(scratch.url, queue);
        }
        const exit = await Promise.race([
          first.exited,
          new Promise<'timeout'>((r) => setTimeout(() => r('timeout'), 90_000)),
        ]);
        expect(exit, `the worker never ran a ${queue} job`).toEqual({
          code: null,
          signal: 'SIGKILL',
        });
        expect(first.stderr.join('')).toContain(`FAULT_JOB ${queue}: killing process`);
        const orphans = await sql<{ id: string }>`
          SELECT id::text FROM pgboss.job WHERE name = ${queue} AND state = 'active'`.execute(
          scratch.db,
        );
        expect(orphans.rows, `the dead worker's ${queue} job is left active`).toHaveLength(1);
        const orphan = orphans.rows[0]!.id;

        // 2. The next worker, timed from its spawn (process start included).
        const spawned = Date.now();
        const second = start(env);
        const started = at(
          await second.waitForLine((l) => l.event === 'worker.started', 'the worker to start'),
        );
        const failed = await second.waitForLine(
          (l) => l.event === 'reconcile.job_orphaned' && l.orphan_job_id === orphan,
          `the ${queue} orphan to be failed`,
        );
        // Nobody sends the queue's next job by hand: the sweep puts a poll or maintenance
        // pass back at once, the reconciler a cycle (the entities are due: the dead worker
        // never claimed them), and the ticks a reconcile.
        const next = await second.waitForLine(
          (l) => l.event === 'job.completed' && l.queue === queue && at(l) >= at(failed),
          `the next ${queue} job to complete`,
        );
        const failedAfter = (at(failed) - spawned) / 1000;
        const nextAfter = (at(next) - spawned) / 1000;
        // The dead worker's job started before this worker's liveness session, so it is
        // judged at once, in the start-up reconcile — before the worker takes any job.
        expect(at(failed), 'the orphan failed before the worker started').toBeLessThanOrEqual(
          started,
        );
        // What let the queue run again is the sweep, not pg-boss's heartbeat expiry (the
        // old ~60-90 s wait): the queue is stately, so its next job could only start once the
        // orphan was no longer active, and the orphan was failed by this worker's sweep (the
        // event above, and the message below) before the worker took any job. How many
        // seconds that takes is a figure (printed below, docs/reliability.md), not a bound a
        // loaded machine could break: a test asserts the order of events, not their speed.
        expect(
          at(next) - Number(next.duration_ms ?? 0),
          'the next job started after the orphan failed',
        ).toBeGreaterThanOrEqual(at(failed));
        const state = await sql<{ state: string; message: string | null }>`
          SELECT state::text, output->>'message' AS message FROM pgboss.job
          WHERE id = ${orphan}`.execute(scratch.db);
        expect(state.rows[0]).toEqual({
          state: 'failed',
          message: expect.stringMatching(/^orphaned: /),
        });
        figures.push(`| ${queue} | ${failedAfter.toFixed(1)} s | ${nextAfter.toFixed(1)} s |`);

        second.process.kill('SIGTERM');
        expect(await second.exited).toEqual({ code: 0, signal: null });
      } finally {
        await killAll(children);
        await scratch?.drop();
      }
    });
  }

  it('with an older worker alive, the orphan waits out the grace, then the queue moves', {
    timeout: 180_000,
  }, async () => {
    let scratch: ScratchDatabase | undefined;
    try {
      scratch = await createScratchDatabase();
      fake.reset();
      const env = {
        // Idle jobs log job.completed at debug: the next job of a queue is waited for by it.
        LOG_LEVEL: 'debug',
        DATABASE_URL: scratch.url,
        GITHUB_MODE: 'live',
        GITHUB_API_URL: fake.url,
        TICK_SECONDS: String(TICK_SECONDS),
      };
      // An older worker, alive throughout: a liveness session of its own, opened first. With
      // it, a dead worker's job is never "older than every live worker", so only the grace
      // can judge it (the rule for a fleet where some worker outlives the crash).
      const older = new JobLiveness(scratch.url, captureLogger().logger);
      elders.push(older);
      await older.start();
      const b = start({ ...env, FAULT_JOB: QUEUES.maintenance });
      await b.waitForLine((l) => l.event === 'worker.started', 'worker B to start');
      await send(scratch.url, QUEUES.maintenance);
      expect(await b.exited).toEqual({ code: null, signal: 'SIGKILL' });
      const died = Date.now();
      const orphan = await sql<{ id: string; started_on: Date }>`
        SELECT id::text, started_on FROM pgboss.job
        WHERE name = 'maintenance' AND state = 'active'`.execute(scratch.db);
      expect(orphan.rows).toHaveLength(1);
      const jobStarted = orphan.rows[0]!.started_on.getTime();

      // C starts at once: too soon to judge the job (younger than the grace, and not older
      // than every live worker) — it must come back for it by itself, not a tick later.
      const c = start(env);
      const failed = await c.waitForLine(
        (l) => l.event === 'reconcile.job_orphaned' && l.orphan_job_id === orphan.rows[0]!.id,
        'worker C to fail the orphan',
      );
      expect(at(failed), 'not judged before the grace').toBeGreaterThanOrEqual(
        jobStarted + ORPHAN_GRACE_SECONDS * 1000 - 1000, // database and process clocks
      );
      const next = await c.waitForLine(
        (l) => l.event === 'job.completed' && l.queue === 'maintenance' && at(l) > at(failed),
        'worker C to run the maintenance pass again',
      );
      const judgedAfter = (at(failed) - jobStarted) / 1000;
      // Judged once the grace is out (above), by C's own sweep; how soon after is a figure.
      const orphanRow = await sql<{ state: string; message: string | null }>`
        SELECT state::text, output->>'message' AS message FROM pgboss.job
        WHERE id = ${orphan.rows[0]!.id}`.execute(scratch.db);
      expect(orphanRow.rows[0]).toEqual({
        state: 'failed',
        message: expect.stringMatching(/^orphaned: /),
      });
      figures.push(
        `| maintenance, an older worker alive (the grace rule) | ${judgedAfter.toFixed(1)} s after the job started (${((at(failed) - died) / 1000).toFixed(1)} s after the death) | ${((at(next) - died) / 1000).toFixed(1)} s after the death |`,
      );
      c.process.kill('SIGTERM');
      expect(await c.exited).toEqual({ code: 0, signal: null });
    } finally {
      await killAll(children);
      await Promise.all(elders.splice(0).map((l) => l.stop()));
      await scratch?.drop();
    }
  });
});
