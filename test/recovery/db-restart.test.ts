import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDb, createPool, type Db } from '../../src/platform/db/pool.ts';
import { type FakeGitHub, startFakeGitHub } from '../support/fake-github.ts';
import { startThrowawayPostgres, type ThrowawayPostgres } from '../support/throwaway-postgres.ts';
import { waitFor } from './helpers.ts';
import { type Child, killAll, seedPushes, spawnBin } from './world.ts';

/**
 * Database restart mid-run: a Postgres server of the test's own (bin/setup run
 * against it), a real bin/worker and bin/web, and the server stopped (every connection cut)
 * and started again while they run. The worker must survive (same process, started once:
 * no crash loop), reconnect and resume: pushes that arrived during the outage are stored
 * once and enriched. /readyz answers 503 during the outage and 200 after it.
 */

const DATABASE = 'gpi_restart';
let server: ThrowawayPostgres;
let fake: FakeGitHub;
const children: Child[] = [];
let db: Db;

beforeAll(async () => {
  server = await startThrowawayPostgres(DATABASE);
  fake = await startFakeGitHub();
  // Poll the public feed every couple of seconds (X-Poll-Interval 1, token budget).
  fake.setPollInterval('public', 1);
  // The app's own pool factory: its idle connections die with the server too, and it
  // listens for that (a bare pg.Pool would throw the error at the test process).
  db = createDb(createPool(server.url, { max: 2, applicationName: 'test-restart' }));
}, 120_000);

afterAll(async () => {
  await killAll(children);
  await db?.destroy();
  await fake?.close();
  await server?.destroy();
}, 180_000);

async function settled(expected: { events: number; entities: number }): Promise<boolean> {
  try {
    const r = await sql<{ events: number; enriched: number }>`
      SELECT (SELECT count(*)::int FROM push_events) AS events,
        (SELECT count(*)::int FROM (
          SELECT enrichment_state FROM actors UNION ALL SELECT enrichment_state FROM repositories) e
         WHERE enrichment_state = 'enriched') AS enriched`.execute(db);
    return r.rows[0]!.events === expected.events && r.rows[0]!.enriched === expected.entities;
  } catch {
    return false; // the test's own pool meets the outage too
  }
}

async function readyz(url: string): Promise<number> {
  return (await fetch(`${url}/readyz`)).status;
}

describe('database restart mid-run', () => {
  it('the worker survives, reconnects and resumes; /readyz goes 503 then 200', {
    timeout: 120_000,
  }, async () => {
    const env = {
      DATABASE_URL: server.url,
      GITHUB_MODE: 'live',
      GITHUB_API_URL: fake.url,
      GITHUB_TOKEN: 'db-restart-token',
      TICK_SECONDS: '1',
      SOURCES: 'public',
      HTTP_PORT: '0',
      ENRICH_LEASE_SECONDS: '2',
    };
    const setup = spawnBin('setup', env);
    expect((await setup.exited).code, setup.stderr.join('')).toBe(0);

    const before = seedPushes(fake, 3, 3000);
    const worker = spawnBin('worker', env);
    const web = spawnBin('web', env);
    children.push(worker, web);
    const url = String(
      (await web.waitForLine((l) => l.event === 'web.listening', 'the web to listen')).url,
    );
    await waitFor(() => settled({ events: 3, entities: 6 }), {
      timeoutMs: 30_000,
      what: 'the first pushes stored and enriched',
    });
    expect(await readyz(url)).toBe(200);

    // Outage: every connection cut, nothing answers on the port.
    await server.stop();
    await waitFor(async () => (await readyz(url)) === 503, {
      timeoutMs: 60_000,
      what: '/readyz to report the outage',
    });
    const during = seedPushes(fake, 3, 3100);
    // Let the worker meet the outage on a few ticks of its own.
    const errorsAtStop = worker.lines.filter(
      (l) => l.level === 'error' || l.level === 'fatal',
    ).length;
    await waitFor(
      () =>
        worker.lines.filter((l) => l.level === 'error' || l.level === 'fatal').length >=
        errorsAtStop + 2,
      { timeoutMs: 60_000, what: 'the worker to notice the outage' },
    );
    expect(worker.process.exitCode, worker.stderr.join('')).toBeNull();
    expect(web.process.exitCode, web.stderr.join('')).toBeNull();

    await server.start();
    await waitFor(async () => (await readyz(url)) === 200, {
      timeoutMs: 30_000,
      what: '/readyz to recover',
    });
    await waitFor(() => settled({ events: 6, entities: 12 }), {
      timeoutMs: 60_000,
      what: 'the pushes from the outage stored and enriched',
    });

    // Same process throughout, started once: it reconnected rather than crash-looping.
    expect(worker.process.exitCode).toBeNull();
    expect(worker.lines.filter((l) => l.event === 'worker.started')).toHaveLength(1);
    const ids = await sql<{ id: string }>`SELECT id::text FROM push_events ORDER BY id`.execute(db);
    expect(ids.rows.map((r) => r.id)).toEqual([...before.eventIds, ...during.eventIds].sort());
    const running = await sql<{ n: number }>`
      SELECT count(*)::int AS n FROM ingestion_runs WHERE status = 'running'`.execute(db);
    expect(running.rows[0]!.n).toBe(0);

    worker.process.kill('SIGTERM');
    web.process.kill('SIGTERM');
    expect(await worker.exited).toEqual({ code: 0, signal: null });
    expect(await web.exited).toEqual({ code: 0, signal: null });
    console.log(
      `db restart: worker logged ${worker.lines.filter((l) => l.level === 'error' || l.level === 'fatal').length} error lines across the outage, ` +
        `web ${web.lines.filter((l) => l.level === 'error' || l.level === 'fatal').length}; one worker.started`,
    );
  });
});
