import { type RawBuilder, sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sourceSpec } from '../../src/platform/config/source-spec.ts';
import type { Db } from '../../src/platform/db/pool.ts';
import { FAULT_POINTS, type FaultPointName } from '../../src/platform/fault.ts';
import { addSource } from '../../src/store/sources.ts';
import { type FakeGitHub, startFakeGitHub } from '../support/fake-github.ts';
import { pushEvent, repoProfile, userProfile } from '../support/github-factories.ts';
import { createScratchDatabase, type ScratchDatabase } from '../support/scratch-db.ts';
import { waitFor } from './helpers.ts';
import { type Child, killAll, spawnBin } from './world.ts';

/**
 * A poll killed at every one of its fault points resumes within the feed's poll interval.
 *
 * The source is in its steady state first: a bin/worker polled the public feed to the end
 * (its horizon, its ETag and GitHub's X-Poll-Interval of 1 s learned; its actor and
 * repository enriched), then stopped. Then 150 new pushes are served — two pages, the second
 * reaching the horizon — and a bin/worker started with FAULT_POINT=<point> SIGKILLs itself
 * in that window of its poll. Then a bin/worker without the fault.
 *
 * For every point:
 * - when the run died mid-poll, the source's next poll, as the dead process left it, is
 *   no more than the feed's poll interval after the death (nobody moves the clock here);
 * - the next worker stores every served push exactly once, and no gap is recorded (the
 *   dead run's committed page is not a horizon: the successor reads both pages again);
 * - a run that died with a request of its own sent and unanswered counts one death, and the
 *   successor's completed run clears it (the source is not on its way to being set aside).
 *
 * How long the successor took is printed, not asserted (the machine is loaded): what proves
 * the resume is the schedule the dead process left, read from the database.
 */

const POLL_INTERVAL = 1;
const NEW_PUSHES = 150;

let fake: FakeGitHub;
const children: Child[] = [];
const table: string[] = [];

beforeAll(async () => {
  fake = await startFakeGitHub({ pollInterval: POLL_INTERVAL });
});

afterAll(async () => {
  await killAll(children);
  await fake?.close();
  if (table.length > 0) {
    console.log(
      `\nPoll killed at each fault point, feed X-Poll-Interval ${POLL_INTERVAL} s, ${NEW_PUSHES} new pushes (2 pages)\n| fault point | dead run | next poll left (s after death) | successor polled (s after spawn) | every push stored (s after spawn) | deaths counted |\n|---|---|---|---|---|---|\n${table.join('\n')}\n`,
    );
  }
});

/** The fault points a poll passes through (the github.* ones: its page requests). */
const POLL_POINTS = FAULT_POINTS.filter((p) => p.startsWith('ingest.') || p.startsWith('github.'));
const AFTER_THE_RUN = new Set<FaultPointName>([
  'ingest.after_finalize',
  'ingest.after_lock_release',
]);

function start(db: ScratchDatabase, extra: Record<string, string> = {}): Child {
  const child = spawnBin('worker', {
    DATABASE_URL: db.url,
    GITHUB_MODE: 'live',
    GITHUB_API_URL: fake.url,
    // A token's poll allowance: anonymously (20 polls an hour) a 1 s feed runs out at once.
    GITHUB_TOKEN: 'poll-resume-token',
    TICK_SECONDS: '1',
    ...extra,
  });
  children.push(child);
  return child;
}

async function one<T>(db: Db, q: RawBuilder<T>): Promise<T> {
  return (await q.execute(db)).rows[0]!;
}

async function storedIds(db: Db): Promise<string[]> {
  const r = await sql<{ id: string }>`SELECT id::text AS id FROM push_events ORDER BY id`.execute(
    db,
  );
  return r.rows.map((x) => x.id);
}

