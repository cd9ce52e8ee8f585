import { sql } from 'kysely';
import { beforeEach, describe, expect, it } from 'vitest';
import { type Exit, runBin } from '../support/cli.ts';
import {
  chain,
  freshCommitWorld,
  insertPushes,
  insertRepository,
  newSha,
  pushShas,
  pushState,
} from '../support/commit-world.ts';
import { useTestDatabase } from '../support/db.ts';
import { useFakeGitHub } from '../support/use-fake-github.ts';

const t = useTestDatabase();
const fake = useFakeGitHub();

/** The real executable, as an operator runs it (no TTY: one line per push). */
function spawnCommits(argv: string[], env: Record<string, string> = {}): Promise<Exit> {
  return runBin('commits', argv, {
    DATABASE_URL: t.url,
    GITHUB_API_URL: fake.url,
    GITHUB_MODE: 'live',
    LOG_LEVEL: 'warn',
    GITHUB_TOKEN: undefined,
    COMMITS_TRANSPORT: 'rest',
    ...env,
  });
}

beforeEach(async () => {
  await freshCommitWorld(t.db, fake);
});

async function states(): Promise<Record<string, number>> {
  const r = await sql<{ s: string; n: number }>`
    SELECT commits_state AS s, count(*)::int AS n FROM push_events GROUP BY 1`.execute(t.db);
  return Object.fromEntries(r.rows.map((x) => [x.s, x.n]));
}

const graphqlPosts = () => fake.requests.filter((r) => r.path === '/graphql');
const compares = () => fake.requests.filter((r) => r.path.includes('/compare/'));

