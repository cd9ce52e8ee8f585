import { sql } from 'kysely';
import { createGitHubClient } from '../../src/budget/client.ts';
import type { GitHubClient } from '../../src/budget/client-types.ts';
import type { FetchDeps } from '../../src/commits/outcomes.ts';
import { fixedClock } from '../../src/platform/clock.ts';
import { loadConfig } from '../../src/platform/config/config.ts';
import type { Db } from '../../src/platform/db/pool.ts';
import { createLogger } from '../../src/platform/log.ts';
import type { FakeCommit } from './fake-compare.ts';
import type { FakeGitHub } from './fake-github.ts';

/** Commit graphs in the fake GitHub and pending pushes in the database (not a test file). */

let seq = 0;

/** A fresh, unique 40-hex sha. */
export function newSha(): string {
  seq++;
  return (0xc0ffee00000 + seq).toString(16).padStart(40, '0');
}

export const ZERO = '0'.repeat(40);

/**
 * Repositories inserted by insertRepository, by lower(full name): chain() files the
 * fake's profile with the same id, so GraphQL's `databaseId` agrees with the row (the
 * batched fetcher refuses an answer about another repository).
 */
const insertedRepos = new Map<
  string,
  { id: number; fullName: string; defaultBranch: string | null }
>();

/**
 * `n` commits in a line on top of `parent` (null: a root), filed in the fake under
 * `fullName`; returns their shas oldest first. Every third one is linked to no account.
 */
export function chain(
  fake: FakeGitHub,
  fullName: string,
  n: number,
  parent: string | null = null,
  o: { branch?: string; author?: (i: number) => FakeCommit['account'] } = {},
): string[] {
  const commits: FakeCommit[] = [];
  let prev = parent;
  for (let i = 0; i < n; i++) {
    const sha = newSha();
    commits.push({
      sha,
      parents: prev ? [prev] : [],
      message: `change ${i}\n\nbody of ${sha}`,
      author: {
        name: `Dev ${i % 5}`,
        email: ` Dev${i % 5}@Example.com `,
        date: '2026-11-30T10:00:00Z',
      },
      account: o.author ? o.author(i) : { id: 7000 + (i % 5), login: `dev${i % 5}` },
    });
    prev = sha;
  }
  fake.addCommits(fullName, commits);
  if (o.branch && prev) fake.setBranch(fullName, o.branch, prev);
  const row = insertedRepos.get(fullName.toLowerCase());
  if (row) {
    fake.setRepo({
      id: row.id,
      full_name: row.fullName,
      default_branch: row.defaultBranch ?? fake.commitGraph(fullName)?.defaultBranch ?? 'main',
    });
  }
  return commits.map((c) => c.sha);
}

export async function insertRepository(
  db: Db,
  id: number,
  fullName: string,
  o: { defaultBranch?: string | null; state?: 'pending' | 'enriched' | 'failed' | 'gone' } = {},
): Promise<void> {
  const state = o.state ?? 'enriched';
  insertedRepos.set(fullName.toLowerCase(), {
    id,
    fullName,
    defaultBranch: o.defaultBranch === undefined ? 'main' : o.defaultBranch,
  });
  await db
    .insertInto('repositories')
    .values({
      id: String(id),
      full_name: fullName,
      default_branch: o.defaultBranch === undefined ? 'main' : o.defaultBranch,
      enrichment_state: state,
      enriched_at: state === 'enriched' ? new Date() : null,
      next_attempt_at: new Date(Date.now() + 3600_000),
    })
    .execute();
}

export interface PushSeed {
  repositoryId: number;
  ref?: string;
  before: string;
  head: string;
  state?: 'pending' | 'none' | 'skipped';
  /** When the push became due (default: a minute ago). */
  dueAt?: Date;
}

