import { sql } from 'kysely';
import { afterAll, describe, expect, it } from 'vitest';
import { sourceSpec } from '../../src/platform/config/source-spec.ts';
import { addSource } from '../../src/store/sources.ts';
import { useTestDatabase } from '../support/db.ts';
import { pushEvent } from '../support/github-factories.ts';
import { useFakeGitHub } from '../support/use-fake-github.ts';
import { waitFor } from './helpers.ts';
import { type Child, killAll, spawnBin } from './world.ts';

/**
 * A crash loop: five rounds of a bin/worker that dies in the middle of a poll
 * (FAULT_POINT=ingest.after_page_commit: page 1 committed, the run still open, its
 * poll-sources job still `active`), then — once the source's poll interval has passed (the
 * dead poll left it due one interval, the fake's 60 s, after its page commit, ADR 0180; the
 * test moves the clock on by setting it due) — a fresh worker that must resume at once: its start-up sweep fails the dead poll's job
 * (before it polls), and it stores every push the feed served — and is itself SIGKILLed once its
 * run has completed (whatever else it is doing), so the next round starts over a corpse
 * again. Before ADR 0011 the dead job
 * held the stately poll-sources queue until pg-boss's heartbeat expiry (61 s measured; 3.5
 * to 5.5 minutes of no polling in a crash loop).
 *
 * Each round adds 150 pushes to the public feed: two pages, so the fault fires after page
 * 1 and the fresh worker must read page 2 — whose older half it already holds, so the run
 * reaches its horizon and records no gap. Every push served is stored exactly once.
 */

const ROUNDS = 5;
const PER_ROUND = 150;
// Bounds for a loaded machine, not claims: how fast a successor resumes is a printed figure
// (docs/reliability.md). What proves the resume is the order of events: the orphan failed
// by the successor's sweep before its poll, not by pg-boss's heartbeat expiry.
const STORED_WITHIN_MS = 120_000;

const t = useTestDatabase();
const fake = useFakeGitHub();
const children: Child[] = [];

afterAll(async () => {
  await killAll(children);
});

function start(env: Record<string, string>): Child {
  const child = spawnBin('worker', env);
  children.push(child);
  return child;
}

async function stored(): Promise<number> {
  const r = await sql<{ n: number }>`SELECT count(*)::int AS n FROM push_events`.execute(t.db);
  return r.rows[0]!.n;
}

