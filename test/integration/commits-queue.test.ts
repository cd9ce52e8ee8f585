import { sql } from 'kysely';
import type { PgBoss } from 'pg-boss';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { graphqlKey } from '../../src/budget/graphql-key.ts';
import { createBoss } from '../../src/jobs/boss.ts';
import { hintCommits } from '../../src/jobs/commits-hint.ts';
import { handleFetchCommits, type JobContext } from '../../src/jobs/handlers.ts';
import { QUEUES } from '../../src/jobs/queue-names.ts';
import { reconcile } from '../../src/jobs/reconciler.ts';
import { tokenLabel } from '../../src/platform/config/credential-label.ts';
import { captureLogger } from '../recovery/helpers.ts';
import { liveDeps, type TestDeps } from '../recovery/world.ts';
import { chain, insertPushes, insertRepository, pushState } from '../support/commit-world.ts';
import { useTestDatabase } from '../support/db.ts';
import { type FakeGitHub, startFakeGitHub } from '../support/fake-github.ts';

/**
 * The fetch-commits queue (ADR 0071): one hint per stored batch (stately: one queued), the
 * job that drains due pushes, and the reconciler that finds them when a hint was lost.
 */

const t = useTestDatabase();
const log = captureLogger('info');
let fake: FakeGitHub;
let deps: TestDeps;
let boss: PgBoss;
const TOKEN = 'ghp_commitsqueue0000000000';

/** GitHub said this budget key has nothing left this hour (REST's label or its #graphql). */
async function exhaust(credential: string): Promise<void> {
  const values = {
    credential,
    quota: 5000,
    remaining: 0,
    reset_at: new Date(Date.now() + 30 * 60_000),
    observed_at: new Date(),
  };
  await t.db
    .insertInto('github_rate_limits')
    .values(values)
    .onConflict((oc) => oc.column('credential').doUpdateSet(values))
    .execute();
}

beforeAll(async () => {
  fake = await startFakeGitHub();
  deps = liveDeps(t, fake, log.logger, { GITHUB_TOKEN: TOKEN });
  boss = createBoss(t.url, deps.config, log.logger, { supervise: false, max: 2 });
  await boss.start();
});
afterAll(async () => {
  await boss?.stop({ graceful: false });
  await deps?.close();
  await fake?.close();
});
beforeEach(async () => {
  await sql`TRUNCATE pgboss.job, push_events, stored_commits, commit_fetch_turns,
    repositories, actors, github_requests, github_rate_limits`.execute(t.db);
  log.lines.length = 0;
});

async function queued(): Promise<number> {
  const r = await sql<{ n: number }>`
    SELECT count(*)::int AS n FROM pgboss.job WHERE name = ${QUEUES.fetchCommits}
      AND state = 'created'`.execute(t.db);
  return r.rows[0]!.n;
}

describe('fetch-commits hints', () => {
  it('one cycle however many hints arrive, and nothing for no pending push', async () => {
    expect(await hintCommits(boss, log.logger, 0, { cause: 'test' })).toBeNull();
    expect(await queued()).toBe(0);
    expect(await hintCommits(boss, log.logger, 3, { cause: 'run 9', runId: 9 })).toBe('sent');
    expect(await hintCommits(boss, log.logger, 5, { cause: 'run 10' })).toBe('already_queued');
    expect(await queued()).toBe(1);
    expect(log.events('commits.dispatched')).toHaveLength(2);
  });
});

