import { performance } from 'node:perf_hooks';
import { sql } from 'kysely';
import { type CommitsCycleSummary, fetchCycle } from '../src/commits/cycle.ts';
import { copyChunks, copyFrom } from '../src/platform/db/copy.ts';
import type { Db } from '../src/platform/db/pool.ts';
import { storeCommits } from '../src/store/commits.ts';
import type { FakeCommit } from '../test/support/fake-compare.ts';
import { type FakeGitHub, startFakeGitHub } from '../test/support/fake-github.ts';
import type { BenchDatabase } from './lib/database.ts';
import { type BenchDeps, benchConfig, benchDeps } from './lib/github.ts';
import type { ResultLog } from './lib/results.ts';
import { secondsSince } from './lib/stats.ts';

/**
 * Commits (ADR 0071). Against a zero-latency fake:
 * - the fetch rate with 1, 2 and 4 concurrent runners (own clients and gate sessions, as
 *   separate processes) against the gate-serialized compare rate measured alone first
 *   (goal ≥ 90% with 4), and duplicate requests (a push's compare asked twice: must be 0);
 * - storing compare answers of 250 commits each (storeCommits: commits + push_commits,
 *   ON CONFLICT, one statement per push) against a COPY of the same rows: the ratio;
 * - bytes per stored commit in the commits table, heap and indexes (a push's list of them
 *   is a few columns of its push_events row, measured by the storage bench).
 */

const REPOS = Number(process.env.BENCH_COMMITS_REPOS ?? 200);
const PUSHES_PER_REPO = 10;
const COMMITS_PER_PUSH = 3;
const RUN_SECONDS = Number(process.env.BENCH_COMMITS_SECONDS ?? 15);
const CONCURRENCY = [1, 2, 4];
const STORE_PUSHES = Number(process.env.BENCH_COMMITS_STORE_PUSHES ?? 40);
const REPO_BASE = 6_000_000;

const sha = (repo: number, i: number) =>
  `${repo.toString(16).padStart(8, '0')}${i.toString(16).padStart(32, '0')}`;

function seedGraphs(fake: FakeGitHub): void {
  for (let r = 0; r < REPOS; r++) {
    const commits: FakeCommit[] = [];
    for (let i = 0; i <= PUSHES_PER_REPO * COMMITS_PER_PUSH; i++) {
      commits.push({
        sha: sha(r, i),
        parents: i === 0 ? [] : [sha(r, i - 1)],
        message: `bench commit ${i} of repository ${r}`,
        author: {
          name: `Dev ${i % 7}`,
          email: `dev${i % 7}@example.com`,
          date: '2026-11-30T10:00:00Z',
        },
        account: { id: 5_000_000 + (i % 7), login: `bench-dev-${i % 7}` },
      });
    }
    fake.addCommits(`bench-org/commits-${r}`, commits);
  }
}

async function seed(db: Db): Promise<void> {
  await sql`
    INSERT INTO repositories (id, full_name, default_branch, enrichment_state, enriched_at)
    SELECT ${REPO_BASE}::bigint + r, 'bench-org/commits-' || r, 'main', 'enriched', now()
    FROM generate_series(0, ${REPOS - 1}::int) r`.execute(db);
  await sql`
    INSERT INTO push_events (actor_id, repository_id, ref, before, head, created_at, payload,
      commits_state, commits_next_attempt_at)
    SELECT 1, ${REPO_BASE}::bigint + r, 'refs/heads/main',
      lpad(to_hex(r), 8, '0') || lpad(to_hex(p * ${COMMITS_PER_PUSH}), 32, '0'),
      lpad(to_hex(r), 8, '0') || lpad(to_hex((p + 1) * ${COMMITS_PER_PUSH}), 32, '0'),
      now(), '{}', 'pending', now() - interval '1 minute'
    FROM generate_series(0, ${REPOS - 1}::int) r, generate_series(0, ${PUSHES_PER_REPO - 1}::int) p`.execute(
    db,
  );
}

async function resetWork(db: Db): Promise<void> {
  await sql`
    UPDATE push_events SET commits_state = 'pending', commit_count = NULL, commits_attempts = 0,
      commits_claimed_until = NULL, commits_error = NULL,
      commits_next_attempt_at = now() - interval '1 minute'`.execute(db);
  await sql`TRUNCATE stored_commits, commit_fetch_turns, actors, github_requests,
    github_rate_limits`.execute(db);
  await sql`VACUUM ANALYZE push_events`.execute(db);
}