describe('crash loop', () => {
  it(`${ROUNDS} workers killed mid-poll: each successor fails the orphan and resumes at once, every push once, no gap`, {
    timeout: 900_000,
  }, async () => {
    await addSource(t.db, sourceSpec('public'), 'live');
    const env = {
      DATABASE_URL: t.url,
      GITHUB_MODE: 'live',
      GITHUB_API_URL: fake.url,
      // A token's poll allowance (1,667/h): anonymously (20/h) the rounds' ~20 polls used it
      // all, and the last run could fail with BUDGET_EXHAUSTED on its last page.
      GITHUB_TOKEN: 'crash-loop-token',
      TICK_SECONDS: '1',
    };
    const served: string[] = [];
    const rounds: { round: number; resume: number; pollStarted: number }[] = [];
    for (let round = 1; round <= ROUNDS; round++) {
      const events = Array.from({ length: PER_ROUND }, (_, i) =>
        pushEvent({
          id: 90_000_000_000 + round * 1000 + i,
          actor: { id: 9_000 + (i % 7), login: `looper-${i % 7}` },
          repo: { id: 9_100 + (i % 5), name: `loop/repo-${i % 5}` },
        }),
      );
      fake.addEvents('public', events);
      served.push(...events.map((e) => e.id));
      // Due now (a completed poll scheduled the next one a minute away).
      await sql`UPDATE event_sources SET next_poll_at = now()`.execute(t.db);

      const dying = start({ ...env, FAULT_POINT: 'ingest.after_page_commit' });
      const death = await Promise.race([
        dying.exited,
        new Promise<'timeout'>((r) => setTimeout(() => r('timeout'), 90_000)),
      ]);
      expect(death, `round ${round}: the worker never reached its fault point`).toEqual({
        code: null,
        signal: 'SIGKILL',
      });
      const orphaned = await sql<{ id: string }>`
        SELECT id::text FROM pgboss.job
        WHERE name = 'poll-sources' AND state = 'active'`.execute(t.db);
      expect(orphaned.rows, `round ${round}: the dead poll is left active`).toHaveLength(1);
      const orphan = orphaned.rows[0]!.id;
      // The dead poll committed page 1: its source is due one poll interval (the fake's 60 s)
      // after that commit, no later (ADR 0180). The interval passes.
      const next = await sql<{ at: Date }>`SELECT next_poll_at AS at FROM event_sources`.execute(
        t.db,
      );
      expect(next.rows[0]!.at.getTime(), `round ${round}: its interval on`).toBeGreaterThan(
        Date.now() + 30_000,
      );
      expect(next.rows[0]!.at.getTime(), `round ${round}: no later`).toBeLessThanOrEqual(
        Date.now() + 60_000,
      );
      await sql`UPDATE event_sources SET next_poll_at = now()`.execute(t.db);

      const spawned = Date.now();
      const fresh = start(env);
      await waitFor(async () => (await stored()) === served.length, {
        timeoutMs: STORED_WITHIN_MS,
        what: `round ${round}: every served push stored`,
      });
      const resume = (Date.now() - spawned) / 1000;
      const pollLine = await fresh.waitForLine(
        (l) => l.event === 'ingestion.run_started',
        'the fresh worker to poll',
      );
      rounds.push({
        round,
        resume,
        pollStarted: (Date.parse(String(pollLine.time)) - spawned) / 1000,
      });
      // The successor's own sweep failed the dead poll, before it polled (not pg-boss's
      // heartbeat expiry, which took 61 s before ADR 0011).
      const swept = await fresh.waitForLine(
        (l) => l.event === 'reconcile.job_orphaned' && l.orphan_job_id === orphan,
        `round ${round}: the successor to fail the orphan`,
      );
      expect(
        Date.parse(String(swept.time)),
        `round ${round}: swept before polling`,
      ).toBeLessThanOrEqual(Date.parse(String(pollLine.time)));
      const dead = await sql<{ state: string; message: string | null }>`
        SELECT state::text, output->>'message' AS message FROM pgboss.job WHERE id = ${orphan}`.execute(
        t.db,
      );
      expect(dead.rows[0]).toEqual({
        state: 'failed',
        message: expect.stringMatching(/^orphaned: /),
      });
      // The loop: the successor dies too, once its run has completed. (Killed between its
      // last page and its finalize, it would leave the source's horizon where it was, and
      // the next run would rightly record a gap it cannot rule out — ADR 0004.)
      await fresh.waitForLine(
        (l) => l.event === 'ingestion.run_completed',
        `round ${round}: the fresh worker's run to complete`,
      );
      fresh.process.kill('SIGKILL');
      await fresh.exited;
    }

    const ids = await sql<{ id: string }>`SELECT id::text FROM push_events ORDER BY id`.execute(
      t.db,
    );
    expect(ids.rows.map((r) => r.id)).toEqual([...served].sort());
    const gaps = await sql<{ n: number }>`
      SELECT count(*)::int AS n FROM ingestion_runs WHERE gap_detected`.execute(t.db);
    expect(gaps.rows[0]!.n).toBe(0);
    // A last worker, stopped gracefully, closes what the last killed successor left open.
    const last = start(env);
    // Its signal handler is in place once it has started; a SIGTERM before that is a kill.
    await last.waitForLine((l) => l.event === 'worker.started', 'the last worker to start');
    await waitFor(
      async () => {
        const r = await sql<{ n: number }>`
          SELECT count(*)::int AS n FROM ingestion_runs WHERE status = 'running'`.execute(t.db);
        return r.rows[0]!.n === 0;
      },
      { timeoutMs: 60_000, what: 'no run left running' },
    );
    last.process.kill('SIGTERM');
    expect(await last.exited).toEqual({ code: 0, signal: null });
    const runs = await sql<{ status: string; n: number }>`
      SELECT status, count(*)::int AS n FROM ingestion_runs GROUP BY 1`.execute(t.db);
    const byStatus = Object.fromEntries(runs.rows.map((r) => [r.status, r.n]));
    // Every dying worker's run was closed as interrupted by its successor (a successor killed
    // before it finalized adds one more); none failed, none is left running.
    expect(byStatus.interrupted).toBeGreaterThanOrEqual(ROUNDS);
    const failedRuns = await sql<{ id: string; error: string }>`
      SELECT id::text, error FROM ingestion_runs WHERE status = 'failed'`.execute(t.db);
    expect(failedRuns.rows, 'no run failed').toEqual([]);
    expect(byStatus.running).toBeUndefined();
    console.log(
      `\nCrash loop: ${ROUNDS} rounds, ${served.length} pushes served, ${ids.rows.length} stored once, 0 gaps\n| round | successor polling (s after spawn) | every push stored (s after spawn) |\n|---|---|---|\n${rounds
        .map((r) => `| ${r.round} | ${r.pollStarted.toFixed(1)} | ${r.resume.toFixed(1)} |`)
        .join('\n')}\nworst: ${Math.max(...rounds.map((r) => r.resume)).toFixed(1)} s\n`,
    );
  });
});
