import { sql } from 'kysely';
import { beforeAll, describe, expect, it } from 'vitest';
import { spawnBin } from '../recovery/world.ts';
import { useTestDatabase } from '../support/db.ts';

const t = useTestDatabase();

async function runReconcile(): Promise<string[]> {
  const child = spawnBin('reconcile', { DATABASE_URL: t.url, GITHUB_MODE: 'fixture' });
  const exit = await child.exited;
  expect(exit, child.stderr.join('')).toEqual({ code: 0, signal: null });
  // Its report is stdout; its logs (stderr) never mix into it.
  return child.stdout.join('').trimEnd().split('\n');
}

beforeAll(async () => {
  await t.db
    .insertInto('actors')
    .values([
      { id: 95_001, login: 'due-1' },
      { id: 95_002, login: 'due-2' },
    ])
    .execute();
  await t.db
    .insertInto('repositories')
    .values({
      id: 96_001,
      full_name: 'done/repo',
      enrichment_state: 'enriched',
      enriched_at: new Date(),
    })
    .execute();
});

describe('bin/reconcile', () => {
  it('prints what it found and what it did, and is a no-op the second time', async () => {
    expect(await runReconcile()).toEqual([
      'jobs: none left active by a dead worker',
      'ingestion runs: none left running by a dead process',
      'reservations: 0 abandoned reservation(s) settled',
      expect.stringMatching(/^actor: 2 due, 0 live job\(s\) → cycle sent \(job [0-9a-f-]{36}\)$/),
      'repository: 0 due, 0 live job(s) → nothing to do',
      'commits: none due, 0 live job(s) → nothing to do',
    ]);
    const jobs = await sql<{ name: string }>`SELECT name FROM pgboss.job`.execute(t.db);
    expect(jobs.rows).toEqual([{ name: 'enrich-actor' }]);

    expect((await runReconcile())[3]).toBe(
      'actor: 2 due, 1 live job(s) → a cycle is queued or running; nothing sent',
    );
    expect(
      (await sql<{ n: number }>`SELECT count(*)::int AS n FROM pgboss.job`.execute(t.db)).rows[0]!
        .n,
    ).toBe(1);
  });
});