function duplicates(fake: FakeGitHub, from: number): number {
  const seen = new Map<string, number>();
  for (const r of fake.requests.slice(from)) {
    if (r.path.includes('/compare/')) seen.set(r.path, (seen.get(r.path) ?? 0) + 1);
  }
  return [...seen.values()].filter((n) => n > 1).length;
}

async function runner(deps: BenchDeps, until: number): Promise<number> {
  let processed = 0;
  let stop: CommitsCycleSummary['stoppedBy'] = 'cap';
  while (stop === 'cap' && performance.now() < until) {
    const s = await fetchCycle(deps, {
      maxPushes: 50,
      signal: AbortSignal.timeout(Math.max(0, until - performance.now())),
    });
    processed += s.processed;
    stop = s.stoppedBy;
  }
  return processed;
}

async function benchFetch(
  database: BenchDatabase,
  results: ResultLog,
  fake: FakeGitHub,
  clients: BenchDeps[],
): Promise<void> {
  const { db } = database;
  await seed(db);
  await resetWork(db);
  // The ceiling: compare requests through the gate and the ledger, one after another.
  const ceilingRequests = Math.min(REPOS * PUSHES_PER_REPO, 1000);
  let t0 = performance.now();
  for (let i = 0; i < ceilingRequests; i++) {
    const r = i % REPOS;
    const p = Math.floor(i / REPOS) % PUSHES_PER_REPO;
    await clients[0]!.github.request({
      purpose: 'commits',
      path: `/repos/bench-org/commits-${r}/compare/${sha(r, p * COMMITS_PER_PUSH)}...${sha(r, (p + 1) * COMMITS_PER_PUSH)}`,
    });
  }
  const ceiling = ceilingRequests / secondsSince(t0);
  results.record({
    bench: 'commits',
    metric: 'gate-serialized compare rate (ceiling)',
    value: ceiling,
    unit: 'req/s',
    detail: { requests: ceilingRequests },
  });
  for (const n of CONCURRENCY) {
    await resetWork(db);
    const from = fake.requests.length;
    const hitsBefore = fake.secondaryLimitHits;
    t0 = performance.now();
    const until = t0 + RUN_SECONDS * 1000;
    const processed = (await Promise.all(clients.slice(0, n).map((d) => runner(d, until)))).reduce(
      (a, b) => a + b,
      0,
    );
    const seconds = secondsSince(t0);
    const rate = processed / seconds;
    const detail = {
      runners: n,
      seconds,
      processed,
      requests: fake.requests.length - from,
      secondaryLimitHits: fake.secondaryLimitHits - hitsBefore,
    };
    const label = `${n} runner${n > 1 ? 's' : ''}`;
    results.record({
      bench: 'commits',
      metric: `${label}: pushes/s`,
      value: rate,
      unit: 'pushes/s',
      detail,
    });
    results.record({
      bench: 'commits',
      metric: `${label}: share of the gate ceiling`,
      value: (rate / ceiling) * 100,
      unit: '%',
      ...(n === 4 ? { target: { op: '>=' as const, value: 90 } } : {}),
      detail,
    });
    results.record({
      bench: 'commits',
      metric: `${label}: duplicate requests`,
      value: duplicates(fake, from),
      unit: 'pushes',
      target: { op: '==', value: 0 },
      detail,
    });
  }
}

/** STORE_PUSHES answers of 250 commits each, as parseCompare returns them. */
function answers(base: number) {
  return Array.from({ length: STORE_PUSHES }, (_, p) => ({
    push: {
      repositoryId: String(base + p),
      ref: 'refs/heads/main',
      before: sha(base + p, 0),
      head: sha(base + p, 250),
    },
    commits: Array.from({ length: 250 }, (_, i) => ({
      sha: sha(base + p, i + 1),
      authorName: `Dev ${i % 7}`,
      authorEmail: `dev${i % 7}@example.com`,
      authoredAt: new Date('2026-11-30T10:00:00Z'),
      authorId: String(5_000_000 + (i % 7)),
      authorLogin: `bench-dev-${i % 7}`,
      committerName: `Dev ${i % 7}`,
      committerEmail: `dev${i % 7}@example.com`,
      committedAt: new Date('2026-11-30T10:00:00Z'),
      committerId: String(5_000_000 + (i % 7)),
      committerLogin: `bench-dev-${i % 7}`,
      message: `Change ${i}: a commit message of about the length of a real one, with a body line`,
      parents: [sha(base + p, i)],
    })),
  }));
}

