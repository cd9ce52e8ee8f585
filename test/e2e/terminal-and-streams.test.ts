import { randomBytes } from 'node:crypto';
import net from 'node:net';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { insertPending } from '../integration/enrichment-fixtures.ts';
import { type Child, killAll, spawnBin } from '../recovery/world.ts';
import { runBin } from '../support/cli.ts';
import { useTestDatabase } from '../support/db.ts';
import { type EmbeddedEnv, freshEmbeddedEnv } from '../support/embedded-env.ts';
import { pushEvent, userProfile } from '../support/github-factories.ts';
import { adminQuery, withDatabase } from '../support/postgres-server.ts';
import { runInPty, visibleEscapes } from '../support/pty.ts';
import { useFakeGitHub } from '../support/use-fake-github.ts';

/**
 * The terminal as a new user meets it: results on stdout and logs on stderr at
 * every level (item 2), readable output and a progress bar that owns its line on a TTY
 * (item 3), "database not set up" before bin/setup (item 5), a quiet second setup (item 6).
 * Every command is the real executable.
 */

const fake = useFakeGitHub();
const children: Child[] = [];
afterAll(() => killAll(children));

const logLines = (stderr: string) => stderr.split('\n').filter(Boolean);

describe('stdout is for results, stderr for logs (zero-config path, LOG_LEVEL=trace)', () => {
  let e: EmbeddedEnv;
  beforeAll(async () => {
    e = await freshEmbeddedEnv({
      GITHUB_MODE: 'live',
      GITHUB_API_URL: fake.url,
      LOG_LEVEL: 'trace',
      SOURCES: 'public',
    });
    const setup = await runBin('setup', [], e.env);
    expect(setup.code, setup.err).toBe(0);
    expect(setup.out).toMatch(/^setup: \d+ migration\(s\) applied, .*\n$/);
  }, 120_000);
  afterAll(async () => {
    await killAll(children.splice(0));
    await e?.cleanup();
  });

  // Each: the command, how to read its stdout, and what its stdout must hold.
  const commands: [string, string[], (out: string) => void][] = [
    ['status', ['--json'], (out) => expect(JSON.parse(out)).toHaveProperty('sources')],
    [
      'sources',
      ['list', '--json'],
      (out) => expect(JSON.parse(out)).toMatchObject([{ kind: 'public' }]),
    ],
    [
      'ingest',
      ['--force', '--json'],
      (out) => expect(JSON.parse(out)).toMatchObject([{ outcome: 'completed' }]),
    ],
    [
      'enrich',
      ['--limit', '2', '--json'],
      (out) => expect(JSON.parse(out)).toMatchObject({ limit: 2 }),
    ],
    ['reconcile', ['--json'], (out) => expect(JSON.parse(out)).toHaveProperty('classes')],
    ['db', ['status', '--json'], (out) => expect(JSON.parse(out)).toMatchObject({ running: true })],
    ['setup', [], (out) => expect(out).toBe('setup: nothing to do, the database is up to date\n')],
  ];

  it('a command that starts and stops the embedded server prints only its JSON', async () => {
    const r = await runBin('status', ['--json'], e.env);
    expect(r.code, r.err).toBe(0);
    expect(JSON.parse(r.out)).toHaveProperty('sources');
    const events = logLines(r.err).map((l) => JSON.parse(l).event);
    expect(events).toEqual(expect.arrayContaining(['db.embedded_started', 'db.embedded_stopped']));
  });

  it.each(commands)(
    'bin/%s %s: stdout parses as its result; every stderr line is a JSON log line',
    async (name, argv, check) => {
      fake.addEvents('public', [pushEvent(), pushEvent()]);
      for (let i = 0; i < 2; i++) fake.setUser(userProfile({ id: 9_000 + i, login: `u${i}` }));
      const holder = children.find((c) => c.process.exitCode === null);
      if (!holder) {
        // A web process holds the server from here on, as in a real session.
        const web = spawnBin('web', { ...e.env, HTTP_PORT: '0' });
        children.push(web);
        await web.waitForLine((l) => l.event === 'web.listening', 'web.listening', 60_000);
      }
      const r = await runBin(name, argv, e.env);
      expect(r.code, r.err).toBe(0);
      check(r.out);
      for (const line of logLines(r.err)) expect(JSON.parse(line)).toHaveProperty('level');
    },
  );

  it('the long-running processes write nothing to stdout either', async () => {
    // Idle jobs log job.completed at debug: the first one is waited for.
    const worker = spawnBin('worker', { ...e.env, TICK_SECONDS: '1', LOG_LEVEL: 'debug' });
    children.push(worker);
    await worker.waitForLine((l) => l.event === 'job.completed', 'job.completed', 60_000);
    worker.process.kill('SIGTERM');
    expect(await worker.exited).toEqual({ code: 0, signal: null });
    expect(worker.stdout.join('')).toBe('');
    expect(worker.lines.some((l) => l.level === 'debug' || l.level === 'trace')).toBe(true);
    const web = children[0]!;
    expect(web.stdout.join('')).toBe('');
  }, 180_000);
});

