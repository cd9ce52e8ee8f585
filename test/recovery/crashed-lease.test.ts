import { sql } from 'kysely';
import type { PgBoss } from 'pg-boss';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createBoss } from '../../src/jobs/boss.ts';
import { handleEnrichCycle, type JobContext } from '../../src/jobs/handlers.ts';
import { useTestDatabase } from '../support/db.ts';
import { type FakeGitHub, startFakeGitHub } from '../support/fake-github.ts';
import { userProfile } from '../support/github-factories.ts';
import { captureLogger, waitFor } from './helpers.ts';
import { liveDeps, spawnBin, type TestDeps } from './world.ts';

/**
 * Crashed worker's lease: a process claims an entity and dies right there (SIGKILL at the
 * enrich.after_claim fault point — no finally block runs). The claim has no worker behind
 * it. Until the lease expires a cycle finds nothing to do and sends nothing; after, the
 * entity is enriched. No cleanup code is involved: the lease simply runs out.
 */

const t = useTestDatabase();
let fake: FakeGitHub;
let deps: TestDeps;
let boss: PgBoss;
const log = captureLogger();
const ACTOR = { id: 93_001, login: 'orphaned' };
const LEASE_SECONDS = 3;

beforeAll(async () => {
  fake = await startFakeGitHub();
  fake.setUser(userProfile(ACTOR));
  deps = liveDeps(t, fake, log.logger);
  boss = createBoss(t.url, deps.config, log.logger, { supervise: false, max: 1 });
  await boss.start();
  await t.db.insertInto('actors').values({ id: ACTOR.id, login: ACTOR.login }).execute();
});

afterAll(async () => {
  await boss?.stop({ graceful: false });
  await deps?.close();
  await fake?.close();
});

describe("crashed worker's lease", () => {
  it('is idle until the lease expires, then enriched, with no cleanup', async () => {
    const crashed = spawnBin(
      'enrich',
      {
        DATABASE_URL: t.url,
        GITHUB_MODE: 'live',
        GITHUB_API_URL: fake.url,
        ENRICH_LEASE_SECONDS: String(LEASE_SECONDS),
        FAULT_POINT: 'enrich.after_claim',
      },
      ['--limit', '1', '--class', 'actor'],
    );
    expect(await crashed.exited).toEqual({ code: null, signal: 'SIGKILL' });

    const lease = await t.db
      .selectFrom('actors')
      .select(['enrichment_state', 'claimed_by', 'claimed_until'])
      .where('id', '=', String(ACTOR.id))
      .executeTakeFirstOrThrow();
    expect(lease.enrichment_state).toBe('pending');
    expect(lease.claimed_by).toMatch(/:\d+$/);
    expect(lease.claimed_until!.getTime()).toBeGreaterThan(Date.now());
    expect(fake.requests).toHaveLength(0);

    const ctx: JobContext = { deps, boss };
    const whileLeased = await handleEnrichCycle(ctx, 'actor', { id: 'during-lease' });
    expect(whileLeased).toMatchObject({ outcome: 'idle', processed: 0 });
    expect(fake.requests).toHaveLength(0);

    // Wait for the database clock, not ours, to pass the lease.
    await waitFor(
      async () => {
        const r = await sql<{ expired: boolean }>`
          SELECT claimed_until <= now() AS expired FROM actors WHERE id = ${ACTOR.id}`.execute(
          t.db,
        );
        return r.rows[0]!.expired;
      },
      { timeoutMs: (LEASE_SECONDS + 5) * 1000, what: 'the lease to expire' },
    );
    const after = await handleEnrichCycle(ctx, 'actor', { id: 'after-lease' });
    expect(after).toMatchObject({ outcome: 'idle', processed: 1 });
    expect(after.outcomes.enriched).toBe(1);
    const row = await t.db
      .selectFrom('actors')
      .select(['enrichment_state', 'name'])
      .where('id', '=', String(ACTOR.id))
      .executeTakeFirstOrThrow();
    expect(row).toEqual({ enrichment_state: 'enriched', name: `User ${ACTOR.id}` });
    expect(fake.requests.map((r) => r.path)).toEqual([`/users/${ACTOR.login}`]);
  });
});
