import { sql } from 'kysely';
import type { PgBoss } from 'pg-boss';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EntityClass } from '../../src/budget/types.ts';
import { createBoss } from '../../src/jobs/boss.ts';
import { handleEnrichCycle, handlePollSources, type JobContext } from '../../src/jobs/handlers.ts';
import { liveJobCounts } from '../../src/jobs/live-jobs.ts';
import { enrichQueue, QUEUES } from '../../src/jobs/queue-names.ts';
import { reconcile } from '../../src/jobs/reconciler.ts';
import { useTestDatabase } from '../support/db.ts';
import { type FakeGitHub, startFakeGitHub } from '../support/fake-github.ts';
import { captureLogger } from './helpers.ts';
import { addPublicSource, liveDeps, seedPushes, type TestDeps, type World } from './world.ts';

/**
 * Pending-work recovery: the crash between COMMIT and send. Ingest (the hints are sent),
 * then delete every pg-boss job — exactly what a process killed right after the run's
 * commit leaves behind, minus the hints. The reconciler must find the work in the entity
 * rows alone: one cycle per class, no entity row touched; and the cycles must complete it.
 */

const t = useTestDatabase();
let fake: FakeGitHub;
let deps: TestDeps;
let boss: PgBoss;
let world: World;
const log = captureLogger();

const CLASSES: EntityClass[] = ['actor', 'repository'];

async function entitySnapshot(): Promise<string[]> {
  const r = await sql<{ row: string }>`
    SELECT t::text AS row FROM (
      SELECT 'actor' AS class, a::text AS body FROM actors a
      UNION ALL SELECT 'repository', r::text FROM repositories r) t
    ORDER BY row`.execute(t.db);
  return r.rows.map((x) => x.row);
}

function ctx(): JobContext {
  return { deps: { ...deps, logger: log.logger }, boss };
}

beforeAll(async () => {
  fake = await startFakeGitHub();
  world = seedPushes(fake, 4);
  deps = liveDeps(t, fake, log.logger);
  boss = createBoss(t.url, deps.config, log.logger, { supervise: false, max: 2 });
  await boss.start();
  await addPublicSource(t);
});

afterAll(async () => {
  await boss?.stop({ graceful: false });
  await deps?.close();
  await fake?.close();
});

describe('pending-work recovery', () => {
  it('rediscovers lost hints from the entity rows and completes the work', async () => {
    // Ingest through the tick's handler: rows committed, hints sent.
    const poll = await handlePollSources(ctx(), { id: 'poll-1' });
    expect(poll.runs).toMatchObject({ completed: 1 });
    expect(log.events('enrichment.dispatched')).toHaveLength(1);
    expect(
      await liveJobCounts(t.db, 'pgboss', [QUEUES.enrichActor, QUEUES.enrichRepository]),
    ).toEqual({ [QUEUES.enrichActor]: 1, [QUEUES.enrichRepository]: 1 });

    // The crash: every job is gone, the rows are not.
    await sql`DELETE FROM pgboss.job`.execute(t.db);
    const before = await entitySnapshot();
    const requestsBefore = fake.requests.length;

    const report = await reconcile({ ...deps, boss });
    expect(report.classes.map((c) => [c.class, c.action])).toEqual([
      ['actor', 'dispatched'],
      ['repository', 'dispatched'],
    ]);
    expect(log.events('reconcile.dispatched').map((l) => l.class)).toEqual(['actor', 'repository']);
    // Exactly one cycle per class, nothing else, no entity row touched, nothing requested.
    const jobs = await sql<{ name: string; data: { class: string; reason: string } }>`
      SELECT name, data FROM pgboss.job ORDER BY name`.execute(t.db);
    expect(jobs.rows).toEqual([
      { name: QUEUES.enrichActor, data: { class: 'actor', reason: 'reconcile' } },
      { name: QUEUES.enrichRepository, data: { class: 'repository', reason: 'reconcile' } },
    ]);
    expect(await entitySnapshot()).toEqual(before);
    expect(fake.requests.length).toBe(requestsBefore);

    // A second pass while the cycles wait sends nothing more.
    const again = await reconcile({ ...deps, boss });
    expect(again.classes.map((c) => c.action)).toEqual(['live_job', 'live_job']);

    // Run the cycles the reconciler sent, as a worker would.
    for (const cls of CLASSES) {
      const [job] = await boss.fetch<{ class: EntityClass }>(enrichQueue(cls));
      expect(job!.data.class).toBe(cls);
      const result = await handleEnrichCycle(ctx(), cls, job!);
      expect(result).toMatchObject({ outcome: 'idle', processed: 4 });
      await boss.complete(enrichQueue(cls), job!.id);
    }
    const states = await sql<{ class: string; state: string; n: number }>`
      SELECT 'actor' AS class, enrichment_state AS state, count(*)::int AS n FROM actors GROUP BY 2
      UNION ALL
      SELECT 'repository', enrichment_state, count(*)::int FROM repositories GROUP BY 2`.execute(
      t.db,
    );
    expect(states.rows).toEqual([
      { class: 'actor', state: 'enriched', n: world.actorIds.length },
      { class: 'repository', state: 'enriched', n: world.repositoryIds.length },
    ]);
  });

  it('leaves enriched rows alone: with nothing due, a pass sends nothing', async () => {
    await sql`DELETE FROM pgboss.job`.execute(t.db);
    const before = await entitySnapshot();
    const report = await reconcile({ ...deps, boss });
    expect(report.classes.map((c) => c.action)).toEqual(['nothing_due', 'nothing_due']);
    expect(
      await liveJobCounts(t.db, 'pgboss', [QUEUES.enrichActor, QUEUES.enrichRepository]),
    ).toEqual({ [QUEUES.enrichActor]: 0, [QUEUES.enrichRepository]: 0 });
    expect(await entitySnapshot()).toEqual(before);
  });

  it('marks a run left running by a dead poller interrupted, and only that one', async () => {
    const sourceId = Number(
      (await t.db.selectFrom('event_sources').select('id').executeTakeFirstOrThrow()).id,
    );
    const orphan = await t.db
      .insertInto('ingestion_runs')
      .values({ source_id: sourceId, status: 'running', worker: 'dead:1' })
      .returning('id')
      .executeTakeFirstOrThrow();
    const report = await reconcile({ ...deps, boss });
    expect(report.interruptedRuns).toEqual([
      { runId: Number(orphan.id), sourceId, onAnswer: false, deaths: 0, setAsideUntil: null },
    ]);
    // An interrupted run is a failure of its source (ADR 0120), and says so; with no request
    // of it in flight it is not a death.
    const source = await t.db
      .selectFrom('event_sources')
      .select(['consecutive_failures', 'poll_deaths', 'last_error'])
      .where('id', '=', String(sourceId))
      .executeTakeFirstOrThrow();
    expect(source.consecutive_failures).toBe(1);
    expect(source.poll_deaths).toBe(0);
    expect(source.last_error).toMatch(/^POLL_INTERRUPTED: run \d+ ended with its process/);
    const row = await t.db
      .selectFrom('ingestion_runs')
      .select(['status', 'finished_at', 'error'])
      .where('id', '=', orphan.id)
      .executeTakeFirstOrThrow();
    expect(row.status).toBe('interrupted');
    expect(row.finished_at).toBeInstanceOf(Date);
    expect(row.error).toMatch(/interrupted/);
    const completed = await t.db
      .selectFrom('ingestion_runs')
      .select('status')
      .where('id', '<>', orphan.id)
      .execute();
    expect(completed.map((r) => r.status)).toEqual(['completed']);
  });
});
