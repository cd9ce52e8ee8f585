import { sql } from 'kysely';
import type { PgBoss } from 'pg-boss';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createBoss } from '../../src/jobs/boss.ts';
import { handleEnrichCycle, type JobContext } from '../../src/jobs/handlers.ts';
import { useTestDatabase } from '../support/db.ts';
import { type FakeGitHub, startFakeGitHub } from '../support/fake-github.ts';
import { repoProfile, userProfile } from '../support/github-factories.ts';
import { captureLogger } from './helpers.ts';
import { liveDeps, type TestDeps } from './world.ts';

/**
 * Duplicate delivery: pg-boss is at-least-once, so the same cycle job may run twice (a
 * worker that finished the work but died before completing the job, an expiry). The
 * second run must change nothing, spend nothing, and say so.
 */

const t = useTestDatabase();
let fake: FakeGitHub;
let deps: TestDeps;
let boss: PgBoss;
const log = captureLogger();

const ACTOR = { id: 91_001, login: 'twice' };
const REPO = { id: 92_001, full_name: 'twice/delivered' };

async function rowText(table: 'actors' | 'repositories', id: number): Promise<string> {
  const r = await sql<{
    row: string;
  }>`SELECT t::text AS row FROM ${sql.table(table)} t WHERE id = ${id}`.execute(t.db);
  return r.rows[0]!.row;
}

async function ledgerRows(): Promise<number> {
  const r = await sql<{ n: number }>`SELECT count(*)::int AS n FROM github_requests`.execute(t.db);
  return r.rows[0]!.n;
}

beforeAll(async () => {
  fake = await startFakeGitHub();
  fake.setUser(userProfile(ACTOR));
  fake.setRepo(repoProfile(REPO));
  deps = liveDeps(t, fake, log.logger);
  boss = createBoss(t.url, deps.config, log.logger, { supervise: false, max: 1 });
  await boss.start();
  await t.db.insertInto('actors').values({ id: ACTOR.id, login: ACTOR.login }).execute();
  await t.db
    .insertInto('repositories')
    .values({ id: REPO.id, full_name: REPO.full_name })
    .execute();
});

afterAll(async () => {
  await boss?.stop({ graceful: false });
  await deps?.close();
  await fake?.close();
});

describe('duplicate delivery', () => {
  const ctx = (): JobContext => ({ deps, boss });

  it.each([
    ['actor', 'actors', ACTOR.id, `/users/${ACTOR.login}`],
    ['repository', 'repositories', REPO.id, `/repos/${REPO.full_name}`],
  ] as const)(
    'a %s cycle delivered twice leaves the state of one delivery',
    async (cls, table, id, profilePath) => {
      const job = { id: `dup-${cls}`, data: { class: cls, reason: 'hint' } };

      const first = await handleEnrichCycle(ctx(), cls, job);
      expect(first).toMatchObject({ outcome: 'idle', processed: 1 });
      expect(first.outcomes.enriched).toBe(1);
      const once = await rowText(table, id);
      const requestsOnce = fake.requests.filter((r) => r.path === profilePath).length;
      const ledgerOnce = await ledgerRows();
      expect(requestsOnce).toBe(1);

      const second = await handleEnrichCycle(ctx(), cls, job);
      expect(second).toMatchObject({ outcome: 'idle', processed: 0, continued: false });
      expect(await rowText(table, id)).toBe(once);
      expect(fake.requests.filter((r) => r.path === profilePath)).toHaveLength(1);
      expect(await ledgerRows()).toBe(ledgerOnce);

      const completions = log
        .events('job.completed')
        .filter((l) => l.job_id === job.id && l.queue === `enrich-${cls}`);
      expect(completions.map((l) => [l.outcome, l.processed])).toEqual([
        ['idle', 1],
        ['idle', 0],
      ]);
    },
  );

  it('spent one reservation per entity in all', async () => {
    const r = await sql<{ purpose: string; n: number }>`
      SELECT purpose, count(*)::int AS n FROM github_requests GROUP BY 1`.execute(t.db);
    expect(r.rows).toEqual([{ purpose: 'enrich', n: 2 }]);
  });
});
