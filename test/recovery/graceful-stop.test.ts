import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { shutdownTimeoutMs } from '../../src/jobs/worker-service.ts';
import { loadConfig } from '../../src/platform/config/config.ts';
import { useTestDatabase } from '../support/db.ts';
import { type FakeGitHub, startFakeGitHub } from '../support/fake-github.ts';
import { waitFor } from './helpers.ts';
import { addPublicSource, type Child, seedPushes, spawnBin } from './world.ts';

/**
 * Graceful stop: SIGTERM while a cycle has a profile request in flight. The worker stops
 * taking jobs, lets the cycle finish the entity in hand (and no more), closes its pools
 * and exits 0 within the shutdown timeout — leaving no entity under a lease nobody will
 * ever finish, no attempt open, and no job active.
 */

const t = useTestDatabase();
let fake: FakeGitHub;
let worker: Child | undefined;
const PROFILE_DELAY_MS = 1500;

beforeAll(async () => {
  fake = await startFakeGitHub();
  seedPushes(fake, 3, 300);
  fake.fail({
    path: /^\/(users\/|repos\/[^/]+\/[^/]+$)/,
    delayMs: PROFILE_DELAY_MS,
    times: Number.POSITIVE_INFINITY,
  });
  await addPublicSource(t);
});

afterAll(async () => {
  if (worker && worker.process.exitCode === null && worker.process.signalCode === null)
    worker.process.kill('SIGKILL');
  await worker?.exited;
  await fake?.close();
});

describe('graceful stop', () => {
  it('SIGTERM during a cycle finishes the entity in hand, then exits 0', async () => {
    worker = spawnBin('worker', {
      DATABASE_URL: t.url,
      GITHUB_MODE: 'live',
      GITHUB_API_URL: fake.url,
      TICK_SECONDS: '1',
    });
    await waitFor(
      () => fake.requests.some((r) => r.status === null && /^\/(users|repos)\//.test(r.path)),
      { timeoutMs: 30_000, intervalMs: 20, what: 'a profile request in flight' },
    );
    const stoppedAt = Date.now();
    worker.process.kill('SIGTERM');
    const exit = await worker.exited;
    const tookMs = Date.now() - stoppedAt;

    expect(exit, worker.stderr.join('')).toEqual({ code: 0, signal: null });
    expect(tookMs).toBeLessThan(shutdownTimeoutMs(loadConfig({})));
    const events = worker.lines.map((l) => l.event);
    expect(events).toContain('worker.stopping');
    expect(events.at(-1)).toBe('worker.stopped');

    // The entity in hand was finished; the cycle stopped before the next one.
    const stopped = worker.lines.filter(
      (l) =>
        l.event === 'job.completed' &&
        String(l.queue).startsWith('enrich-') &&
        l.outcome === 'stopped',
    );
    expect(stopped.length).toBeGreaterThanOrEqual(1);
    const leased = await sql<{ n: number }>`
      SELECT (SELECT count(*) FROM actors WHERE claimed_until > now())
           + (SELECT count(*) FROM repositories WHERE claimed_until > now()) AS n`.execute(t.db);
    expect(Number(leased.rows[0]!.n)).toBe(0);
    const open = await sql<{ n: number }>`
      SELECT count(*)::int AS n FROM enrichment_attempts WHERE finished_at IS NULL`.execute(t.db);
    expect(open.rows[0]!.n).toBe(0);
    const active = await sql<{ n: number }>`
      SELECT count(*)::int AS n FROM pgboss.job WHERE state = 'active'`.execute(t.db);
    expect(active.rows[0]!.n).toBe(0);
    const enriched = await sql<{ n: number }>`
      SELECT (SELECT count(*) FROM actors WHERE enrichment_state = 'enriched')
           + (SELECT count(*) FROM repositories WHERE enrichment_state = 'enriched') AS n`.execute(
      t.db,
    );
    expect(Number(enriched.rows[0]!.n)).toBeGreaterThanOrEqual(1);
  });
});