describe('bin/commits', () => {
  it('with a token and COMMITS_TRANSPORT=graphql: one query for many pushes, no compare, exact', async () => {
    await insertRepository(t.db, 62, 'cli/gql-a');
    await insertRepository(t.db, 63, 'cli/gql-b');
    const a = chain(fake, 'cli/gql-a', 9);
    const b = chain(fake, 'cli/gql-b', 5);
    // eight one-commit pushes on one repository, one of four commits on another
    await insertPushes(t.db, [
      ...a.slice(1).map((head, i) => ({ repositoryId: 62, before: a[i]!, head })),
      { repositoryId: 63, before: b[0]!, head: b[4]! },
    ]);
    const r = await spawnCommits(['--limit', '20', '--json'], {
      COMMITS_TRANSPORT: 'graphql',
      GITHUB_TOKEN: `ghp_cli${Math.random().toString(36).slice(2)}`,
    });
    expect(r.err).toBe('');
    expect(r.code).toBe(0);
    const doc = JSON.parse(r.out);
    expect(doc).toMatchObject({
      limit: 20,
      transport: 'graphql',
      fetched: 9,
      requests: 0,
      queries: 1,
      points: 1,
      stoppedBy: 'nothing_due',
      outcomes: { complete: 9, partial: 0, gone: 0, failed: 0 },
      // the token's window (5,000 points) less the one point the batch spent
      graphqlPointsLeft: 4999,
    });
    expect(doc.pushes).toHaveLength(9);
    expect(graphqlPosts()).toHaveLength(1);
    expect(compares()).toHaveLength(0);
    expect(await states()).toEqual({ complete: 9 });
    for (let i = 1; i < a.length; i++) {
      expect(await pushShas(t.db, a[i]!)).toEqual([{ position: 0, sha: a[i] }]);
      expect(await pushState(t.db, a[i]!)).toMatchObject({ commit_count: 1 });
    }
    expect((await pushShas(t.db, b[4]!)).map((x) => x.sha)).toEqual(b.slice(1));
    expect(await pushState(t.db, b[4]!)).toMatchObject({ commit_count: 4 });
    const ledger = await sql<{ credential: string; points: number }>`
      SELECT credential, points FROM github_requests`.execute(t.db);
    expect(ledger.rows).toHaveLength(1);
    expect(ledger.rows[0]).toMatchObject({ points: 1 });
    expect(ledger.rows[0]!.credential).toMatch(/#graphql$/);
  });

  it('the GraphQL summary line counts queries and points; --limit caps the batch', async () => {
    await insertRepository(t.db, 64, 'cli/gql-line');
    const shas = chain(fake, 'cli/gql-line', 6);
    await insertPushes(
      t.db,
      shas.slice(1).map((head, i) => ({ repositoryId: 64, before: shas[i]!, head })),
    );
    const r = await spawnCommits(['--limit', '3'], {
      COMMITS_TRANSPORT: 'graphql',
      GITHUB_TOKEN: `ghp_cli${Math.random().toString(36).slice(2)}`,
    });
    expect(r.err).toBe('');
    expect(r.code).toBe(0);
    expect(await states()).toEqual({ complete: 3, pending: 2 });
    expect(compares()).toHaveLength(0);
    const lines = r.out.trim().split('\n');
    expect(lines, r.out).toHaveLength(4);
    for (const line of lines.slice(0, 3)) {
      expect(line).toMatch(
        /^cli\/gql-line refs\/heads\/main [0-9a-f]{7}\.\.\.[0-9a-f]{7}: complete 1\/1 commits$/,
      );
    }
    expect(lines[3]).toMatch(
      /^commits: 3\/3 fetched \(complete 3, partial 0, gone 0, failed 0, requests 0, queries 1, points 1\) — stopped: limit reached; commits budget left \d+; GraphQL points left 4999$/,
    );
  });

  it('COMMITS_TRANSPORT=rest: --limit 3 fetches exactly 3 pushes and prints a line each and a summary', async () => {
    await insertRepository(t.db, 60, 'cli/repo');
    const shas = chain(fake, 'cli/repo', 6);
    await insertPushes(
      t.db,
      shas.slice(1).map((head, i) => ({ repositoryId: 60, before: shas[i]!, head })),
    );
    const r = await spawnCommits(['--limit', '3']);
    expect(r.err).toBe('');
    expect(r.code).toBe(0);
    expect(fake.countedRequests).toBe(3);
    expect(await states()).toEqual({ complete: 3, pending: 2 });
    const lines = r.out.trim().split('\n');
    expect(lines, r.out).toHaveLength(4);
    for (const line of lines.slice(0, 3)) {
      expect(line).toMatch(
        /^cli\/repo refs\/heads\/main [0-9a-f]{7}\.\.\.[0-9a-f]{7}: complete 1\/1 commits \(200\)$/,
      );
    }
    expect(lines[3]).toMatch(
      /^commits: 3\/3 fetched \(complete 3, partial 0, gone 0, failed 0, requests 3\) — stopped: limit reached; commits budget left \d+$/,
    );
  });

  it('by GraphQL, the points left are the windows’ as GitHub last told them: spent elsewhere counts', async () => {
    await insertRepository(t.db, 65, 'cli/gql-left');
    const shas = chain(fake, 'cli/gql-left', 2);
    await insertPushes(t.db, [{ repositoryId: 65, before: shas[0]!, head: shas[1]! }]);
    // another process already spent most of this token's GraphQL hour
    fake.graphql.setRateLimit({ remaining: 40 });
    const r = await spawnCommits(['--limit', '5'], {
      COMMITS_TRANSPORT: 'graphql',
      GITHUB_TOKEN: `ghp_cli${Math.random().toString(36).slice(2)}`,
    });
    expect(r.code, r.err).toBe(0);
    expect(await states()).toEqual({ complete: 1 });
    const last = r.out.trim().split('\n').at(-1)!;
    // GitHub said 40 before the query; the query cost 1
    expect(last).toMatch(/; commits budget left \d+; GraphQL points left 39$/);
    expect(last).toContain('stopped: nothing more is due');
  });

  it('--json prints one document; nothing due stops normally', async () => {
    await insertRepository(t.db, 61, 'cli/json');
    const shas = chain(fake, 'cli/json', 2);
    await insertPushes(t.db, [
      { repositoryId: 61, ref: 'refs/heads/a', before: shas[0]!, head: shas[1]! },
      { repositoryId: 61, ref: 'refs/heads/b', before: shas[0]!, head: newSha() },
    ]);
    const r = await spawnCommits(['--limit', '10', '--json']);
    expect(r.code).toBe(0);
    const doc = JSON.parse(r.out);
    expect(doc).toMatchObject({
      limit: 10,
      fetched: 2,
      requests: 2,
      stoppedBy: 'nothing_due',
      transport: 'rest',
      queries: 0,
      points: 0,
      graphqlPointsLeft: null,
      outcomes: { complete: 1, gone: 1, partial: 0, failed: 0 },
    });
    expect(doc.pushes.map((p: { outcome: string }) => p.outcome).sort()).toEqual([
      'complete',
      'gone',
    ]);
    expect(doc.pushes[0].repository_id).toBe(61);
  });

  it('rejects a missing or bad --limit with exit 2 and says why; --help exits 0', async () => {
    const none = await spawnCommits([]);
    expect(none.code).toBe(2);
    expect(none.err).toContain('--limit N is required');
    const bad = await spawnCommits(['--limit', '-1']);
    expect(bad.code).toBe(2);
    expect(bad.err).toMatch(/--limit/);
    const help = await spawnCommits(['--help']);
    expect(help.code).toBe(0);
    expect(help.out).toContain('Usage: bin/commits --limit N [--json]');
    expect(help.out).toContain('COMMITS_TRANSPORT=graphql');
    expect(help.out).not.toMatch(/ADR|issue \d/i);
  });
});