async function pushRows(db: Db, pushes: ReturnType<typeof answers>): Promise<void> {
  await db
    .insertInto('push_events')
    .values(
      pushes.map((a) => ({
        actor_id: '1',
        repository_id: a.push.repositoryId,
        ref: a.push.ref,
        before: a.push.before,
        head: a.push.head,
        created_at: new Date(),
        payload: '{}',
      })),
    )
    .execute();
}

async function benchStore(database: BenchDatabase, results: ResultLog): Promise<void> {
  const { db } = database;
  const viaStore = answers(7_000_000);
  const viaCopy = answers(8_000_000);
  await pushRows(db, viaStore);
  await pushRows(db, viaCopy);
  const commits = STORE_PUSHES * 250;

  let t0 = performance.now();
  for (const a of viaStore) {
    await db.transaction().execute((trx) => storeCommits(trx, [a], { emails: 'hash' }));
  }
  const storeSeconds = secondsSince(t0);

  const client = await database.pool.connect();
  try {
    t0 = performance.now();
    await client.query('BEGIN');
    const c: unknown[][] = [];
    const pc: unknown[][] = [];
    for (const a of viaCopy) {
      a.commits.forEach((x, i) => {
        c.push([
          a.push.repositoryId,
          x.sha,
          x.authorName,
          x.authorEmail,
          x.authorId,
          x.authorLogin,
          x.committerName,
          x.committerEmail,
          x.committerId,
          x.committedAt,
          x.message,
          x.authoredAt,
          `{${x.parents.join(',')}}`,
        ]);
        pc.push([a.push.repositoryId, a.push.ref, a.push.before, a.push.head, i, x.sha]);
      });
    }
    await copyFrom(
      client,
      `COPY commits (repository_id, sha, author_name, author_email, author_id, author_login,
        committer_name, committer_email, committer_id, committed_at, message, authored_at, parents) FROM STDIN`,
      copyChunks(c),
    );
    await copyFrom(
      client,
      'COPY push_commits (repository_id, ref, before, head, position, sha) FROM STDIN',
      copyChunks(pc),
    );
    await client.query('COMMIT');
  } finally {
    client.release();
  }
  const copySeconds = secondsSince(t0);
  results.record({
    bench: 'commits',
    metric: 'store compare answers (250 commits each)',
    value: commits / storeSeconds,
    unit: 'commits/s',
    detail: { pushes: STORE_PUSHES, commits, seconds: storeSeconds },
  });
  results.record({
    bench: 'commits',
    metric: 'COPY of the same commit rows',
    value: commits / copySeconds,
    unit: 'commits/s',
    detail: { commits, seconds: copySeconds },
  });
  results.record({
    bench: 'commits',
    metric: 'store / COPY time',
    value: storeSeconds / copySeconds,
    unit: '×',
  });

  await sql`VACUUM ANALYZE commits, push_events`.execute(db);
  const size = await sql<{ c: string; n: string }>`
    SELECT pg_total_relation_size('commits') AS c,
      (SELECT count(*) FROM commits) AS n`.execute(db);
  const row = size.rows[0]!;
  const n = Number(row.n);
  results.record({
    bench: 'commits',
    metric: 'bytes per stored commit (commits table)',
    value: Number(row.c) / n,
    unit: 'bytes',
    detail: {
      commits: n,
    },
  });
}

export async function benchCommits(database: BenchDatabase, results: ResultLog): Promise<string[]> {
  const fake = await startFakeGitHub({ tokenLimit: 10_000_000 });
  const config = benchConfig(database, fake.url);
  const clients = Array.from({ length: Math.max(...CONCURRENCY) }, (_, i) =>
    benchDeps(database, config, `bench:commits-${i + 1}`),
  );
  try {
    seedGraphs(fake);
    await benchFetch(database, results, fake, clients);
    await sql`TRUNCATE push_events, stored_commits, commit_fetch_turns`.execute(database.db);
    await benchStore(database, results);
    return [];
  } finally {
    for (const c of clients) await c.github.close();
    await fake.close();
  }
}
