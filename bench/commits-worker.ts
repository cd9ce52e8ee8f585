import { type ChildProcess, execFile, spawn } from 'node:child_process';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { parse } from 'graphql';
import { sql } from 'kysely';
import { GRAPHQL_MAX_REQUESTS } from '../src/commits/graphql/sizing.ts';
import { startArchiveServer } from '../test/support/archive-server.ts';
import { ZERO } from '../test/support/commit-world.ts';
import { type FakeGitHub, startFakeGitHub } from '../test/support/fake-github.ts';
import { analyzeQuery } from '../test/support/fake-graphql-cost.ts';
import { githubSchema } from '../test/support/fake-graphql-schema.ts';
import { gitWorld, type WorldPush, type WorldRepo } from '../test/support/git-world.ts';
import { type GitHubEvent, pushEvent } from '../test/support/github-factories.ts';
import type { BenchDatabase } from './lib/database.ts';
import type { ResultLog } from './lib/results.ts';
import { secondsSince } from './lib/stats.ts';
import { setUpForWorkers } from './lib/worker-round.ts';

/**
 * Pushes a GraphQL point from the daemon (ADR 0183): the figure of record for commits by
 * GraphQL. `bin/worker`, as a user starts it (one token, the public source, commits on by
 * default), against the fake GitHub over HTTP — GitHub's schema, its point formula
 * (round(requests / 100), at least 1), one request at a time a credential — while
 * `bin/backfill` imports an archive hour, both into real Postgres.
 *
 * The mix: BENCH_CW_PUSHES pushes (default 900) to repositories picked at random among
 * 5,000, so most land in distinct ones, each repository with a pushed history before;
 * commits per push as GH Archive hours show them (78% one, 11% two, 3.5% three, … 0.5%
 * over a hundred); and of the pushes 7% merges of a pull request's branch (forked a few
 * commits back, dated before the mainline), 3% force pushes, 6% new branches, 3% first
 * pushes of a new repository (its history up to 300 commits), 2% tags and 2% deleted
 * branches. The oldest two thirds are in the archive hour, the newest third in the public
 * feed (its 300 reachable events).
 *
 * Figures: pushes a point = pushes the fetcher settled ÷ (GraphQL points the fake charged +
 * REST compare requests, a fallback's cost); the same figure as `bin/status --json` shows it
 * (`commits.graphql`); the fetch-commits jobs (batches, queries, points); and every stored
 * set checked against git's (the fake's graph): a wrong commit set is a failure, not a
 * figure.
 */

const ROOT = fileURLToPath(new URL('../', import.meta.url));
const run = promisify(execFile);
const PUSHES = Number(process.env.BENCH_CW_PUSHES ?? 900);
const REPOS = Number(process.env.BENCH_CW_REPOS ?? 5_000);
const LATENCY_MS = Number(process.env.BENCH_CW_LATENCY_MS ?? 50);
const TIMEOUT_MS = Number(process.env.BENCH_CW_TIMEOUT_S ?? 900) * 1000;
const SETTLE_FIRST = process.env.BENCH_CW_SETTLE_FIRST === '1';
const TOKEN = 'bench-commits-worker-not-a-secret';

/** A deterministic stream in [0, 1) (xorshift32): every run builds the same world. */
function rng(seed: number) {
  let x = seed || 1;
  return () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) / 4_294_967_296;
  };
}

/** Commits per push on github.com (GH Archive hours that still said `size`). */
function commitsPerPush(r: () => number): number {
  const p = r();
  if (p < 0.78) return 1;
  if (p < 0.89) return 2;
  if (p < 0.925) return 3;
  if (p < 0.94) return 4;
  if (p < 0.95) return 5;
  if (p < 0.971) return 6 + Math.floor(r() * 5);
  if (p < 0.985) return 11 + Math.floor(r() * 10);
  if (p < 0.995) return 21 + Math.floor(r() * 80);
  return 101 + Math.floor(r() * 200);
}

type Kind = 'linear' | 'merge' | 'force' | 'new-branch' | 'first' | 'tag' | 'deletion';

interface Planned {
  kind: Kind;
  repositoryId: number;
  fullName: string;
  ref: string;
  before: string;
  head: string;
  /** The commits a fetcher must store (none for a tag or a deletion). */
  expected: string[];
}

