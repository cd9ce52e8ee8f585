import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useTestDatabase } from '../support/db.ts';
import { type FakeGitHub, startFakeGitHub } from '../support/fake-github.ts';
import { waitFor } from './helpers.ts';
import { addPublicSource, type Child, killAll, seedPushes, spawnBin, type World } from './world.ts';

/**
 * Process crash: a real bin/worker, SIGKILLed mid-enrichment (no handler, no finally),
 * then the pg-boss job table truncated — every hint, every tick and the killed worker's
 * active job are gone. A fresh worker must finish the work from the tables alone: every
 * pushed event stored exactly once, every entity enriched (or gone).
 */

const t = useTestDatabase();
let fake: FakeGitHub;
let world: World;
const children: Child[] = [];

function workerEnv(): Record<string, string> {
  return {
    DATABASE_URL: t.url,
    GITHUB_MODE: 'live',
    GITHUB_API_URL: fake.url,
    TICK_SECONDS: '1',
    // The killed worker's claim must not hold its entity for a minute.
    ENRICH_LEASE_SECONDS: '2',
  };
}

async function entityStates(): Promise<Record<string, number>> {
  const r = await sql<{ state: string; n: number }>`
    SELECT enrichment_state AS state, count(*)::int AS n FROM (
      SELECT enrichment_state FROM actors UNION ALL SELECT enrichment_state FROM repositories) e
    GROUP BY 1`.execute(t.db);
  return Object.fromEntries(r.rows.map((x) => [x.state, x.n]));
}

beforeAll(async () => {
  fake = await startFakeGitHub();
  world = seedPushes(fake, 6, 200);
  // Slow profiles, so the kill lands while enrichment is under way.
  fake.fail({
    path: /^\/(users\/|repos\/[^/]+\/[^/]+$)/,
    delayMs: 300,
    times: Number.POSITIVE_INFINITY,
  });
  await addPublicSource(t);
});

afterAll(async () => {
  await killAll(children);
  await fake?.close();
});

describe('process crash', () => {
  it('a worker killed mid-enrichment loses no work once the queue is wiped', async () => {
    const first = spawnBin('worker', workerEnv());
    children.push(first);
    await first.waitForLine((l) => l.event === 'worker.started', 'the first worker to start');
    const entities = world.actorIds.length + world.repositoryIds.length;
    await waitFor(
      async () => {
        const s = await entityStates();
        return (s.enriched ?? 0) >= 1 && (s.pending ?? 0) >= 1;
      },
      { timeoutMs: 30_000, intervalMs: 25, what: 'enrichment to be under way' },
    );
    first.process.kill('SIGKILL');
    expect(await first.exited).toEqual({ code: null, signal: 'SIGKILL' });
    expect(
      first.lines.filter((l) => l.event === 'job.completed' && l.queue === 'poll-sources').length,
    ).toBeGreaterThan(0);

    await sql`TRUNCATE pgboss.job`.execute(t.db);

    const second = spawnBin('worker', workerEnv());
    children.push(second);
    await second.waitForLine(
      (l) => l.event === 'reconcile.dispatched',
      'the restarted worker to reconcile',
    );
    await waitFor(
      async () => {
        const s = await entityStates();
        return (s.enriched ?? 0) + (s.gone ?? 0) === entities && !s.pending;
      },
      { timeoutMs: 45_000, what: 'every entity to end enriched or gone' },
    );
    expect(await entityStates()).toEqual({ enriched: entities });

    const events = await sql<{
      id: string;
    }>`SELECT id::text AS id FROM push_events ORDER BY id`.execute(t.db);
    expect(events.rows.map((r) => r.id)).toEqual([...world.eventIds].sort());

    // Every job line of the second worker carries its job id and queue.
    const jobLines = second.lines.filter(
      (l) => l.event === 'job.completed' || l.event === 'enrichment.completed',
    );
    expect(jobLines.length).toBeGreaterThan(0);
    for (const l of jobLines)
      expect(l, JSON.stringify(l)).toMatchObject({
        job_id: expect.any(String),
        queue: expect.any(String),
      });

    second.process.kill('SIGTERM');
    expect(await second.exited).toEqual({ code: 0, signal: null });
  });
});
