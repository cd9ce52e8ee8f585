import { afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { main } from '../../src/cli/sources.ts';
import { NO_CREDENTIAL_IN_USE } from '../../src/commits/deployment.ts';
import { UsageError } from '../../src/platform/errors.ts';
import { captureMain, runBin } from '../support/cli.ts';
import { useTestDatabase } from '../support/db.ts';

const t = useTestDatabase();

function run(argv: string[]) {
  return captureMain(main, argv);
}

function spawnSources(argv: string[]) {
  return runBin('sources', argv, { DATABASE_URL: t.url, GITHUB_MODE: 'live', LOG_LEVEL: 'silent' });
}

beforeAll(() => {
  vi.stubEnv('DATABASE_URL', t.url);
  vi.stubEnv('GITHUB_MODE', 'live');
  vi.stubEnv('LOG_LEVEL', 'silent');
});

afterEach(() => {
  vi.restoreAllMocks();
});

describe('bin/sources', () => {
  it('adds each kind once, and says so when it already exists', async () => {
    expect(await run(['add', 'public'])).toMatchObject({
      code: 0,
      out: expect.stringMatching(/^added source \d+: public \(live\)/),
    });
    expect((await run(['add', 'repo', 'octocat/Hello-World'])).out).toMatch(
      /added source \d+: repo octocat\/Hello-World/,
    );
    expect((await run(['add', 'org', 'github'])).out).toMatch(/added source \d+: org github/);
    expect((await run(['add', 'user', 'torvalds'])).out).toMatch(/added source \d+: user torvalds/);
    const again = await run(['add', 'repo', 'OctoCat/hello-world']);
    expect(again.code).toBe(0);
    expect(again.out).toMatch(/already exists: repo octocat\/Hello-World/);
    // The one-word form SOURCES uses is the same source.
    expect((await run(['add', 'repo:octocat/Hello-World'])).out).toMatch(
      /already exists: repo octocat\/Hello-World/,
    );
    const rows = await t.db
      .selectFrom('event_sources')
      .select(['kind', 'target', 'mode'])
      .orderBy('id')
      .execute();
    expect(rows).toEqual([
      { kind: 'public', target: null, mode: 'live' },
      { kind: 'repo', target: 'octocat/Hello-World', mode: 'live' },
      { kind: 'org', target: 'github', mode: 'live' },
      { kind: 'user', target: 'torvalds', mode: 'live' },
    ]);
  });

  it('lists sources as a table and as JSON', async () => {
    const table = await run(['list']);
    expect(table.code).toBe(0);
    const lines = table.out.trimEnd().split('\n');
    expect(lines[0]).toMatch(
      /^ID\s+KIND\s+TARGET\s+MODE\s+ENABLED\s+COMMITS\s+NEXT POLL\s+FAILURES\s+LAST ERROR$/,
    );
    // No process of this deployment has used a credential: on, and the pushes wait for one.
    expect(lines.find((l) => l.includes('octocat/Hello-World'))).toMatch(
      /repo\s+octocat\/Hello-World\s+live\s+yes\s+on, no credential\s+due\s+0\s+-/,
    );
    expect(lines.find((l) => l.includes('public'))).toMatch(
      /public\s+-\s+live\s+yes\s+on, no credential\s+/,
    );
    // Once a credential answered some process, plainly on.
    await t.db
      .insertInto('github_rate_limits')
      .values({ credential: 'token:0123abcd', quota: 5000, remaining: 4999, reset_at: new Date() })
      .execute();
    try {
      const on = (await run(['list'])).out.split('\n');
      expect(on.find((l) => l.includes('public'))).toMatch(/public\s+-\s+live\s+yes\s+on\s+due/);
    } finally {
      await t.db.deleteFrom('github_rate_limits').execute();
    }

    const json = JSON.parse((await run(['list', '--json'])).out) as {
      id: number;
      kind: string;
      enabled: boolean;
    }[];
    expect(json.map((s) => s.kind)).toEqual(['public', 'repo', 'org', 'user']);
    // Commits are on for every source, the public timeline included (ADR 0112).
    expect(json.map((s) => (s as unknown as { commits_enabled: boolean }).commits_enabled)).toEqual(
      [true, true, true, true],
    );
    expect(json[0]).toMatchObject({
      id: expect.any(Number),
      enabled: true,
      consecutive_failures: 0,
      last_error: null,
    });
  });

  it('disables and enables by id', async () => {
    const [src] = await t.db
      .selectFrom('event_sources')
      .select('id')
      .where('kind', '=', 'org')
      .execute();
    const id = String(src!.id);
    expect((await run(['disable', id])).out).toBe(`source ${id} disabled: org github (live)\n`);
    expect((await run(['list'])).out.split('\n').find((l) => l.includes('github '))).toMatch(
      /org\s+github\s+live\s+no\s+on, no credential\s+-/,
    );
    expect((await run(['enable', id])).out).toBe(`source ${id} enabled: org github (live)\n`);
    const row = await t.db
      .selectFrom('event_sources')
      .select('enabled')
      .where('id', '=', id)
      .executeTakeFirstOrThrow();
    expect(row.enabled).toBe(true);
  });

  it('turns commits off and on by id, and says it applies from now on', async () => {
    const [src] = await t.db
      .selectFrom('event_sources')
      .select('id')
      .where('kind', '=', 'repo')
      .execute();
    const id = String(src!.id);
    const commitsOf = async () =>
      (
        await t.db
          .selectFrom('event_sources')
          .select('commits_enabled')
          .where('id', '=', id)
          .executeTakeFirstOrThrow()
      ).commits_enabled;
    expect((await run(['commits', id, 'off'])).out).toBe(
      `source ${id} commits off: repo octocat/Hello-World (live); applies to pushes stored from now on\n`,
    );
    expect(await commitsOf()).toBe(false);
    expect((await run(['list'])).out.split('\n').find((l) => l.includes('Hello-World'))).toMatch(
      /live\s+yes\s+off\s+/,
    );
    // No process of the deployment has a credential: on is stored, and it says why it waits.
    expect(await run(['commits', id, 'on'])).toEqual({
      code: 0,
      out: `source ${id} commits on: repo octocat/Hello-World (live); applies to pushes stored from now on\n`,
      err: `sources: commits are not fetched yet: ${NO_CREDENTIAL_IN_USE}\n`,
    });
    expect(await commitsOf()).toBe(true);
  });

  it('refuses an unknown id with exit 1 and a clear message', async () => {
    expect(await run(['enable', '424242'])).toEqual({
      code: 1,
      out: '',
      err: 'sources: no source with id 424242 (see bin/sources list)\n',
    });
    expect(await run(['commits', '424242', 'on'])).toEqual({
      code: 1,
      out: '',
      err: 'sources: no source with id 424242 (see bin/sources list)\n',
    });
  });

  it.each([
    [[], /missing command/],
    [['frobnicate'], /unknown command "frobnicate"/],
    [['add'], /needs a kind/],
    [['add', 'team', 'x'], /unknown source kind "team"/],
    [['add', 'team:x'], /unknown source kind "team"/],
    [['add', 'repo:octocat'], /not OWNER\/NAME/],
    [['add', 'repo', 'octocat'], /not OWNER\/NAME/],
    [['add', 'user', 'bad-'], /not a GitHub login/],
    [['add', 'public', 'extra'], /takes no target/],
    [['add', 'org', 'a', 'b'], /unexpected argument "b"/],
    [['enable'], /missing source ID/],
    [['disable', 'x1'], /positive integer/],
    [['add', 'public', '--json'], /--json applies to "list" only/],
    [['list', '--color'], /Unknown option '--color'/],
    [['commits'], /missing source ID/],
    [['commits', '0', 'on'], /positive integer/],
    [['commits', '2'], /commits needs on or off/],
    [['commits', '2', 'yes'], /commits takes on or off \(got "yes"\)/],
    [['commits', '2', 'on', 'now'], /unexpected argument "now"/],
    [['commits', '2', 'on', '--json'], /--json applies to "list" only/],
  ])('refuses %j with usage', async (argv, says) => {
    const before = await t.db.selectFrom('event_sources').select('id').execute();
    const err = await main(argv as string[]).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UsageError);
    expect((err as UsageError).message).toMatch(says);
    expect((err as UsageError).message).toContain('Usage:');
    expect(await t.db.selectFrom('event_sources').select('id').execute()).toEqual(before);
  });

  it('runs as a real executable: exit 0, exit 2 with usage, exit 1 for an unknown id', async () => {
    const added = await spawnSources(['add', 'user', 'octocat']);
    expect(added).toMatchObject({
      code: 0,
      out: expect.stringMatching(/^added source \d+: user octocat \(live\)\n$/),
    });
    const bad = await spawnSources(['add', 'repo', 'no-slash']);
    expect(bad.code).toBe(2);
    expect(bad.err).toMatch(/^sources: repo "no-slash" is not OWNER\/NAME/);
    expect(bad.err).toContain('Usage:');
    const badCommits = await spawnSources(['commits', '1', 'maybe']);
    expect(badCommits.code).toBe(2);
    expect(badCommits.err).toMatch(/^sources: commits takes on or off \(got "maybe"\)/);
    const unknown = await spawnSources(['disable', '999999']);
    expect(unknown).toMatchObject({
      code: 1,
      err: 'sources: no source with id 999999 (see bin/sources list)\n',
    });
    const help = await spawnSources(['--help']);
    expect(help.code).toBe(0);
    expect(help.out).toMatch(/^Usage:\n {2}bin\/sources add public/);
  });
});