describe('before bin/setup', () => {
  const { adminUrl, runId } = inject('testDb');
  const name = `gpi_${runId}_empty_${randomBytes(3).toString('hex')}`;
  const url = withDatabase(adminUrl, name);
  beforeAll(() => adminQuery(adminUrl, `CREATE DATABASE ${name}`));
  afterAll(async () => {
    await killAll(children.splice(0));
    await adminQuery(adminUrl, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  });
  const env = { DATABASE_URL: url, GITHUB_MODE: 'fixture', LOG_LEVEL: 'info' };

  it.each([
    ['status', []],
    ['sources', ['list']],
    ['sources', ['add', 'user', 'torvalds']],
    ['ingest', []],
    ['enrich', ['--limit', '1']],
    ['reconcile', []],
    ['worker', []],
    ['backfill', ['--gaps']],
  ])('bin/%s %s says "database not set up: run bin/setup" and exits 1', async (cmd, argv) => {
    const r = await runBin(cmd, argv, env);
    expect(r).toMatchObject({ code: 1, out: '' });
    expect(r.err).toBe(`${cmd}: database not set up: run bin/setup\n`);
  });

  it('bin/web answers 503 with the same words on /status, / and /metrics', async () => {
    const web = spawnBin('web', { ...env, HTTP_PORT: '0' });
    children.push(web);
    const url = String(
      (await web.waitForLine((l) => l.event === 'web.listening', 'web.listening')).url,
    );
    for (const path of ['/status', '/', '/metrics']) {
      const res = await fetch(`${url}${path}`);
      expect(res.status, path).toBe(503);
      expect(await res.json()).toEqual({ error: 'database not set up: run bin/setup' });
    }
    expect((await fetch(`${url}/readyz`)).status).toBe(503);
    expect(web.lines.filter((l) => l.level === 'error')).toEqual([]);
  });
});

describe('on a terminal', () => {
  const t = useTestDatabase();
  const env = () => ({
    DATABASE_URL: t.url,
    GITHUB_MODE: 'live',
    GITHUB_API_URL: fake.url,
    GITHUB_TOKEN: undefined,
    LOG_LEVEL: 'debug',
    LOG_FORMAT: undefined,
    NO_COLOR: undefined,
  });

  it('bin/setup a second time says nothing at info, and prints that nothing changed', async () => {
    const first = await runBin('setup', [], { ...env(), LOG_LEVEL: 'info' });
    expect(first.code, first.err).toBe(0);
    // The template is migrated but was never set up: its settings are recorded now (ADR 0125).
    expect(first.out).toBe(
      'setup: 1 source(s) added (public), stored-data settings COMMIT_EMAILS=gharchive, COMMITS_MAX_PER_PUSH=250\n',
    );
    const second = await runBin('setup', [], { ...env(), LOG_LEVEL: 'info' });
    expect(second).toEqual({
      code: 0,
      out: 'setup: nothing to do, the database is up to date\n',
      err: '',
    });
  });

  it('an expected failure (GitHub answers 503) is one log line without a stack; debug adds it', async () => {
    const runFailed = async (level: string) => {
      fake.fail({ path: '/events', status: 503 });
      const r = await runBin('ingest', ['--force'], {
        ...env(),
        LOG_LEVEL: level,
        LOG_FORMAT: 'json',
      });
      expect(r.code).toBe(1);
      const lines = r.err
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l));
      const failed = lines.filter((l) => l.event === 'ingestion.run_failed');
      expect(failed).toHaveLength(1);
      return failed[0];
    };
    const info = await runFailed('info');
    expect(info.err).toMatchObject({
      type: 'GitHubUnavailable',
      code: 'GITHUB_UNAVAILABLE',
      status: 503,
    });
    expect(info.err.stack).toBeUndefined();
    expect(info.err.message).toBeUndefined(); // the line's own message says it
    expect(info.msg).toMatch(/GitHub unavailable on \/events/);
    const debug = await runFailed('debug');
    expect(debug.err.stack).toMatch(/^GitHubUnavailable: GitHub unavailable on \/events/);
  });

  it('GitHub unreachable is one line at info naming the URL and what to check; debug adds the stack', async () => {
    // A port nothing listens on: connection refused, the way a fake that is not running fails.
    const closed = await new Promise<number>((resolve) => {
      const srv = net.createServer();
      srv.listen(0, '127.0.0.1', () => {
        const port = (srv.address() as net.AddressInfo).port;
        srv.close(() => resolve(port));
      });
    });
    const apiUrl = `http://127.0.0.1:${closed}`;
    const runFailed = async (level: string) => {
      const r = await runBin('ingest', ['--force'], {
        ...env(),
        GITHUB_API_URL: apiUrl,
        LOG_LEVEL: level,
        LOG_FORMAT: 'json',
      });
      expect(r.code).toBe(1);
      const lines = r.err
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l));
      const failed = lines.filter((l) => l.event === 'ingestion.run_failed');
      expect(failed).toHaveLength(1);
      return failed[0];
    };
    const info = await runFailed('info');
    expect(info.err).toMatchObject({ type: 'GitHubUnreachable', code: 'GITHUB_UNREACHABLE' });
    expect(info.err.stack).toBeUndefined();
    expect(info.msg).toContain(`GitHub unreachable at ${apiUrl}`);
    expect(info.msg).toContain('check GITHUB_API_URL or the network');
    const debug = await runFailed('debug');
    expect(debug.err.stack).toMatch(/^GitHubUnreachable: GitHub unreachable at/);
  });

  it('log lines are readable lines (LOG_FORMAT=auto), JSON with LOG_FORMAT=json', async () => {
    fake.addEvents('public', [pushEvent(), pushEvent()]);
    const r = await runInPty('bin/ingest --force', env());
    expect(r.code, r.raw).toBe(0);
    const logs = r.screen.filter((l) => /^\d\d:\d\d:\d\d (DEBUG|INFO |WARN |ERROR)/.test(l));
    expect(logs.some((l) => / DEBUG .*github\.request/.test(l))).toBe(true);
    expect(logs.some((l) => / INFO {2}run \d+ completed/.test(l))).toBe(true);
    expect(r.screen.some((l) => l.startsWith('{'))).toBe(false);
    expect(r.screen).toContainEqual(
      expect.stringMatching(/^source \d+ public: completed: 2 events seen/),
    );

    const json = await runInPty('bin/ingest --force', { ...env(), LOG_FORMAT: 'json' });
    expect(json.code, json.raw).toBe(0);
    expect(json.screen.some((l) => l.startsWith('{"level":"debug"'))).toBe(true);
  });

  it("the enrich progress bar owns its line, log lines appear above it, and its counts are the summary's", async () => {
    // Five profiles fetched once, then due again: the second pass is five 304s, the case
    // where the bar used to say "enriched 5" and the summary "enriched 0, not modified 5".
    await sql`TRUNCATE actors, repositories, enrichment_attempts`.execute(t.db);
    const ids = await insertPending(t.db, 'actor', 5, { firstId: 61_000 });
    for (const id of ids) fake.setUser(userProfile({ id, login: `user-${id}` }));
    const firstPass = await runBin('enrich', ['--limit', '5'], env());
    expect(firstPass.out).toMatch(/enriched 5, not modified 0/);
    await sql`UPDATE actors SET enriched_at = now() - interval '30 days'`.execute(t.db);

    const r = await runInPty('bin/enrich --limit 5', env());
    expect(r.code, r.raw).toBe(0);
    // What was drawn: a bar after each entity, each time on a cleared line.
    const bars = [
      ...visibleEscapes(r.raw).matchAll(/\r<ESC>\[2K(\[[#.]+\] \d+\/5 \([^)]*\) budget left \d+)/g),
    ].map((m) => m[1]!);
    expect(bars.map((b) => /\] (\d)\/5/.exec(b)![1])).toEqual(
      expect.arrayContaining(['1', '2', '3', '4', '5']),
    );
    // What the screen shows at the end: no bar left, log and entity lines whole, each on
    // its own line, the summary last, and the last bar's counts are the summary's.
    const screen = r.screen.filter(Boolean);
    expect(screen.some((l) => l.startsWith('['))).toBe(false);
    expect(screen.some((l) => l.includes('budget left') && /^\d\d:\d\d/.test(l))).toBe(false);
    expect(screen.filter((l) => / DEBUG .*github\.request/.test(l))).toHaveLength(5);
    expect(screen.filter((l) => /^actor \d+ user-\d+: not_modified \(304\)$/.test(l))).toHaveLength(
      5,
    );
    const summary = screen[screen.length - 1]!;
    expect(summary).toMatch(
      /^enrich: 5\/5 done \(enriched 0, not modified 5, gone 0, retry 0, failed 0\) — stopped: limit reached/,
    );
    const lastBarCounts = /\((.*)\)/.exec(bars[bars.length - 1]!)![1];
    expect(summary).toContain(`(${lastBarCounts})`);
  }, 180_000);
});
