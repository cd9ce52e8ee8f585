import { sign } from '@octokit/webhooks-methods';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { settleAbandonedReservations } from '../../src/budget/ledger.ts';
import { sourceSpec } from '../../src/platform/config/source-spec.ts';
import type { Db } from '../../src/platform/db/pool.ts';
import { FAULT_POINTS, type FaultPointName } from '../../src/platform/fault.ts';
import { addSource } from '../../src/store/sources.ts';
import { type FakeGitHub, startFakeGitHub } from '../support/fake-github.ts';
import { createScratchDatabase, type ScratchDatabase } from '../support/scratch-db.ts';
import { pushPayload } from '../support/web.ts';
import { type LogLine, waitFor } from './helpers.ts';
import { type Child, killAll, seedPushes, spawnBin, type World } from './world.ts';

/**
 * The crash-window matrix. For every fault point in src/platform/fault.ts: a real child
 * process (bin/worker, or bin/web for webhook intake) against the fake GitHub, started with
 * FAULT_POINT=<point> so it SIGKILLs itself in that window; then the same binary again
 * without it. Each point gets its own database cloned from the template and a reset fake.
 *
 * After the restart, for every point:
 * - every push the fake served is stored exactly once;
 * - no ingestion run is left `running` (the reconciler marks the dead one `interrupted`);
 * - no enrichment attempt is left open (the next claim of its entity closes it);
 * - every reservation the dead process left open is settled by the ledger sweep
 *   (settleAbandonedReservations, which the reconciler calls every tick with a 300 s age
 *   threshold; the test calls it with 0 s once the restarted worker has stopped, so the
 *   only open rows can be the dead process's);
 * - every entity ends enriched/gone/failed within two reconcile ticks of being workable
 *   again (restart done, the dead claim's lease expired);
 * - for the webhook: nothing of the killed delivery is committed, and its redelivery is
 *   stored once (a second redelivery is a duplicate).
 *
 * Nothing is stood in for: a job the dead worker left `active` in pg-boss is found by the
 * restarted worker's orphan sweep (its liveness lock died with it, ADR 0011) and failed,
 * so its stately queue runs its next job at once; the test checks no job of the dead
 * process is left active and reports how many the sweep failed.
 */

const PUSHES = 3;
const TICK_SECONDS = 1;
const LEASE_SECONDS = 2;
const SECRET = 'crash-matrix-webhook-secret';

let fake: FakeGitHub;
const children: Child[] = [];
const matrix: MatrixRow[] = [];

interface MatrixRow {
  point: FaultPointName;
  binary: string;
  killed: string;
  atDeath: string;
  pushesOnce: string;
  runs: string;
  reservations: string;
  attempts: string;
  entities: string;
  ticks: string;
  orphans: string;
}

beforeAll(async () => {
  fake = await startFakeGitHub();
});

afterAll(async () => {
  await killAll(children);
  await fake?.close();
  if (matrix.length > 0) console.log(`\nCrash-window matrix\n${renderMatrix(matrix)}\n`);
});

function renderMatrix(rows: MatrixRow[]): string {
  const head: MatrixRow = {
    point: 'fault point' as FaultPointName,
    binary: 'process',
    killed: 'died',
    atDeath: 'state at death',
    pushesOnce: 'pushes once',
    runs: 'runs after restart',
    reservations: 'open reservations → swept',
    attempts: 'open attempts',
    entities: 'entities',
    ticks: 'ticks to settle',
    orphans: 'orphaned jobs failed',
  };
  const keys = Object.keys(head) as (keyof MatrixRow)[];
  const line = (r: MatrixRow) => `| ${keys.map((k) => r[k]).join(' | ')} |`;
  return [line(head), `|${keys.map(() => '---').join('|')}|`, ...rows.map(line)].join('\n');
}

function baseEnv(db: ScratchDatabase): Record<string, string> {
  return {
    // Idle jobs (nothing_due, nothing_to_do) log job.completed at debug: this test counts them.
    LOG_LEVEL: 'debug',
    DATABASE_URL: db.url,
    GITHUB_MODE: 'live',
    GITHUB_API_URL: fake.url,
    TICK_SECONDS: String(TICK_SECONDS),
    ENRICH_LEASE_SECONDS: String(LEASE_SECONDS),
  };
}