describe('the fetch-commits job', () => {
  it('fetches the due pushes and closes with job.completed', async () => {
    await insertRepository(t.db, 40, 'job/repo');
    const shas = chain(fake, 'job/repo', 3);
    await insertPushes(t.db, [{ repositoryId: 40, before: shas[0]!, head: shas[2]! }]);
    const ctx: JobContext = { deps, boss };
    const r = await handleFetchCommits(ctx, { id: 'job-1' });
    // by GraphQL (COMMITS_TRANSPORT=graphql, the default): one query of 1 point, no REST request
    expect(r).toMatchObject({
      outcome: 'idle',
      processed: 1,
      requests: 0,
      points: 1,
      queries: 1,
      continued: false,
    });
    expect(r.outcomes.complete).toBe(1);
    expect((await pushState(t.db, shas[2]!)).commits_state).toBe('complete');
    const done = log.events('job.completed');
    expect(done).toHaveLength(1);
    expect(done[0]).toMatchObject({ queue: 'fetch-commits', job_id: 'job-1', outcome: 'idle' });
    const fetched = log.events('commits.fetched');
    expect(fetched[0]).toMatchObject({ job_id: 'job-1', state: 'complete', count: 2 });
    // the commit authors became actors: one enrich-actor cycle is hinted for them
    expect(r.new_actors).toBeGreaterThan(0);
    const enrich = await sql<{ n: number }>`
      SELECT count(*)::int AS n FROM pgboss.job WHERE name = 'enrich-actor'`.execute(t.db);
    expect(enrich.rows[0]!.n).toBe(1);
  });

  it('a REST cycle cut short by its cap sends its successor', async () => {
    const rest = liveDeps(t, fake, log.logger, { GITHUB_TOKEN: TOKEN, COMMITS_TRANSPORT: 'rest' });
    try {
      await insertRepository(t.db, 41, 'job/capped');
      const shas = chain(fake, 'job/capped', 4);
      await insertPushes(t.db, [
        { repositoryId: 41, ref: 'refs/heads/a', before: shas[0]!, head: shas[1]! },
        { repositoryId: 41, ref: 'refs/heads/b', before: shas[1]!, head: shas[2]! },
        { repositoryId: 41, ref: 'refs/heads/c', before: shas[2]!, head: shas[3]! },
      ]);
      const ctx: JobContext = {
        deps: rest,
        boss,
        limits: { cycleMaxEntities: 2 },
      };
      const r = await handleFetchCommits(ctx, { id: 'job-2' });
      expect(r).toMatchObject({ outcome: 'cap', processed: 2, continued: true });
      expect(await queued()).toBe(1);
    } finally {
      await rest.close();
    }
  });

  it('a GraphQL cycle is not cut at the cap: its batch takes every due push', async () => {
    // 60 one-commit pushes in 60 repositories, over the job's cap of 50 (a REST cycle's):
    // a GraphQL batch is sized by what is due, the points and the lease, never by the cap.
    for (let r = 0; r < 60; r++) {
      await insertRepository(t.db, 500 + r, `job/gql-${r}`);
      const shas = chain(fake, `job/gql-${r}`, 2);
      await insertPushes(t.db, [{ repositoryId: 500 + r, before: shas[0]!, head: shas[1]! }]);
    }
    const ctx: JobContext = { deps, boss };
    const r = await handleFetchCommits(ctx, { id: 'job-gql' });
    expect(r).toMatchObject({ outcome: 'idle', processed: 60, continued: false });
    expect(r.outcomes).toMatchObject({ complete: 60, retry: 0, failed: 0 });
    expect(await queued()).toBe(0);
  });
});

