import { afterEach, describe, expect, it } from 'vitest';
import { main as enrichMain } from '../../src/cli/enrich.ts';
import { UsageError } from '../../src/platform/errors.ts';
import { quoted } from '../../src/platform/quote.ts';
import { addSource } from '../../src/store/sources.ts';
import { runBin } from '../support/cli.ts';
import { useTestDatabase } from '../support/db.ts';
import { randomToken } from '../support/github-client.ts';
import { pushEvent, userProfile } from '../support/github-factories.ts';
import { adminQuery } from '../support/postgres-server.ts';
import { useFakeGitHub } from '../support/use-fake-github.ts';
import { insertPending } from './enrichment-fixtures.ts';

/**
 * A careless or hostile operator (the smaller items): a huge value is refused in
 * one bounded line, `--limit -1` says what is wrong with -1, and a database connection
 * that drops mid-command leaves a result line for what was done and one line naming the
 * database, exit 1 — never a pg error object or a stack.
 */

const t = useTestDatabase();
const fake = useFakeGitHub();

afterEach(async () => {
  await adminQuery(t.adminUrl, `ALTER DATABASE ${t.name} ALLOW_CONNECTIONS true`);
});

function spawn(name: string, argv: string[]) {
  return runBin(name, argv, {
    DATABASE_URL: t.url,
    GITHUB_API_URL: fake.url,
    GITHUB_MODE: 'live',
    GITHUB_TOKEN: randomToken(),
    GITHUB_TOKENS: undefined,
    LOG_LEVEL: 'silent',
  });
}

/** What an outage does: no new connection, every open one of the command cut. */
async function takeDatabaseAway(): Promise<void> {
  await adminQuery(t.adminUrl, `ALTER DATABASE ${t.name} ALLOW_CONNECTIONS false`);
  await adminQuery(
    t.adminUrl,
    `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
      WHERE datname = $1 AND application_name LIKE 'gpi-%'`,
    [t.name],
  );
}

describe('a hostile value is quoted, bounded', () => {
  it('quoted(): JSON syntax, at most 80 characters, then the real length', () => {
    expect(quoted('octocat')).toBe('"octocat"');
    expect(quoted('a"b\n')).toBe('"a\\"b\\n"');
    expect(quoted('x'.repeat(100_000))).toBe(`"${'x'.repeat(80)}"…(100000 characters)`);
    // Code points, never half a surrogate pair.
    expect(quoted('😀'.repeat(81))).toBe(`"${'😀'.repeat(80)}"…(81 characters)`);
  });

  it('bin/sources add user <100,000 characters> is refused in one bounded line (exit 2)', async () => {
    const login = 'a'.repeat(100_000);
    const r = await spawn('sources', ['add', 'user', login]);
    expect(r.code).toBe(2);
    expect(r.err).toContain(`user "${'a'.repeat(80)}"…(100000 characters) is not a GitHub login`);
    expect(r.err.length).toBeLessThan(3_000);
    expect(r.out).toBe('');
  });

  it('a 100,000-character unknown flag is cut in the usage error', async () => {
    const err = await enrichMain([`--${'z'.repeat(100_000)}`]).catch((e) => e);
    expect(err).toBeInstanceOf(UsageError);
    expect(err.message.split('\n')[0]!.length).toBeLessThan(400);
    expect(err.message).toMatch(/…\(\d+ characters\)/);
  });
});

describe('--limit', () => {
  it('bin/enrich --limit -1 says "--limit must be a positive integer", exit 2 (not "ambiguous")', async () => {
    const r = await spawn('enrich', ['--limit', '-1']);
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/^enrich: --limit must be a positive integer \(got "-1"\)/);
    expect(r.err).not.toMatch(/ambiguous/);
    expect(fake.requests).toHaveLength(0);
  });

  it.each([['-1'], ['abc'], ['0'], ['-0.5'], ['1e3']])(
    '--limit %s (separate value) is a usage error naming it',
    async (v) => {
      const err = await enrichMain(['--limit', v]).catch((e) => e);
      expect(err).toBeInstanceOf(UsageError);
      expect(err.message).toMatch(
        new RegExp(
          `^--limit must be a positive integer \\(got ${JSON.stringify(v).replace(/[.]/g, '\\.')}\\)`,
        ),
      );
    },
  );
});

describe('a database connection dropped mid-command', () => {
  it('bin/enrich prints the entities done and its summary, then one line naming the database (exit 1)', async () => {
    const actors = await insertPending(t.db, 'actor', 5, { firstId: 800 });
    for (const id of actors) fake.setUser(userProfile({ id, login: `user-${id}` }));
    let seen = 0;
    fake.onRequest = async () => {
      seen++;
      if (seen === 3) await takeDatabaseAway();
    };

    const r = await spawn('enrich', ['--limit', '5', '--class', 'actor']);

    expect(r.code).toBe(1);
    const lines = r.out.trim().split('\n');
    expect(lines.slice(0, 2).every((l) => / enriched \(200\)$/.test(l))).toBe(true);
    expect(lines[2]).toMatch(
      /^enrich: 2\/5 done \(enriched 2,.*\) — stopped: an error: the database connection failed \(/,
    );
    expect(lines).toHaveLength(3);
    expect(r.err.trim().split('\n')).toEqual([
      expect.stringMatching(
        /^enrich: the database connection failed \(.+\); check that Postgres is up and DATABASE_URL$/,
      ),
    ]);
  });

  it('bin/ingest prints the runs committed before it, then one line naming the database (exit 1)', async () => {
    const { source: a } = await addSource(t.db, { kind: 'repo', target: 'drop/first' }, 'live');
    const { source: b } = await addSource(t.db, { kind: 'repo', target: 'drop/second' }, 'live');
    fake.addEvents('repo:drop/first', [pushEvent()]);
    fake.addEvents('repo:drop/second', [pushEvent()]);
    fake.onRequest = async (req) => {
      if (req.path === '/repos/drop/second/events') await takeDatabaseAway();
    };

    const r = await spawn('ingest', []);

    expect(r.code).toBe(1);
    expect(r.out.trim().split('\n')).toEqual([
      expect.stringMatching(
        new RegExp(`^source ${a.id} repo drop/first: completed: 1 event seen, 1 created`),
      ),
    ]);
    expect(r.err.trim().split('\n')).toEqual([
      expect.stringMatching(
        /^ingest: stopped after 1 source: the database connection failed \(.+\)/,
      ),
    ]);
    expect(r.out + r.err).not.toContain(String(b.id) + ' repo drop/second: completed');
  });
});
