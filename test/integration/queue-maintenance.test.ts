import { sql } from 'kysely';
import { beforeAll, describe, expect, it } from 'vitest';
import { handleBackfill, handleMaintenance, type JobContext } from '../../src/jobs/handlers.ts';
import { pruneLedgers } from '../../src/jobs/prune.ts';
import { sourceSpec } from '../../src/platform/config/source-spec.ts';
import { addSource } from '../../src/store/sources.ts';
import { captureLogger, testConfig } from '../recovery/helpers.ts';
import { useTestDatabase } from '../support/db.ts';

const t = useTestDatabase();
const DAY = 86_400_000;
const now = new Date();
const old = new Date(now.getTime() - 40 * DAY);
const recent = new Date(now.getTime() - 2 * DAY);
let sourceId: string;

async function counts() {
  const r = await sql<{ runs: number; requests: number; attempts: number }>`
    SELECT (SELECT count(*)::int FROM ingestion_runs) AS runs,
           (SELECT count(*)::int FROM github_requests) AS requests,
           (SELECT count(*)::int FROM enrichment_attempts) AS attempts`.execute(t.db);
  return r.rows[0]!;
}

/** Old finished rows (to go), old in-flight rows and recent rows (to stay). */
async function seed(oldFinished: number) {
  for (let i = 0; i < oldFinished; i++) {
    await t.db
      .insertInto('ingestion_runs')
      .values({ source_id: sourceId, status: 'completed', started_at: old, finished_at: old })
      .execute();
    await t.db
      .insertInto('github_requests')
      .values({
        credential: 'anonymous',
        purpose: 'poll',
        path: '/events',
        outcome: 'completed',
        reserved_at: old,
      })
      .execute();
    await t.db
      .insertInto('enrichment_attempts')
      .values({ class: 'actor', entity_id: 1, attempt: i + 1, started_at: old, finished_at: old })
      .execute();
  }
  await t.db
    .insertInto('ingestion_runs')
    .values([
      { source_id: sourceId, status: 'running', started_at: old },
      { source_id: sourceId, status: 'completed', started_at: recent, finished_at: recent },
    ])
    .execute();
  await t.db
    .insertInto('github_requests')
    .values([
      {
        credential: 'anonymous',
        purpose: 'enrich',
        path: '/users/a',
        outcome: 'sent',
        reserved_at: old,
      },
      {
        credential: 'anonymous',
        purpose: 'poll',
        path: '/events',
        outcome: 'completed',
        reserved_at: recent,
      },
    ])
    .execute();
  await t.db
    .insertInto('enrichment_attempts')
    .values([
      { class: 'actor', entity_id: 2, attempt: 1, started_at: old, finished_at: null },
      { class: 'actor', entity_id: 3, attempt: 1, started_at: recent, finished_at: recent },
    ])
    .execute();
}

beforeAll(async () => {
  sourceId = (await addSource(t.db, sourceSpec('public'), 'live')).source.id;
});

describe('maintenance', () => {
  it('prunes finished rows past the retention in batches, keeping in-flight and recent ones', async () => {
    await seed(5);
    const report = await pruneLedgers(t.db, { retentionDays: 30, now, batchSize: 2 });
    expect(report).toMatchObject({
      complete: true,
      deleted: { ingestion_runs: 5, github_requests: 5, enrichment_attempts: 5 },
    });
    expect(await counts()).toEqual({ runs: 2, requests: 2, attempts: 2 });
    const kept = await t.db.selectFrom('ingestion_runs').select('status').orderBy('id').execute();
    expect(kept.map((r) => r.status)).toEqual(['running', 'completed']);
  });

  it('stops between batches when told to, and the next pass carries on', async () => {
    await seed(3);
    let batches = 0;
    const partial = await pruneLedgers(t.db, {
      retentionDays: 30,
      now,
      batchSize: 2,
      shouldStop: () => batches++ >= 1,
    });
    expect(partial).toMatchObject({
      complete: false,
      deleted: { ingestion_runs: 2, github_requests: 0 },
    });

    const { logger, events } = captureLogger();
    const ctx = {
      deps: { config: testConfig(), db: t.db, pool: t.pool, logger, workerId: 'test:1' },
      boss: undefined,
    } as unknown as JobContext;
    const done = await handleMaintenance(ctx, { id: 'maintenance-1' });
    expect(done).toMatchObject({
      outcome: 'pruned',
      deleted: { ingestion_runs: 1, github_requests: 3, enrichment_attempts: 3 },
    });
    expect(events('job.completed')).toMatchObject([
      {
        queue: 'maintenance',
        job_id: 'maintenance-1',
        outcome: 'pruned',
        duration_ms: expect.any(Number),
      },
    ]);
    expect(await counts()).toEqual({ runs: 4, requests: 4, attempts: 4 });
  });
});

describe('job.completed', () => {
  it('a job that found nothing to do says so at debug; one that did something at info', async () => {
    const run = async (level: string) => {
      const { logger, events } = captureLogger(level);
      const ctx = {
        deps: { config: testConfig(), db: t.db, pool: t.pool, logger, workerId: 'test:1' },
        boss: undefined,
      } as unknown as JobContext;
      // No gap recorded: the backfill job finds nothing due.
      expect(await handleBackfill(ctx, { id: `backfill-${level}` })).toMatchObject({
        outcome: 'nothing_due',
      });
      expect(await handleMaintenance(ctx, { id: `maintenance-${level}` })).toMatchObject({
        outcome: 'pruned',
      });
      return events('job.completed').map((l) => [l.queue, l.outcome, l.level]);
    };
    expect(await run('info')).toEqual([['maintenance', 'pruned', 'info']]);
    expect(await run('debug')).toEqual([
      ['backfill', 'nothing_due', 'debug'],
      ['maintenance', 'pruned', 'info'],
    ]);
  });
});