function start(name: string, env: Record<string, string>): Child {
  const child = spawnBin(name, env);
  children.push(child);
  return child;
}

async function expectFaultKill(child: Child, point: FaultPointName): Promise<void> {
  const exit = await Promise.race([
    child.exited,
    new Promise<'timeout'>((r) => setTimeout(() => r('timeout'), 90_000)),
  ]);
  if (exit === 'timeout') {
    child.process.kill('SIGKILL');
    throw new Error(`${point}: the process never reached its fault point`);
  }
  expect(exit, child.stderr.join('')).toEqual({ code: null, signal: 'SIGKILL' });
  expect(child.stderr.join('')).toContain(`FAULT_POINT ${point}: killing process`);
}

async function count(db: Db, query: ReturnType<typeof sql<{ n: number }>>): Promise<number> {
  return (await query.execute(db)).rows[0]!.n;
}

async function snapshot(db: Db) {
  const [pushes, running, openReservations, openAttempts, leased] = await Promise.all([
    count(db, sql`SELECT count(*)::int AS n FROM push_events`),
    count(db, sql`SELECT count(*)::int AS n FROM ingestion_runs WHERE status = 'running'`),
    count(
      db,
      sql`SELECT count(*)::int AS n FROM github_requests WHERE outcome IN ('reserved', 'sent')`,
    ),
    count(db, sql`SELECT count(*)::int AS n FROM enrichment_attempts WHERE outcome IS NULL`),
    count(
      db,
      sql`SELECT count(*)::int AS n FROM (
        SELECT claimed_until FROM actors UNION ALL SELECT claimed_until FROM repositories) e
        WHERE claimed_until > now()`,
    ),
  ]);
  return { pushes, running, openReservations, openAttempts, leased };
}

async function entityStates(db: Db): Promise<Record<string, number>> {
  const r = await sql<{ state: string; n: number }>`
    SELECT enrichment_state AS state, count(*)::int AS n FROM (
      SELECT enrichment_state FROM actors UNION ALL SELECT enrichment_state FROM repositories) e
    GROUP BY 1 ORDER BY 1`.execute(db);
  return Object.fromEntries(r.rows.map((x) => [x.state, x.n]));
}

async function storedEventIds(db: Db): Promise<string[]> {
  const r = await sql<{ id: string }>`SELECT id::text AS id FROM push_events ORDER BY id`.execute(
    db,
  );
  return r.rows.map((x) => x.id);
}

/** Latest moment any claim of the dead process stays valid (null: it held none). */
async function deadLeaseExpiry(db: Db): Promise<Date | null> {
  const r = await sql<{ until: Date | null }>`
    SELECT max(claimed_until) AS until FROM (
      SELECT claimed_until FROM actors UNION ALL SELECT claimed_until FROM repositories) e`.execute(
    db,
  );
  return r.rows[0]!.until;
}

/** No run running and every source scheduled ahead: each poll ran to its finalize. */
async function sourcesFinalized(db: Db): Promise<boolean> {
  const r = await sql<{ ok: boolean }>`
    SELECT NOT EXISTS (SELECT 1 FROM ingestion_runs WHERE status = 'running')
       AND NOT EXISTS (SELECT 1 FROM event_sources WHERE next_poll_at <= now()) AS ok`.execute(db);
  return r.rows[0]!.ok;
}

/**
 * How many reconcile ticks it took, once the work was workable again (restart done and the
 * dead claim's lease expired), for the cycle that settled each entity to be dispatched:
 * 0 when the worker's start-up reconcile (or a hint) sent it, else the number of reconcile
 * passes from `workableMs` up to the one that sent it. The worst entity counts.
 */
