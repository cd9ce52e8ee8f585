import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { routeTemplate, spacingMs } from '../../src/github/pacing.ts';
import { GITHUB_API_VERSION } from '../../src/github/transport.ts';
import { tokenLabel } from '../../src/platform/config/credential-label.ts';
import { int4Key, LockSpace, tryLockSession } from '../../src/platform/db/locks.ts';
import { useTestDatabase } from '../support/db.ts';
import { type FakeGitHub, startFakeGitHub } from '../support/fake-github.ts';
import { waitFor } from './helpers.ts';
import { type Child, killAll, spawnBin } from './world.ts';

/**
 * ADR 0140: Several processes on the same credentials share GitHub's
 * limits, because the gates and the pacing rows are in Postgres — each process polls as wide
 * as its own plan, and the limits still bind across them. A worker (bin/worker) and a second
 * process polling the same due sources at the same moment (bin/ingest, the same poll path and
 * plan; a second worker could not: pg-boss runs one poll-sources job at a time fleet-wide),
 * on the same four tokens, against a fake that answers in 5 ms, 403s two requests of one
 * credential in flight at once and counts 900 a minute per endpoint.
 *
 * Both are made to overlap by a signal, not by timing: this test holds every credential's
 * gate until both processes have runs open, then lets them go together.
 */

const t = useTestDatabase();
const TOKENS = Array.from({ length: 4 }, (_, i) => `ghp_shared_limits_${i}_not_a_secret`);
const SOURCES = 160;
const RATE = 900;
let fake: FakeGitHub;
const children: Child[] = [];

beforeAll(async () => {
  fake = await startFakeGitHub({ latencyMs: 5, endpointRatePerMinute: RATE, tokenLimit: 5_000 });
});

afterAll(async () => {
  await killAll(children);
  await fake?.close();
});

const env = () => ({
  DATABASE_URL: t.url,
  GITHUB_API_URL: fake.url,
  GITHUB_TOKENS: TOKENS.join(','),
  // Held gates make the first polls wait for this test, not for a timeout.
  GATE_WAIT_SECONDS: '600',
  // One round, the worker's start poll: no tick's second one.
  TICK_SECONDS: '3600',
  LOG_LEVEL: 'info',
});

async function runsByWorker(): Promise<Map<string, number>> {
  const r = await sql<{ worker: string; n: string }>`
    SELECT worker, count(*) AS n FROM ingestion_runs GROUP BY worker`.execute(t.db);
  return new Map(r.rows.map((row) => [row.worker, Number(row.n)]));
}

describe('two processes on the same credentials', () => {
  it('poll the same due sources at once, each source once, within one shared pace and gate per credential', {
    timeout: 600_000,
  }, async () => {
    // The fake's ETag of an empty feed: every source holds it, so every answer is a 304.
    const probe = await fetch(`${fake.url}/repos/shared/probe/events?per_page=100&page=1`, {
      headers: { authorization: `token ${TOKENS[0]}`, 'x-github-api-version': GITHUB_API_VERSION },
    });
    await probe.arrayBuffer();
    const etag = probe.headers.get('etag');
    fake.reset();
    await sql`
      INSERT INTO event_sources (kind, target, mode, commits_enabled, etag, next_poll_at)
      SELECT 'repo', 'shared/repo-' || g, 'live', false, ${etag}, now() - interval '1 minute'
      FROM generate_series(1, ${SOURCES}::int) g`.execute(t.db);

    // Every credential's gate, held by this test: no process sends until both are in.
    const holder = await t.newPool(1).connect();
    let released = false;
    try {
      for (const token of TOKENS) {
        expect(await tryLockSession(holder, LockSpace.gate, int4Key(tokenLabel(token)))).toBe(true);
      }
      const worker = spawnBin('worker', env());
      children.push(worker);
      await waitFor(async () => (await runsByWorker()).size >= 1, {
        timeoutMs: 120_000,
        what: "the worker's first runs",
      });
      const ingest = spawnBin('ingest', env());
      children.push(ingest);
      const both = await waitFor(
        async () => {
          const m = await runsByWorker();
          return m.size >= 2 ? m : null;
        },
        { timeoutMs: 120_000, what: 'runs of both processes' },
      );
      expect(fake.requests).toEqual([]);
      expect(both.size).toBe(2);
      holder.release(true); // the session ends, and every gate with it
      released = true;

      const exit = await ingest.exited;
      expect(exit.code, ingest.stderr.join('')).toBe(0);
      await waitFor(
        async () => {
          const r = await sql<{ n: string }>`
            SELECT count(*) AS n FROM ingestion_runs WHERE finished_at IS NOT NULL`.execute(t.db);
          return Number(r.rows[0]!.n) >= SOURCES;
        },
        { timeoutMs: 300_000, what: "the worker's round" },
      );
      worker.process.kill('SIGTERM');
      expect((await worker.exited).code).toBe(0);
    } finally {
      if (!released) holder.release(true);
    }

    // Each source polled once, by one process or the other; both polled.
    const runs = await sql<{ source_id: string; worker: string; status: string }>`
      SELECT source_id, worker, status FROM ingestion_runs`.execute(t.db);
    expect(runs.rows).toHaveLength(SOURCES);
    expect(new Set(runs.rows.map((r) => r.source_id)).size).toBe(SOURCES);
    expect(new Set(runs.rows.map((r) => r.status))).toEqual(new Set(['not_modified']));
    const byWorker = await runsByWorker();
    expect(byWorker.size).toBe(2);
    for (const n of byWorker.values()) expect(n).toBeGreaterThan(0);

    // GitHub's side: never two requests of one credential in flight, no 403 of any kind.
    expect(fake.requests).toHaveLength(SOURCES);
    expect(fake.secondaryLimitHits).toBe(0);
    for (const n of Object.values(fake.maxInFlightByCredential)) expect(n).toBe(1);

    // The ledger's side: both processes' requests, one credential and endpoint at a time,
    // never closer than one spacing (60 s / 900) — the slots came from one row in Postgres.
    const sent = await sql<{ credential: string; path: string; sent_at: Date; worker: string }>`
      SELECT q.credential, q.path, q.sent_at, r.worker FROM github_requests q
      JOIN ingestion_runs r ON r.id = q.run_id
      WHERE q.sent_at IS NOT NULL ORDER BY q.credential, q.sent_at`.execute(t.db);
    expect(sent.rows).toHaveLength(SOURCES);
    const spacing = spacingMs(RATE);
    let crossings = 0;
    for (let i = 1; i < sent.rows.length; i++) {
      const [a, b] = [sent.rows[i - 1]!, sent.rows[i]!];
      if (a.credential !== b.credential) continue;
      expect(routeTemplate(b.path)).toBe(routeTemplate(a.path));
      // Microseconds are lost in a timestamp's trip through JavaScript: a millisecond of slack.
      expect(b.sent_at.getTime() - a.sent_at.getTime()).toBeGreaterThanOrEqual(spacing - 1);
      if (a.worker !== b.worker) crossings++;
    }
    // The two processes took turns on the same credentials' slots, not each its own.
    expect(crossings).toBeGreaterThan(0);
  });
});
