import { sql } from 'kysely';
import type { PgBoss } from 'pg-boss';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createBoss } from '../../src/jobs/boss.ts';
import { handlePollSources, type JobContext } from '../../src/jobs/handlers.ts';
import { liveJobCounts } from '../../src/jobs/live-jobs.ts';
import { ALL_QUEUES } from '../../src/jobs/queue-names.ts';
import { sourceSpec } from '../../src/platform/config/source-spec.ts';
import { LockSpace, tryLockSession, unlockSession } from '../../src/platform/db/locks.ts';
import { addSource } from '../../src/store/sources.ts';
import { useTestDatabase } from '../support/db.ts';
import { type FakeGitHub, startFakeGitHub } from '../support/fake-github.ts';
import { pushEvent } from '../support/github-factories.ts';
import { captureLogger } from './helpers.ts';
import { liveDeps, type TestDeps } from './world.ts';

/**
 * Source contention: a tick arrives while another session (a manual bin/ingest, another
 * worker) is polling one source. The tick must not raise, not re-enqueue, not open a run,
 * not send a request, not spend budget for that source — and still poll the others.
 */

const t = useTestDatabase();
let fake: FakeGitHub;
let deps: TestDeps;
let boss: PgBoss;
const log = captureLogger();

beforeAll(async () => {
  fake = await startFakeGitHub();
  fake.addEvents('repo:held/one', [pushEvent({ repo: { id: 94_001, name: 'held/one' } })]);
  fake.addEvents('repo:free/two', [pushEvent({ repo: { id: 94_002, name: 'free/two' } })]);
  deps = liveDeps(t, fake, log.logger);
  boss = createBoss(t.url, deps.config, log.logger, { supervise: false, max: 1 });
  await boss.start();
});

afterAll(async () => {
  await boss?.stop({ graceful: false });
  await deps?.close();
  await fake?.close();
});

describe('source contention', () => {
  it('a tick under a held source lock skips that source quietly and polls the rest', async () => {
    const held = (await addSource(t.db, sourceSpec('repo', 'held/one'), 'live')).source;
    const free = (await addSource(t.db, sourceSpec('repo', 'free/two'), 'live')).source;
    const heldBefore = await t.db
      .selectFrom('event_sources')
      .selectAll()
      .where('id', '=', held.id)
      .executeTakeFirstOrThrow();

    const other = await t.newPool(1).connect();
    try {
      expect(await tryLockSession(other, LockSpace.source, Number(held.id))).toBe(true);
      const ctx: JobContext = { deps, boss };
      const result = await handlePollSources(ctx, { id: 'tick-under-contention' });

      expect(result).toMatchObject({
        outcome: 'polled',
        sources_due: 2,
        runs: { busy: 1, completed: 1, failed: 0 },
      });
      const busy = log.events('source.busy');
      expect(busy).toHaveLength(1);
      expect(busy[0]).toMatchObject({
        level: 'info',
        source_id: Number(held.id),
        job_id: 'tick-under-contention',
        queue: 'poll-sources',
      });
      expect(log.lines.filter((l) => l.level === 'error' || l.level === 'warn')).toEqual([]);

      // Nothing happened to the held source: no run, no request, no ledger row, same row.
      const runs = await t.db
        .selectFrom('ingestion_runs')
        .select(['source_id', 'status'])
        .execute();
      expect(runs).toEqual([{ source_id: free.id, status: 'completed' }]);
      expect(fake.requests.map((r) => r.path)).toEqual(['/repos/free/two/events']);
      const ledger = await sql<{ path: string }>`SELECT path FROM github_requests`.execute(t.db);
      expect(ledger.rows.map((r) => r.path)).toEqual([
        expect.stringMatching(/^\/repos\/free\/two\/events/),
      ]);
      expect(
        await t.db
          .selectFrom('event_sources')
          .selectAll()
          .where('id', '=', held.id)
          .executeTakeFirstOrThrow(),
      ).toEqual(heldBefore);
      // And no job was enqueued to retry it: the next tick is the retry.
      const live = await liveJobCounts(t.db, 'pgboss', ALL_QUEUES);
      expect(live['poll-sources']).toBe(0);
    } finally {
      await unlockSession(other, LockSpace.source, Number(held.id));
      other.release();
    }
  });
});
