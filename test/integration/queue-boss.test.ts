import { sql } from 'kysely';
import type { PgBoss } from 'pg-boss';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createBoss, installPgBoss, queueDefinitions } from '../../src/jobs/boss.ts';
import { dispatchHints, sendCycle } from '../../src/jobs/dispatch.ts';
import { liveJobCounts } from '../../src/jobs/live-jobs.ts';
import { ALL_QUEUES, QUEUES } from '../../src/jobs/queue-names.ts';
import { Scheduler, tickSchedule } from '../../src/jobs/scheduler.ts';
import { loadConfig } from '../../src/platform/config/config.ts';
import type { RunSummary } from '../../src/poll/run-summary.ts';
import { captureLogger, testConfig } from '../recovery/helpers.ts';
import { useTestDatabase } from '../support/db.ts';

const t = useTestDatabase();
const config = testConfig();
let boss: PgBoss;
let other: PgBoss;

beforeAll(async () => {
  const { logger } = captureLogger('silent');
  boss = createBoss(t.url, config, logger, { role: 'test', supervise: false, max: 2 });
  other = createBoss(t.url, config, logger, { role: 'test-2', supervise: false, max: 2 });
  await boss.start();
  await other.start();
});

afterAll(async () => {
  await boss?.stop({ graceful: false });
  await other?.stop({ graceful: false });
});

async function clearJobs() {
  await sql`TRUNCATE pgboss.job`.execute(t.db);
}

function summary(newPending: { actor: number; repository: number }): RunSummary {
  return {
    runId: 7,
    sourceId: 3,
    source: 'public',
    outcome: 'completed',
    eventsSeen: 10,
    eventsCreated: 4,
    eventsRejected: 0,
    pagesFetched: 1,
    requestsSpent: 1,
    gap: false,
    newPending,
    nextPollAt: new Date(),
    error: null,
  };
}

describe('pg-boss installation', () => {
  it('creates the five queues, all stately, with no retries and a heartbeat', async () => {
    const r = await sql<{
      name: string;
      policy: string;
      retry_limit: number;
      expire_seconds: number;
      heartbeat_seconds: number | null;
    }>`SELECT name, policy, retry_limit, expire_seconds, heartbeat_seconds FROM pgboss.queue ORDER BY name`.execute(
      t.db,
    );
    expect(r.rows.map((q) => q.name)).toEqual([...ALL_QUEUES].sort());
    for (const q of r.rows) {
      // The template was installed with the default configuration, as bin/setup would.
      const def = queueDefinitions(loadConfig({})).find((d) => d.name === q.name)!;
      expect(q).toMatchObject({
        policy: 'stately',
        retry_limit: 0,
        expire_seconds: def.expireInSeconds,
        heartbeat_seconds: 30,
      });
    }
  });

  it('is idempotent: a second install creates nothing and converges only what differs', async () => {
    const { logger } = captureLogger('silent');
    // This config's GATE_WAIT_SECONDS (2, not the template's default 10) changes the cycle
    // queues' expiry (enrichment and fetch-commits), and nothing else.
    const again = await installPgBoss(t.url, config, logger);
    expect(again.created).toEqual([]);
    expect([...again.updated].sort()).toEqual([
      'enrich-actor',
      'enrich-repository',
      'fetch-commits',
    ]);
    const expiry = await sql<{ name: string; expire_seconds: number }>`
      SELECT name, expire_seconds FROM pgboss.queue
      WHERE name LIKE 'enrich-%' OR name = 'fetch-commits'`.execute(t.db);
    for (const q of expiry.rows) {
      const def = queueDefinitions(config).find((d) => d.name === q.name)!;
      expect(q.expire_seconds).toBe(def.expireInSeconds);
    }
    // Converged: a third install finds nothing to do (bin/setup then logs nothing at info).
    expect(await installPgBoss(t.url, config, logger)).toEqual({ created: [], updated: [] });
  });

  it('refuses to start a worker against a database without the schema (migrate: false)', async () => {
    const { logger } = captureLogger('silent');
    const wrong = createBoss(t.url, testConfig({ PGBOSS_SCHEMA: 'not_installed' }), logger, {
      supervise: false,
      max: 1,
    });
    await expect(wrong.start()).rejects.toThrow();
    await wrong.stop({ graceful: false });
    const schema = await sql<{ n: number }>`
      SELECT count(*)::int AS n FROM pg_namespace WHERE nspname = 'not_installed'`.execute(t.db);
    expect(schema.rows[0]!.n).toBe(0);
  });
});