async function completedRuns(db: Db): Promise<number> {
  return (
    await one<{ n: number }>(
      db,
      sql`SELECT count(*)::int AS n FROM ingestion_runs WHERE status IN ('completed', 'not_modified')`,
    )
  ).n;
}

async function entitiesEnriched(db: Db): Promise<number> {
  return (
    await one<{ n: number }>(
      db,
      sql`SELECT count(*)::int AS n FROM (
        SELECT enrichment_state FROM actors UNION ALL SELECT enrichment_state FROM repositories) e
        WHERE enrichment_state = 'enriched'`,
    )
  ).n;
}

async function noRunRunning(db: Db): Promise<boolean> {
  return (
    (
      await one<{ n: number }>(
        db,
        sql`SELECT count(*)::int AS n FROM ingestion_runs WHERE status = 'running'`,
      )
    ).n === 0
  );
}

async function stopGracefully(child: Child): Promise<void> {
  child.process.kill('SIGTERM');
  expect(await child.exited).toEqual({ code: 0, signal: null });
}

describe('a poll killed at any of its fault points resumes within the poll interval', () => {
  it('covers every fault point of a poll', () => {
    expect(POLL_POINTS).toEqual([
      'ingest.after_page_commit',
      'ingest.after_finalize',
      'ingest.after_lock_release',
      'github.after_sent',
      'github.after_settle',
    ]);
  });

  for (const [i, point] of POLL_POINTS.entries()) {
    it(`bin/worker killed at ${point}: its source due within the poll interval, the next worker stores every push once, no gap`, {
      timeout: 180_000,
    }, async () => {
      const scratch = await createScratchDatabase();
      try {
        fake.reset();
        const actor = { id: 71_000 + i, login: `resumer-${i}` };
        const repo = { id: 81_000 + i, name: `resume-${i}/repo` };
        fake.setUser(userProfile(actor));
        fake.setRepo(repoProfile({ id: repo.id, full_name: repo.name }));
        const base = 52_000_000_000 + i * 1_000;
        const first = pushEvent({ id: base, actor, repo });
        fake.addEvents('public', [first]);
        const served = [String(first.id)];
        await addSource(scratch.db, sourceSpec('public'), 'live');

        // 0. The steady state: polled to the end (horizon, ETag, interval), entities enriched.
        const steady = start(scratch);
        await waitFor(
          async () =>
            (await storedIds(scratch.db)).length === 1 &&
            (await entitiesEnriched(scratch.db)) === 2 &&
            (await completedRuns(scratch.db)) >= 1,
          { timeoutMs: 60_000, what: `${point}: the steady state` },
        );
        await stopGracefully(steady);
        const learned = await one<{ interval: number; ring: number }>(
          scratch.db,
          sql`SELECT poll_interval_seconds AS interval,
            cardinality(recent_event_ids) AS ring FROM event_sources`,
        );
        expect(learned).toEqual({ interval: POLL_INTERVAL, ring: 1 });
        const runsBefore = await completedRuns(scratch.db);

        // 1. New pushes by the same (enriched) actor: the dying worker's first request is its
        // poll's page 1, so the github.* points kill it in its poll.
        const news = Array.from({ length: NEW_PUSHES }, (_, k) =>
          pushEvent({ id: base + 1 + k, actor, repo }),
        );
        fake.addEvents('public', news);
        served.push(...news.map((e) => String(e.id)));
        const dying = start(scratch, { FAULT_POINT: point });
        const exit = await Promise.race([
          dying.exited,
          new Promise<'timeout'>((r) => setTimeout(() => r('timeout'), 90_000)),
        ]);
        if (exit === 'timeout') dying.process.kill('SIGKILL');
        expect(exit, dying.stderr.join('')).toEqual({ code: null, signal: 'SIGKILL' });
        expect(dying.stderr.join('')).toContain(`FAULT_POINT ${point}: killing process`);
        const killedAt = Date.now();

        const atDeath = await one<{ next: Date; running: number; sent: number }>(
          scratch.db,
          sql`SELECT (SELECT next_poll_at FROM event_sources) AS next,
            (SELECT count(*)::int FROM ingestion_runs WHERE status = 'running') AS running,
            (SELECT count(*)::int FROM github_requests q JOIN ingestion_runs r ON r.id = q.run_id
             WHERE r.status = 'running' AND q.outcome = 'sent' AND q.finished_at IS NULL) AS sent`,
        );
        const diedMidPoll = atDeath.running === 1;
        // The request's and the page's windows leave the run open; after the finalize the run
        // is complete and its next poll is the one it planned.
        expect(diedMidPoll).toBe(!AFTER_THE_RUN.has(point));
        if (diedMidPoll) {
          // A single death delays the source by no more than its poll interval.
          expect(
            atDeath.next.getTime(),
            `${point}: the dead poll left its source due at ${atDeath.next.toISOString()}, killed at ${new Date(killedAt).toISOString()}`,
          ).toBeLessThanOrEqual(killedAt + POLL_INTERVAL * 1000);
        }

        // 2. The next worker, nothing moved.
        const spawned = Date.now();
        const next = start(scratch);
        await waitFor(
          async () =>
            (await storedIds(scratch.db)).length === served.length &&
            (await completedRuns(scratch.db)) > runsBefore &&
            (await noRunRunning(scratch.db)),
          { timeoutMs: 60_000, what: `${point}: every served push stored` },
        );
        const storedAt = Date.now();
        // The next worker polls the source itself, at its next poll (a run it completes).
        await next.waitForLine(
          (l) => l.event === 'ingestion.run_completed',
          `${point}: the next worker to complete a poll`,
          60_000,
        );
        const polled = next.lines.find((l) => l.event === 'ingestion.run_started');
        await waitFor(() => noRunRunning(scratch.db), {
          timeoutMs: 60_000,
          what: `${point}: the next worker's poll to finish`,
        });
        await stopGracefully(next);

        // 3. Every push once, no gap, the death counted and cleared.
        expect(await storedIds(scratch.db)).toEqual([...served].sort());
        const totals = await one<{ created: number; gaps: number; flagged: number }>(
          scratch.db,
          sql`SELECT (SELECT coalesce(sum(events_created), 0)::int FROM ingestion_runs) AS created,
            (SELECT count(*)::int FROM gaps) AS gaps,
            (SELECT count(*)::int FROM ingestion_runs WHERE gap_detected) AS flagged`,
        );
        expect(totals).toEqual({ created: served.length, gaps: 0, flagged: 0 });
        const interrupted = [...dying.lines, ...next.lines].filter((l) =>
          /\.run_interrupted$/.test(String(l.event)),
        );
        if (diedMidPoll) {
          // Page 1 in flight (github.after_sent), or page 2 marked sent in page 1's commit
          // (the page points): a request of the run's own was unanswered — a death.
          expect(atDeath.sent).toBe(1);
          expect(interrupted).toEqual([
            expect.objectContaining({ on_answer: true, deaths: 1, max_deaths: 2 }),
          ]);
        } else {
          expect(interrupted).toEqual([]);
        }
        const after = await one<{ deaths: number; failures: number; error: string | null }>(
          scratch.db,
          sql`SELECT poll_deaths AS deaths, consecutive_failures AS failures, last_error AS error
            FROM event_sources`,
        );
        expect(after).toEqual({ deaths: 0, failures: 0, error: null });
        table.push(
          `| ${point} | ${diedMidPoll ? 'interrupted' : 'completed'} | ${((atDeath.next.getTime() - killedAt) / 1000).toFixed(1)} | ${polled ? ((Date.parse(String(polled.time)) - spawned) / 1000).toFixed(1) : '—'} | ${((storedAt - spawned) / 1000).toFixed(1)} | ${interrupted.length} |`,
        );
      } finally {
        await scratch.drop();
      }
    });
  }
});