/** The pushes, oldest first, over commit graphs the fake serves. */
export function buildWorld(fake: FakeGitHub): Planned[] {
  const r = rng(183);
  const world = gitWorld(fake, { start: new Date(Date.now() - 30 * 86_400_000) });
  const repos = new Map<number, WorldRepo>();
  let newRepos = 0;
  let branches = 0;
  const existing = (i: number): WorldRepo => {
    let repo = repos.get(i);
    if (!repo) {
      repo = world.repo(`bench-cw/repo-${i}`, { id: 7_000_000 + i });
      repo.commit(5 + Math.floor(r() * 30)); // its history, pushed before the hour
      repos.set(i, repo);
    }
    return repo;
  };
  const out: Planned[] = [];
  const of = (repo: WorldRepo, p: WorldPush, kind: Kind): Planned => ({
    kind,
    repositoryId: repo.repositoryId,
    fullName: repo.fullName,
    ref: p.ref,
    before: p.before,
    head: p.head,
    expected: p.expected,
  });
  while (out.length < PUSHES) {
    const k = r();
    if (k < 0.03) {
      // A new repository's first push: its whole history.
      const repo = world.repo(`bench-cw/new-${newRepos}`, { id: 8_000_000 + newRepos++ });
      const history = commitsPerPush(r) > 1 ? 1 + Math.floor(r() * 300) : Math.floor(r() * 10);
      if (history > 0) repo.commit(history, { unpushed: true });
      out.push(of(repo, repo.push('main', 1 + Math.floor(r() * 3)), 'first'));
      continue;
    }
    const repo = existing(Math.floor(r() * REPOS));
    const main = repo.tip('main')!;
    if (k < 0.1) {
      // A pull request merged: its branch forked a few commits back, made before the merge.
      const line: string[] = [main];
      for (let i = 0; i < 4; i++) {
        const parent = fake.commitGraph(repo.fullName)!.commits.get(line.at(-1)!)?.parents[0];
        if (parent) line.push(parent);
      }
      const fork = line[Math.floor(r() * line.length)]!;
      const pr = `pr-${branches++}`;
      repo.commit(Math.max(1, commitsPerPush(r) - 1), { on: pr, from: fork });
      out.push(of(repo, repo.merge('main', pr), 'merge'));
    } else if (k < 0.13) {
      out.push(
        of(
          repo,
          repo.forcePush('main', { drop: 1 + Math.floor(r() * 2), add: commitsPerPush(r) }),
          'force',
        ),
      );
    } else if (k < 0.19) {
      out.push(of(repo, repo.push(`feature-${branches++}`, commitsPerPush(r)), 'new-branch'));
    } else if (k < 0.21) {
      out.push({
        kind: 'tag',
        repositoryId: repo.repositoryId,
        fullName: repo.fullName,
        ref: `refs/tags/v${branches++}`,
        before: ZERO,
        head: main,
        expected: [],
      });
    } else if (k < 0.23) {
      const gone = `old-${branches++}`;
      repo.commit(1, { on: gone, from: main });
      const before = repo.tip(gone)!;
      repo.deleteBranch(gone);
      out.push({
        kind: 'deletion',
        repositoryId: repo.repositoryId,
        fullName: repo.fullName,
        ref: `refs/heads/${gone}`,
        before,
        head: ZERO,
        expected: [],
      });
    } else out.push(of(repo, repo.push('main', commitsPerPush(r)), 'linear'));
  }
  return out;
}

function eventsOf(pushes: readonly Planned[], from: Date, spanMs: number, firstId: number) {
  return pushes.map(
    (p, i): GitHubEvent =>
      pushEvent({
        id: firstId + i,
        created_at: new Date(from.getTime() + Math.floor((i * spanMs) / pushes.length)),
        actor: { id: 90_000 + (i % 400), login: `bench-pusher-${i % 400}` },
        repo: { id: p.repositoryId, name: p.fullName },
        payload: { ref: p.ref, before: p.before, head: p.head },
      }),
  );
}

function childEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  return {
    PATH: `${path.dirname(process.execPath)}:${process.env.PATH ?? ''}`,
    HOME: process.env.HOME ?? '/tmp',
    ...extra,
  };
}

interface JobLine {
  processed: number;
  points: number;
  queries: number;
  outcome: string;
}

function stop(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    child.once('exit', () => resolve());
    child.kill('SIGTERM');
    setTimeout(() => child.kill('SIGKILL'), 30_000).unref();
  });
}

async function count(database: BenchDatabase, where: ReturnType<typeof sql>): Promise<number> {
  const r = await sql<{ n: string }>`SELECT count(*) AS n FROM push_events WHERE ${where}`.execute(
    database.db,
  );
  return Number(r.rows[0]!.n);
}