describe('stately enrichment queues', () => {
  it('keeps one cycle queued; a second send is "already queued", not an error', async () => {
    await clearJobs();
    const first = await sendCycle(boss, 'actor', { reason: 'hint' });
    const second = await sendCycle(other, 'actor', { reason: 'reconcile' });
    expect(first.status).toBe('sent');
    expect(first.jobId).toEqual(expect.any(String));
    expect(second).toEqual({ queue: QUEUES.enrichActor, jobId: null, status: 'already_queued' });
    // The other class is independent.
    expect((await sendCycle(boss, 'repository', { reason: 'hint' })).status).toBe('sent');
    expect(
      await liveJobCounts(t.db, 'pgboss', [QUEUES.enrichActor, QUEUES.enrichRepository]),
    ).toEqual({
      [QUEUES.enrichActor]: 1,
      [QUEUES.enrichRepository]: 1,
    });
  });

  it('keeps a hint that arrives while a cycle is active (one queued + one active)', async () => {
    await clearJobs();
    await sendCycle(boss, 'actor', { reason: 'hint' });
    const [active] = await boss.fetch(QUEUES.enrichActor);
    expect(active).toBeDefined();
    expect((await sendCycle(boss, 'actor', { reason: 'hint' })).status).toBe('sent');
    expect((await sendCycle(boss, 'actor', { reason: 'hint' })).status).toBe('already_queued');
    expect(await liveJobCounts(t.db, 'pgboss', [QUEUES.enrichActor])).toEqual({
      [QUEUES.enrichActor]: 2,
    });
    await boss.complete(QUEUES.enrichActor, active!.id);
  });
});

describe('post-commit hints', () => {
  it('sends one cycle per class with new pending rows and logs the per-class summary', async () => {
    await clearJobs();
    const { logger, events } = captureLogger();
    const report = await dispatchHints(boss, logger, summary({ actor: 5, repository: 0 }));
    expect(Object.keys(report!)).toEqual(['actor']);
    const again = await dispatchHints(boss, logger, summary({ actor: 2, repository: 3 }));
    expect(again!.actor!.status).toBe('already_queued');
    expect(again!.repository!.status).toBe('sent');
    const lines = events('enrichment.dispatched');
    expect(lines).toHaveLength(2);
    expect(lines[0]).toMatchObject({
      run_id: 7,
      source_id: 3,
      actor: { new_pending: 5, status: 'sent', queue: 'enrich-actor' },
    });
    expect(lines[0]).not.toHaveProperty('repository');
    expect(lines[1]).toMatchObject({
      actor: { new_pending: 2, status: 'already_queued', enrich_job_id: null },
      repository: { new_pending: 3, status: 'sent' },
    });
  });

  it('sends nothing and logs nothing for a run that created no pending rows', async () => {
    await clearJobs();
    const { logger, lines } = captureLogger();
    expect(await dispatchHints(boss, logger, summary({ actor: 0, repository: 0 }))).toBeNull();
    expect(lines).toEqual([]);
    expect(await liveJobCounts(t.db, 'pgboss', ALL_QUEUES)).toEqual(
      Object.fromEntries(ALL_QUEUES.map((q) => [q, 0])),
    );
  });
});

describe('scheduler', () => {
  it('aligns ticks to the period so several schedulers fire in the same slot', () => {
    expect(tickSchedule(60)).toEqual({ pattern: '0 */1 * * * *' });
    expect(tickSchedule(5)).toEqual({ pattern: '*/5 * * * * *' });
    expect(tickSchedule(1)).toEqual({ pattern: '*/1 * * * * *' });
    expect(tickSchedule(7200)).toEqual({ pattern: '0 0 */2 * * *' });
    expect(tickSchedule(90)).toEqual({ pattern: '* * * * * *', interval: 90 });
  });

  it('two schedulers ticking in the same slot enqueue each tick once', async () => {
    await clearJobs();
    const { logger } = captureLogger('silent');
    // A long period so both ticks certainly fall in one slot.
    const a = new Scheduler({ boss, logger, tickSeconds: 3600 });
    const b = new Scheduler({ boss: other, logger, tickSeconds: 3600 });
    const first = await a.tick();
    const second = await b.tick();
    expect(first.map((r) => r.status)).toEqual(['sent', 'sent']);
    expect(second.map((r) => r.status)).toEqual(['already_queued', 'already_queued']);
    // Even after the first tick's jobs ran, the slot stays taken.
    for (const queue of [QUEUES.pollSources, QUEUES.reconcile]) {
      const [job] = await boss.fetch(queue);
      await boss.complete(queue, job!.id);
    }
    expect((await a.tick()).map((r) => r.status)).toEqual(['already_queued', 'already_queued']);
    expect((await a.maintenanceTick()).status).toBe('sent');
    expect((await b.maintenanceTick()).status).toBe('already_queued');
  });
});