function ticksToSettle(lines: LogLine[], workableMs: number): number {
  const at = (l: LogLine) => Date.parse(String(l.time));
  const passes = lines
    .filter((l) => l.event === 'job.completed' && l.queue === 'reconcile')
    .map((l) => ({ start: at(l) - Number(l.duration_ms ?? 0), end: at(l) }));
  const settled = new Map<string, LogLine>();
  for (const l of lines)
    if ((l.event === 'enrichment.completed' || l.event === 'enrichment.failed') && l.entity_id)
      settled.set(`${l.class}:${l.entity_id}`, l);
  let worst = 0;
  for (const done of settled.values()) {
    const dispatch = lines.find((l) => l.enrich_job_id && l.enrich_job_id === done.job_id);
    const sentAt = dispatch ? at(dispatch) : at(done);
    const n = passes.filter((p) => p.end > workableMs && p.start <= sentAt).length;
    worst = Math.max(worst, n);
  }
  return worst;
}

/** Every push the fake served, each stored exactly once (ids are the primary key; count too). */
async function expectPushesOnce(db: Db, world: World): Promise<void> {
  expect(await storedEventIds(db)).toEqual([...world.eventIds].sort());
  const feedRuns = await sql<{ created: number }>`
    SELECT coalesce(sum(events_created), 0)::int AS created FROM ingestion_runs`.execute(db);
  // Runs only count what they created: re-reading a committed page creates nothing.
  expect(feedRuns.rows[0]!.created).toBe(world.eventIds.length);
}

// The commits fetcher's windows need targeted pushes, which a public source never makes:
// test/recovery/commits-crash.test.ts kills bin/commits in each of them; retention's,
// test/recovery/retention-crash.test.ts kills bin/retention in.
const WORKER_POINTS = FAULT_POINTS.filter(
  (p) =>
    p !== 'webhook.after_delivery_insert' &&
    !p.startsWith('commits.') &&
    !p.startsWith('retention.'),
);