export async function insertPushes(db: Db, seeds: PushSeed[]): Promise<void> {
  const rows = seeds.map((s) => ({
    actor_id: '1',
    repository_id: String(s.repositoryId),
    ref: s.ref ?? 'refs/heads/main',
    before: s.before,
    head: s.head,
    created_at: s.dueAt ?? new Date(Date.now() - 60_000),
    payload: JSON.stringify({ ref: s.ref ?? 'refs/heads/main', before: s.before, head: s.head }),
    commits_state: s.state ?? 'pending',
    commits_next_attempt_at:
      (s.state ?? 'pending') === 'pending' ? (s.dueAt ?? new Date(Date.now() - 60_000)) : null,
  }));
  for (let i = 0; i < rows.length; i += 2000) {
    await db
      .insertInto('push_events')
      .values(rows.slice(i, i + 2000))
      .execute();
  }
}

export async function pushState(db: Db, head: string, ref = 'refs/heads/main') {
  const r = await sql<{
    commits_state: string;
    commit_count: number | null;
    commits_attempts: number;
    commits_claimed_until: Date | null;
    commits_error: string | null;
  }>`SELECT commits_state, commit_count, commits_attempts, commits_claimed_until, commits_error
     FROM push_events WHERE head = ${head} AND ref = ${ref}`.execute(db);
  return r.rows[0]!;
}

/** The push's commits in position order. */
export async function pushShas(db: Db, head: string, ref = 'refs/heads/main') {
  const r = await sql<{ position: number; sha: string }>`
    SELECT position, sha FROM push_commits WHERE head = ${head} AND ref = ${ref}
    ORDER BY position`.execute(db);
  return r.rows;
}

/**
 * A commits test's fresh start: no pushes, commits, entities or ledger rows (and the
 * tables in `extra`), GitHub's hour half-way through, as a running system would meet it.
 */
export async function freshCommitWorld(db: Db, fake: FakeGitHub, extra: string[] = []) {
  const tables = [
    'push_events',
    'stored_commits',
    'commit_fetch_turns',
    'actors',
    'repositories',
    'github_requests',
    'github_rate_limits',
    'budget_waits',
    ...extra,
  ];
  await sql`TRUNCATE ${sql.join(tables.map((name) => sql.table(name)))}`.execute(db);
  fake.setRateLimit({ resetAt: new Date(Date.now() + 1800_000) });
}

export interface CommitFetcherOptions {
  env?: Record<string, string>;
  logger?: FetchDeps['logger'];
}

/**
 * Fetcher deps against the fake GitHub on one fresh token, with a fixed clock, for a
 * commits test file: `defaults` are the file's settings (its env, its answer timeout, its
 * worker id). Every client it makes is closed by `close()`, to be called after each test.
 */
export function commitFetchers(
  t: { db: Db; url: string },
  fake: FakeGitHub,
  defaults: { env?: Record<string, string>; responseTimeoutMs: number; workerId: string },
) {
  const clients: GitHubClient[] = [];
  return {
    fetcher(o: CommitFetcherOptions = {}): FetchDeps & { clock: ReturnType<typeof fixedClock> } {
      const base = loadConfig({
        DATABASE_URL: t.url,
        GITHUB_API_URL: fake.url,
        GITHUB_TOKEN: `ghp_commits${Math.random().toString(36).slice(2)}`,
        LOG_LEVEL: 'silent',
        // The policy these tests' expectations were written for (an in-process config never
        // takes the database's recorded value).
        COMMIT_EMAILS: 'hash',
        ...defaults.env,
        ...o.env,
      });
      const config = {
        ...base,
        github: { ...base.github, responseTimeoutMs: defaults.responseTimeoutMs },
      };
      const clock = fixedClock(new Date());
      const logger = o.logger ?? createLogger('silent');
      const github = createGitHubClient({ config, db: t.db, databaseUrl: t.url, logger, clock });
      clients.push(github);
      return { config, db: t.db, github, logger, workerId: defaults.workerId, clock };
    },
    close: () => Promise.all(clients.splice(0).map((c) => c.close())),
  };
}