export async function benchCommitsWorker(
  database: BenchDatabase,
  results: ResultLog,
): Promise<string[]> {
  const failures: string[] = [];
  await setUpForWorkers(database);
  await sql`TRUNCATE commits_graphql_minutes`.execute(database.db);
  const fake = await startFakeGitHub({ latencyMs: LATENCY_MS, tokenLimit: 5_000 });
  const archive = await startArchiveServer();
  let worker: ChildProcess | null = null;
  try {
    const pushes = buildWorld(fake);
    // The oldest two thirds in an archive hour three hours ago, the newest third in the feed.
    const split = Math.round((pushes.length * 2) / 3);
    const hourStart = new Date(Math.floor(Date.now() / 3_600_000) * 3_600_000 - 3 * 3_600_000);
    const hour = `${hourStart.toISOString().slice(0, 10)}-${hourStart.getUTCHours()}`;
    archive.setHour(hour, eventsOf(pushes.slice(0, split), hourStart, 3_599_000, 40_000_000_000));
    fake.addEvents(
      'public',
      eventsOf(pushes.slice(split), new Date(Date.now() - 10 * 60_000), 9 * 60_000, 41_000_000_000),
    );
    await sql`UPDATE event_sources SET commits_enabled = true WHERE kind = 'public'`.execute(
      database.db,
    );

    const env = {
      DATABASE_URL: database.url,
      GITHUB_API_URL: fake.url,
      GITHUB_TOKEN: TOKEN,
      GHARCHIVE_URL: archive.url,
      LOG_LEVEL: 'info',
      LOG_FORMAT: 'json',
    };
    const t0 = performance.now();
    worker = spawn(path.join(ROOT, 'bin', 'worker'), [], {
      cwd: ROOT,
      env: childEnv(env),
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    const jobs: JobLine[] = [];
    const errors: string[] = [];
    let buffered = '';
    worker.stderr!.on('data', (chunk: Buffer) => {
      buffered += chunk.toString();
      const lines = buffered.split('\n');
      buffered = lines.pop() ?? '';
      for (const line of lines) {
        if (!line.startsWith('{')) continue;
        try {
          const o = JSON.parse(line) as Record<string, unknown>;
          if (o.level === 50) errors.push(String(o.msg));
          if (o.event === 'job.completed' && o.queue === 'fetch-commits') {
            const res = (o.result ?? o) as Record<string, unknown>;
            jobs.push({
              processed: Number(res.processed ?? 0),
              points: Number(res.points ?? 0),
              queries: Number(res.queries ?? 0),
              outcome: String(res.outcome ?? o.outcome ?? ''),
            });
          }
        } catch {
          // not a JSON line
        }
      }
    });
    const deadline = Date.now() + TIMEOUT_MS;
    const waitFor = async (what: string, done: () => Promise<boolean>) => {
      while (!(await done())) {
        if (worker!.exitCode !== null) throw new Error(`bin/worker exited: ${errors.join('; ')}`);
        if (Date.now() > deadline) throw new Error(`commits-worker: timed out waiting for ${what}`);
        await new Promise((r) => setTimeout(r, 500));
      }
    };
    // The feed's pushes polled, then the archive hour imported beside the running worker
    // (BENCH_CW_SETTLE_FIRST=1: once the worker has settled the feed's pushes, so the two
    // never share a batch).
    await waitFor(
      'the poll',
      async () => (await count(database, sql`true`)) >= pushes.length - split,
    );
    if (SETTLE_FIRST) {
      await waitFor(
        "the feed's pushes settled",
        async () => (await count(database, sql`commits_state = 'pending'`)) === 0,
      );
    }
    await run(path.join(ROOT, 'bin', 'backfill'), [hour, '--mirror', archive.url], {
      cwd: ROOT,
      env: childEnv({ ...env, LOG_LEVEL: 'warn' }),
    });
    await waitFor(
      'every push settled',
      async () =>
        (await count(database, sql`true`)) >= pushes.length &&
        (await count(database, sql`commits_state = 'pending'`)) === 0,
    );
    const seconds = secondsSince(t0);
    const status = await run(path.join(ROOT, 'bin', 'status'), ['--json'], {
      cwd: ROOT,
      env: childEnv({ ...env, LOG_LEVEL: 'warn' }),
    });
    await stop(worker);

    // What the fetcher did and what it cost.
    const states = await sql<{ state: string; n: string }>`
      SELECT commits_state AS state, count(*) AS n FROM push_events GROUP BY 1`.execute(
      database.db,
    );
    const byState = Object.fromEntries(states.rows.map((x) => [x.state, Number(x.n)]));
    const settled = (byState.complete ?? 0) + (byState.partial ?? 0) + (byState.gone ?? 0);
    const failed = byState.failed ?? 0;
    const points = fake.graphql.pointsSpent();
    const compares = fake.requests.filter((q) => q.path.includes('/compare/')).length;
    const ledger = await sql<{ points: string }>`
      SELECT coalesce(sum(points), 0) AS points FROM github_requests
      WHERE purpose = 'commits' AND credential LIKE '%#graphql'`.execute(database.db);
    const perPoint = (settled + failed) / (points + compares);
    // How full the queries were: GitHub's requests over what their points would hold.
    const requests = fake.graphql.queries.map(
      (q) => analyzeQuery(githubSchema(), parse(q.query), { variables: q.variables }).requests,
    );
    const fill = requests.reduce((a, b) => a + b, 0) / (points * GRAPHQL_MAX_REQUESTS);
    const shown = (JSON.parse(status.stdout) as { commits?: { graphql?: unknown } }).commits
      ?.graphql as { pushes: number; points: number; pushesPerPoint: number | null } | undefined;

    // Every stored set against git's.
    let wrong = 0;
    let short = 0;
    const wrongExamples: string[] = [];
    for (const p of pushes) {
      const r = await sql<{ sha: string; state: string }>`
        SELECT pc.sha, pe.commits_state AS state FROM push_events pe
        LEFT JOIN push_commits pc USING (repository_id, ref, before, head)
        WHERE pe.repository_id = ${String(p.repositoryId)}::bigint AND pe.ref = ${p.ref}
          AND pe.before = ${p.before} AND pe.head = ${p.head}
        ORDER BY pc.position`.execute(database.db);
      const state = r.rows[0]?.state;
      const got = r.rows.flatMap((x) => (x.sha ? [x.sha] : []));
      const truth = new Set(p.expected);
      const extra = got.filter((s) => !truth.has(s));
      const exact = got.length === p.expected.length && got.every((s, i) => s === p.expected[i]);
      if (extra.length > 0 || (state === 'complete' && !exact)) {
        wrong++;
        if (wrongExamples.length < 5)
          wrongExamples.push(
            `${p.kind} ${p.fullName} ${p.ref} ${state}: ${extra.length} not its own`,
          );
      } else if (state === 'partial' && got.length < p.expected.length) short++;
    }

    const batches = jobs.filter((j) => j.queries > 0);
    const kinds: Record<string, number> = {};
    for (const p of pushes) kinds[p.kind] = (kinds[p.kind] ?? 0) + 1;
    const distinctRepos = new Set(pushes.map((p) => p.repositoryId)).size;
    const detail = {
      pushes: pushes.length,
      distinctRepositories: distinctRepos,
      kinds,
      states: byState,
      settled,
      failed,
      graphqlPoints: points,
      queries: requests.length,
      queryFill: fill,
      queryRequests: requests,
      ledgerPoints: Number(ledger.rows[0]!.points),
      restCompares: compares,
      seconds,
      latencyMs: LATENCY_MS,
      settleFirst: SETTLE_FIRST,
      jobs: jobs.length,
      jobsWithQueries: batches.length,
      pushesPerJob: batches.map((j) => j.processed),
      pointsPerJob: batches.map((j) => j.points),
      statusShows: shown ?? null,
      partialShort: short,
    };
    results.record({
      bench: 'commits-worker',
      metric: 'pushes a point (bin/worker + bin/backfill, HTTP)',
      value: perPoint,
      unit: 'pushes/point',
      target: { op: '>=', value: 20 },
      detail: { goal: 25, ...detail },
    });
    if (shown?.pushesPerPoint != null) {
      results.record({
        bench: 'commits-worker',
        metric: 'pushes a point as bin/status --json shows it (GraphQL only, last hour)',
        value: shown.pushesPerPoint,
        unit: 'pushes/point',
        detail: shown,
      });
    }
    results.record({
      bench: 'commits-worker',
      metric: 'wrong commit sets',
      value: wrong,
      unit: 'pushes',
      target: { op: '==', value: 0 },
      detail: { examples: wrongExamples },
    });
    results.note(
      `  ${pushes.length} pushes in ${distinctRepos} repositories (${Object.entries(kinds)
        .map(([k, n]) => `${k} ${n}`)
        .join(
          ', ',
        )}): ${settled} settled, ${failed} failed, for ${points} GraphQL points (${requests.length} queries, ${Math.round(fill * 100)}% full) + ${compares} REST compares in ${seconds.toFixed(0)} s; fetch-commits jobs with queries: ${batches.length} (pushes ${batches.map((j) => j.processed).join(', ')})`,
    );
    if (wrong > 0)
      failures.push(`commits-worker: ${wrong} stored commit sets hold a commit not the push's`);
    return failures;
  } finally {
    if (worker) await stop(worker);
    await archive.close();
    await fake.close();
  }
}