describe('reconciling commits', () => {
  it('a lost hint loses nothing: due pending pushes and no live job get one cycle', async () => {
    await insertRepository(t.db, 42, 'rec/repo');
    const shas = chain(fake, 'rec/repo', 2);
    expect((await reconcile({ ...deps, boss })).commits).toMatchObject({
      due: false,
      action: 'nothing_due',
    });
    await insertPushes(t.db, [{ repositoryId: 42, before: shas[0]!, head: shas[1]! }]);
    const report = await reconcile({ ...deps, boss, github: deps.github });
    expect(report.commits).toMatchObject({ due: true, action: 'dispatched' });
    expect(await queued()).toBe(1);
    // a second pass sees the queued cycle and sends nothing more
    expect((await reconcile({ ...deps, boss })).commits.action).toBe('live_job');
    expect(await queued()).toBe(1);
  });

  it('a leased push is not due until its lease expires', async () => {
    await insertRepository(t.db, 43, 'rec/leased');
    const shas = chain(fake, 'rec/leased', 2);
    await insertPushes(t.db, [{ repositoryId: 43, before: shas[0]!, head: shas[1]! }]);
    await sql`UPDATE push_events SET commits_claimed_until = now() + interval '1 minute'`.execute(
      t.db,
    );
    expect((await reconcile({ ...deps, boss })).commits.action).toBe('nothing_due');
    await sql`UPDATE push_events SET commits_claimed_until = now() - interval '1 second'`.execute(
      t.db,
    );
    expect((await reconcile({ ...deps, boss })).commits.action).toBe('dispatched');
  });

  it('by GraphQL, REST exhausted does not hold commits back: the cycle is sent and settles the push', async () => {
    expect(deps.config.commits.transport).toBe('graphql');
    expect(deps.github.graphqlEnabled).toBe(true);
    await insertRepository(t.db, 44, 'rec/rest-gone');
    const shas = chain(fake, 'rec/rest-gone', 3);
    await insertPushes(t.db, [{ repositoryId: 44, before: shas[0]!, head: shas[2]! }]);
    await exhaust(tokenLabel(TOKEN));
    const b = await deps.github.budget();
    expect(b.remaining).toBe(0);
    expect(b.graphql?.remaining).toBeNull();
    const report = await reconcile({ ...deps, boss, github: deps.github });
    expect(report.commits).toMatchObject({ due: true, action: 'dispatched' });
    expect(await queued()).toBe(1);
    // and the cycle really does settle it on the GraphQL window, no REST request
    const r = await handleFetchCommits({ deps, boss }, { id: 'job-3' });
    expect(r).toMatchObject({ processed: 1, requests: 0, points: 1 });
    expect((await pushState(t.db, shas[2]!)).commits_state).toBe('complete');
  });

  it('by GraphQL, its window exhausted: no cycle is sent (budget_wait), REST left or not', async () => {
    await insertRepository(t.db, 45, 'rec/points-gone');
    const shas = chain(fake, 'rec/points-gone', 2);
    await insertPushes(t.db, [{ repositoryId: 45, before: shas[0]!, head: shas[1]! }]);
    await exhaust(graphqlKey(tokenLabel(TOKEN)));
    const b = await deps.github.budget();
    expect(b.graphql?.remaining).toBe(0);
    expect(b.remaining).toBeNull(); // REST never heard from: all of it left
    const report = await reconcile({ ...deps, boss, github: deps.github });
    expect(report.commits).toMatchObject({ due: true, action: 'budget_wait', jobId: null });
    expect(await queued()).toBe(0);
    // both exhausted: still none
    await exhaust(tokenLabel(TOKEN));
    expect((await reconcile({ ...deps, boss, github: deps.github })).commits.action).toBe(
      'budget_wait',
    );
  });

  it('by REST (COMMITS_TRANSPORT=rest), REST exhausted holds commits back whatever GraphQL has', async () => {
    const rest = liveDeps(t, fake, log.logger, { GITHUB_TOKEN: TOKEN, COMMITS_TRANSPORT: 'rest' });
    try {
      await insertRepository(t.db, 46, 'rec/rest-only');
      const shas = chain(fake, 'rec/rest-only', 2);
      await insertPushes(t.db, [{ repositoryId: 46, before: shas[0]!, head: shas[1]! }]);
      await exhaust(tokenLabel(TOKEN));
      const report = await reconcile({ ...rest, boss, github: rest.github });
      expect(report.commits.action).toBe('budget_wait');
      expect(await queued()).toBe(0);
    } finally {
      await rest.close();
    }
  });
});