describe('crash-window matrix', () => {
  it('names every window the issue asks for', () => {
    expect(FAULT_POINTS).toEqual([
      'ingest.after_page_commit',
      'ingest.after_finalize',
      'ingest.after_lock_release',
      'github.after_sent',
      'github.after_settle',
      'enrich.after_claim',
      'enrich.after_reserve',
      'enrich.after_response',
      'enrich.after_apply',
      'webhook.after_delivery_insert',
      'commits.after_claim',
      'commits.after_response',
      'commits.after_store',
      'retention.before_commit',
    ]);
  });

  for (const [i, point] of WORKER_POINTS.entries()) {
    it(`bin/worker killed at ${point} loses nothing and settles`, { timeout: 60_000 }, async () => {
      const scratch = await createScratchDatabase();
      try {
        fake.reset();
        const world = seedPushes(fake, PUSHES, 1000 + i * 10);
        await addSource(scratch.db, sourceSpec('public'), 'live');
        const entities = world.actorIds.length + world.repositoryIds.length;

        // 1. Die in the window.
        const first = start('worker', { ...baseEnv(scratch), FAULT_POINT: point });
        await expectFaultKill(first, point);
        const atDeath = await snapshot(scratch.db);
        const leaseUntil = await deadLeaseExpiry(scratch.db);
        const killedAt = new Date();
        // The first request a worker sends is its poll's page 1: the github.* points kill it.
        const diedMidPoll = point === 'ingest.after_page_commit' || point.startsWith('github.');
        if (diedMidPoll) {
          // The dead poll left its source due one poll interval on (ADR 0180): the fake's
          // X-Poll-Interval of 60 s, no later (test/recovery/poll-resume.test.ts runs these
          // windows with a 1 s feed and waits for the interval itself).
          const next = await sql<{
            at: Date;
          }>`SELECT next_poll_at AS at FROM event_sources`.execute(scratch.db);
          expect(next.rows[0]!.at.getTime()).toBeGreaterThan(killedAt.getTime() + 30_000);
          expect(next.rows[0]!.at.getTime()).toBeLessThanOrEqual(killedAt.getTime() + 60_000);
          // The minute passes.
          await sql`UPDATE event_sources SET next_poll_at = now()`.execute(scratch.db);
        }

        // 2. Restart without the fault.
        const second = start('worker', baseEnv(scratch));
        const started = await second.waitForLine(
          (l) => l.event === 'worker.started',
          'the restarted worker to start',
        );
        await waitFor(
          async () => {
            const s = await entityStates(scratch.db);
            const ids = await storedEventIds(scratch.db);
            return (
              ids.length === world.eventIds.length &&
              (s.enriched ?? 0) + (s.gone ?? 0) + (s.failed ?? 0) === entities &&
              (await sourcesFinalized(scratch.db))
            );
          },
          {
            timeoutMs: 30_000,
            what: `${point}: every push stored, every source polled to the end, every entity settled`,
          },
        );

        // The dead worker's jobs were failed by the sweep, not left for pg-boss's expiry.
        const deadActive = await count(
          scratch.db,
          sql`SELECT count(*)::int AS n FROM pgboss.job
              WHERE state = 'active' AND started_on <= ${killedAt}`,
        );
        expect(deadActive, 'a job of the dead worker is still active').toBe(0);
        const orphaned = second.lines.filter((l) => l.event === 'reconcile.job_orphaned');

        const workable = Math.max(Date.parse(String(started.time)), leaseUntil?.getTime() ?? 0);
        const ticks = ticksToSettle(second.lines, workable);
        expect(ticks, `${point}: reconcile ticks before every entity settled`).toBeLessThanOrEqual(
          2,
        );

        const lastSettled = await sql<{ at: Date }>`
          SELECT max(finished_at) AS at FROM enrichment_attempts`.execute(scratch.db);
        const settleSeconds = Math.max(0, lastSettled.rows[0]!.at.getTime() - workable) / 1000;
        second.process.kill('SIGTERM');
        expect(await second.exited).toEqual({ code: 0, signal: null });

        // 3. Assertions on the settled state.
        await expectPushesOnce(scratch.db, world);
        expect(await entityStates(scratch.db)).toEqual({ enriched: entities });
        const runs = await sql<{ status: string; n: number }>`
          SELECT status, count(*)::int AS n FROM ingestion_runs GROUP BY 1 ORDER BY 1`.execute(
          scratch.db,
        );
        const runCounts = Object.fromEntries(runs.rows.map((r) => [r.status, r.n]));
        expect(runCounts.running, 'no run left running').toBeUndefined();
        if (diedMidPoll) {
          // The dead run is interrupted (a death of its source), and the source, due again, is
          // polled to the end: the completed run clears the death.
          expect(runCounts).toEqual({ completed: 1, interrupted: 1 });
          // A death only when it died on an answer (github.after_sent: page 1 sent, no answer);
          // killed after its answer was written, it is a failure of the source, not a death.
          const death = second.lines.find((l) => /\.run_interrupted$/.test(String(l.event)));
          const onAnswer = point === 'github.after_sent';
          expect(death).toMatchObject({ on_answer: onAnswer, deaths: onAnswer ? 1 : 0 });
          const src = await sql<{ deaths: number }>`
            SELECT poll_deaths AS deaths FROM event_sources`.execute(scratch.db);
          expect(src.rows[0]!.deaths).toBe(0);
        } else {
          expect(runCounts).toEqual({ completed: 1 });
        }
        const after = await snapshot(scratch.db);
        expect(after.openAttempts, 'no attempt left open').toBe(0);
        // Only the dead process's reservations may still be open, and the sweep settles them.
        const stillOpen = await sql<{ n: number; newest: Date | null }>`
          SELECT count(*)::int AS n, max(reserved_at) AS newest FROM github_requests
          WHERE outcome IN ('reserved', 'sent')`.execute(scratch.db);
        const open = stillOpen.rows[0]!;
        if (open.newest) expect(open.newest.getTime()).toBeLessThanOrEqual(killedAt.getTime());
        // Both classes' cycles run at once: the one that did not die may also hold one.
        if (point === 'enrich.after_reserve') expect(open.n).toBeGreaterThanOrEqual(1);
        expect(open.n).toBeLessThanOrEqual(2);
        expect(await settleAbandonedReservations(scratch.db, 0)).toBe(open.n);
        expect((await snapshot(scratch.db)).openReservations).toBe(0);
        const interruptedAttempts = await count(
          scratch.db,
          sql`SELECT count(*)::int AS n FROM enrichment_attempts WHERE outcome = 'interrupted'`,
        );
        // The dead attempt is closed by the next claim of its entity; the other class's
        // cycle may have had one in flight too.
        if (point === 'enrich.after_response')
          expect(interruptedAttempts).toBeGreaterThanOrEqual(1);
        expect(interruptedAttempts).toBeLessThanOrEqual(2);

        matrix.push({
          point,
          binary: 'bin/worker',
          killed: 'SIGKILL',
          atDeath: `${atDeath.pushes} pushes, ${atDeath.running} run running, ${atDeath.leased} leased, ${atDeath.openReservations} reservation open`,
          pushesOnce: `${world.eventIds.length}/${world.eventIds.length}`,
          runs: Object.entries(runCounts)
            .map(([s, n]) => `${n} ${s}`)
            .join(', '),
          reservations: `${open.n} → 0`,
          attempts: `0 open (${interruptedAttempts} interrupted)`,
          entities: `${entities}/${entities} enriched`,
          ticks: `${ticks} (${settleSeconds.toFixed(1)} s)`,
          orphans:
            orphaned.length === 0
              ? '0'
              : `${orphaned.length} (${orphaned.map((l) => l.queue).join(', ')})`,
        });
      } finally {
        await scratch.drop();
      }
    });
  }

  it('bin/web killed at webhook.after_delivery_insert: nothing committed, redelivery stored once', {
    timeout: 180_000,
  }, async () => {
    const point = 'webhook.after_delivery_insert' as const;
    const scratch = await createScratchDatabase();
    try {
      fake.reset();
      const env = { ...baseEnv(scratch), WEBHOOK_SECRET: SECRET, HTTP_PORT: '0' };
      const payload = pushPayload();
      const body = JSON.stringify(payload);
      const post = async (url: string) =>
        fetch(`${url}/webhooks/github`, {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            'x-github-event': 'push',
            'x-github-delivery': 'crash-matrix-delivery-1',
            'x-hub-signature-256': await sign(SECRET, body),
          },
          body,
        });
      const urlOf = async (c: Child) =>
        String((await c.waitForLine((l) => l.event === 'web.listening', 'the web to listen')).url);

      const first = start('web', { ...env, FAULT_POINT: point });
      await expect(post(await urlOf(first))).rejects.toThrow();
      await expectFaultKill(first, point);
      const atDeath = await snapshot(scratch.db);
      const deliveriesAtDeath = await count(
        scratch.db,
        sql`SELECT count(*)::int AS n FROM webhook_deliveries`,
      );
      expect({ pushes: atDeath.pushes, deliveries: deliveriesAtDeath }).toEqual({
        pushes: 0,
        deliveries: 0,
      });

      const second = start('web', env);
      const url = await urlOf(second);
      const redelivered = await post(url);
      expect(redelivered.status).toBe(202);
      expect(await redelivered.json()).toEqual({
        ok: true,
        routing: 'push:created',
        created: true,
      });
      const again = await post(url);
      expect(again.status).toBe(200);
      expect(await again.json()).toEqual({ ok: true, duplicate: true });
      second.process.kill('SIGTERM');
      expect(await second.exited).toEqual({ code: 0, signal: null });

      const pushes = await sql<{ head: string; actor_id: string; repository_id: string }>`
        SELECT head, actor_id::text, repository_id::text FROM push_events`.execute(scratch.db);
      expect(pushes.rows).toEqual([
        {
          head: payload.after,
          actor_id: String(payload.sender.id),
          repository_id: String(payload.repository.id),
        },
      ]);
      expect(await count(scratch.db, sql`SELECT count(*)::int AS n FROM webhook_deliveries`)).toBe(
        1,
      );
      matrix.push({
        point,
        binary: 'bin/web',
        killed: 'SIGKILL',
        atDeath: '0 deliveries, 0 pushes committed',
        pushesOnce: '1/1 (redelivery 202, again 200 duplicate)',
        runs: '—',
        reservations: '—',
        attempts: '—',
        entities: '1 actor + 1 repository pending (the worker enriches them)',
        ticks: '—',
        orphans: '—',
      });
    } finally {
      await scratch.drop();
    }
  });
});
