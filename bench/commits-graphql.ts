import { performance } from 'node:perf_hooks';
import { DEFAULT_PROOF_LIMITS } from '../src/commits/graphql/proof.ts';
import { type Final, proveAll, type RoundPush } from '../src/commits/graphql/rounds.ts';
import { type FakeCommit, range } from '../test/support/fake-commit-graph.ts';
import { inProcessGraphQL } from '../test/support/graphql-driver.ts';
import type { BenchDatabase } from './lib/database.ts';
import type { ResultLog } from './lib/results.ts';
import { secondsSince } from './lib/stats.ts';

/**
 * A FUNCTION-LEVEL DIAGNOSTIC, not the figure of record (that is bench/commits-worker.ts:
 * bin/worker over HTTP, ADR 0183). It calls the prover (proveAll) directly in batches of
 * 2,000 pushes, with no job, no claims, no database and no HTTP, against the fake GitHub's
 * `/graphql` executor in process (GitHub's schema, its point formula, its answers):
 * pushes of GitHub's sizes (≈60% one commit, 30% 2–5, 10% 6–20) with 10% merges of a side
 * branch (dated before the mainline it joins, as a pull request's commits are) and 5% force
 * pushes (the last 1–3 commits rewritten). Every proven set is checked against git's own
 * range (the fake's): a wrong set is a failure, not a figure.
 *
 * - pushes a point: pushes ÷ (GraphQL points charged + one point per REST fallback);
 *   target ≥ 20, goal 25;
 * - the fetch rate against the points window: pushes an hour that one token's 5,000
 *   points cover, and the pushes a second this process proved;
 * - a simulated public hour: the points 100,000 pushes take on one token, against its
 *   5,000. BENCH_GQL_PUSHES pushes are simulated (default 20,000, about two minutes here;
 *   BENCH_GQL_PUSHES=100000 runs the whole hour) across BENCH_GQL_REPOS repositories.
 */

const PUSHES = Number(process.env.BENCH_GQL_PUSHES ?? 20_000);
const REPOS = Number(process.env.BENCH_GQL_REPOS ?? 5_000);
const BATCH = 2_000;
const WINDOW = 5_000;
const PUBLIC_HOUR = 100_000;

function rng(seed: number) {
  let s = seed;
  return (n: number) => {
    s = (s * 1103515245 + 12345) % 2 ** 31;
    return s % n;
  };
}

interface Repo {
  id: number;
  name: string;
  line: string[];
}

export function pushWorld(o: { repos: number; seed?: number }) {
  const d = inProcessGraphQL();
  const rand = rng(o.seed ?? 26);
  let seq = 0;
  let minute = 0;
  const commit = (parents: string[], skewMinutes = 0): FakeCommit => {
    minute++;
    const date = new Date(Date.UTC(2026, 0, 1) + (minute + skewMinutes) * 60_000).toISOString();
    return {
      sha: (++seq).toString(16).padStart(40, '0'),
      parents,
      message: `change ${seq}`,
      author: { name: 'Dev', email: 'dev@example.com', date },
      account: { id: 1 + (seq % 50), login: `dev${seq % 50}` },
    };
  };
  const repos: Repo[] = [];
  for (let i = 0; i < o.repos; i++) {
    const name = `bench/r${i}`;
    d.repos.setRepo({ id: 9_000_000 + i, full_name: name, default_branch: 'main' } as never);
    const line: string[] = [];
    const cs: FakeCommit[] = [];
    for (let k = 0; k < 30; k++) {
      const c = commit(line.length ? [line.at(-1)!] : []);
      cs.push(c);
      line.push(c.sha);
    }
    d.repos.addCommits(name, cs);
    repos.push({ id: 9_000_000 + i, name, line });
  }
  const size = () => {
    const p = rand(100);
    return p < 60 ? 1 : p < 90 ? 2 + rand(4) : 6 + rand(15);
  };
  const kinds = { linear: 0, merge: 0, force: 0 };
  /** The next push to a random repository: its before, head and kind. */
  function nextPush(): { repo: Repo; before: string; head: string; kind: keyof typeof kinds } {
    const repo = repos[rand(repos.length)]!;
    const before = repo.line.at(-1)!;
    const p = rand(100);
    const add = (parent: string, n: number, skew = 0) => {
      const cs: FakeCommit[] = [];
      let prev = parent;
      for (let k = 0; k < n; k++) {
        const c = commit([prev], skew);
        cs.push(c);
        prev = c.sha;
      }
      d.repos.addCommits(repo.name, cs);
      return cs.map((c) => c.sha);
    };
    let kind: keyof typeof kinds = 'linear';
    if (p < 10) {
      // A pull request merged: its side branch forked a few commits back, dated a day before.
      kind = 'merge';
      const fork = repo.line[Math.max(0, repo.line.length - 1 - rand(10))]!;
      const side = add(fork, Math.max(1, size() - 1), -1440);
      const m = commit([before, side.at(-1)!]);
      d.repos.addCommits(repo.name, [m]);
      repo.line.push(...side, m.sha);
    } else if (p < 15) {
      kind = 'force';
      const back = 1 + rand(3);
      const fork = repo.line[Math.max(0, repo.line.length - 1 - back)]!;
      const rewritten = add(fork, size());
      repo.line.push(...rewritten);
    } else repo.line.push(...add(before, size()));
    kinds[kind]++;
    return { repo, before, head: repo.line.at(-1)!, kind };
  }
  return { d, nextPush, kinds };
}

export async function benchCommitsGraphQL(
  _db: BenchDatabase,
  results: ResultLog,
): Promise<string[]> {
  const failures: string[] = [];
  const { d, nextPush, kinds } = pushWorld({ repos: REPOS });
  let fallbacks = 0;
  let proven = 0;
  let wrong = 0;
  let queries = 0;
  let requests = 0;
  let other = 0;
  const reasons: Record<string, number> = {};
  const t0 = performance.now();
  for (let done = 0; done < PUSHES; done += BATCH) {
    const n = Math.min(BATCH, PUSHES - done);
    const batch = Array.from({ length: n }, (_, i) => {
      const p = nextPush();
      return { ...p, key: `${done + i}` };
    });
    const pushes: RoundPush[] = batch.map((p) => ({
      key: p.key,
      fullName: p.repo.name,
      repositoryId: String(p.repo.id),
      head: p.head,
      base: p.before,
      baseFrom: 'before',
    }));
    const r = await proveAll(pushes, d.send, {
      limits: { ...DEFAULT_PROOF_LIMITS, cap: 250 },
      maxRequests: 149,
    });
    queries += r.queries;
    requests += r.requests;
    for (const p of batch) {
      const v = r.verdicts.get(p.key) as Final;
      if (v.kind === 'proven') {
        proven++;
        const truth = range(d.repos.commitGraph(p.repo.name)!, p.before, p.head).commits.map(
          (c) => c.sha,
        );
        const got = v.commits.map((c) => c.sha);
        if (got.length !== truth.length || got.some((s, i) => s !== truth[i] && !truth.includes(s)))
          wrong++;
      } else if (v.kind === 'fallback') {
        fallbacks++;
        const why = `${p.kind}: ${v.reason.replace(/[0-9a-f]{40}/g, '<sha>').replace(/\d+/g, 'N')}`;
        reasons[why] = (reasons[why] ?? 0) + 1;
      } else other++;
    }
  }
  const seconds = secondsSince(t0);
  const points = d.controls.pointsSpent();
  const spent = points + fallbacks;
  const perPoint = PUSHES / spent;
  results.record({
    bench: 'commits-graphql',
    metric: 'pushes a point (function-level diagnostic: proveAll in process)',
    value: perPoint,
    unit: 'pushes/point',
    target: { op: '>=', value: 20 },
    detail: {
      goal: 25,
      pushes: PUSHES,
      graphqlPoints: points,
      restFallbacks: fallbacks,
      queries,
      requests,
      kinds,
      proven,
      other,
      fallbackReasons: reasons,
    },
  });
  results.record({
    bench: 'commits-graphql',
    metric: 'wrong commit sets',
    value: wrong,
    unit: 'pushes',
    target: { op: '==', value: 0 },
  });
  if (wrong > 0) failures.push(`commits-graphql: ${wrong} proven sets differ from git's range`);
  results.record({
    bench: 'commits-graphql',
    metric: 'pushes an hour one token covers (function-level diagnostic)',
    value: WINDOW * perPoint,
    unit: 'pushes/h',
    target: { op: '>=', value: PUBLIC_HOUR },
    detail: { window: WINDOW, ratioToPublicHour: (WINDOW * perPoint) / PUBLIC_HOUR },
  });
  results.record({
    bench: 'commits-graphql',
    metric: 'proving rate (in process, zero latency)',
    value: PUSHES / seconds,
    unit: 'pushes/s',
    detail: { seconds, publicHourNeeds: PUBLIC_HOUR / 3600, pointsPerSecond: points / seconds },
  });
  const hourPoints = (spent * PUBLIC_HOUR) / PUSHES;
  results.record({
    bench: 'commits-graphql',
    metric: 'points for a public hour of 100,000 pushes (function-level diagnostic)',
    value: hourPoints,
    unit: 'points',
    target: { op: '<=', value: WINDOW },
    detail: { simulatedPushes: PUSHES, ratioToWindow: hourPoints / WINDOW },
  });
  return failures;
}
