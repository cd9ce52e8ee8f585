import { existsSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { type Child, killAll, spawnBin } from '../recovery/world.ts';
import { runBin } from '../support/cli.ts';
import { type EmbeddedEnv, freshEmbeddedEnv } from '../support/embedded-env.ts';

/**
 * The zero-config path as a new user meets it (item 1; ADR 0030): no DATABASE_URL,
 * several real bin/* processes on one embedded Postgres. Each test has its own DATA_DIR and
 * port, and kills processes the way an operator or the OOM killer would.
 */

const children: Child[] = [];
let current: EmbeddedEnv | undefined;

afterEach(async () => {
  await killAll(children.splice(0));
  await current?.cleanup();
  current = undefined;
});

async function embedded(): Promise<EmbeddedEnv> {
  current = await freshEmbeddedEnv();
  return current;
}

/** A fresh DATA_DIR, set up, with one bin/web running on it (which started the server). */
async function setUpWithWeb(): Promise<{ e: EmbeddedEnv; web: Child; url: string }> {
  const e = await embedded();
  const setup = await runBin('setup', [], e.env);
  expect(setup.code, setup.err).toBe(0);
  const web = start('web', e);
  const url = await listening(web);
  return { e, web, url };
}

interface DbStatus {
  running: boolean;
  pid: number | null;
  holders: { role: string; pid: number }[];
}

async function dbStatus(e: EmbeddedEnv): Promise<DbStatus> {
  const r = await runBin('db', ['status', '--json'], e.env);
  expect(r.code, r.err).toBe(0);
  return JSON.parse(r.out) as DbStatus;
}

function start(name: string, e: EmbeddedEnv, env: Record<string, string> = {}): Child {
  const child = spawnBin(name, { ...e.env, HTTP_PORT: '0', ...env });
  children.push(child);
  return child;
}

async function listening(web: Child): Promise<string> {
  const line = await web.waitForLine((l) => l.event === 'web.listening', 'web.listening', 60_000);
  return String(line.url);
}

const events = (c: Child, name: string) => c.lines.filter((l) => l.event === name);
/** Lines above info: a graceful stop must produce none (no 57P01, no dropped connection). */
const complaints = (c: Child) => c.lines.filter((l) => l.level === 'warn' || l.level === 'error');

describe('one embedded Postgres, shared by every process that uses it', () => {
  it('10 concurrent bin/setup on a fresh DATA_DIR: 10 succeed, the work is done once, the last one out stops the server', async () => {
    const e = await embedded();
    const runs = await Promise.all(Array.from({ length: 10 }, () => runBin('setup', [], e.env)));
    for (const r of runs) expect(r.code, r.err).toBe(0);
    // One of them migrated and seeded; the others, serialized behind it, found it done.
    expect(runs.filter((r) => /\d+ migration\(s\) applied/.test(r.out))).toHaveLength(1);
    expect(runs.filter((r) => /1 source\(s\) added \(public\)/.test(r.out))).toHaveLength(1);
    expect(
      runs.filter((r) => r.out === 'setup: nothing to do, the database is up to date\n'),
    ).toHaveLength(9);
    // Those nine said nothing at info (one of the ten may have said it initialised the
    // cluster: whichever got the init lock, not necessarily the one that migrated).
    for (const r of runs.filter((x) => x.out.includes('nothing to do'))) {
      const events = r.err
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l).event);
      expect(
        events.filter((ev) => ev !== 'db.embedded_init'),
        r.err,
      ).toEqual([]);
    }
    expect((await dbStatus(e)).running).toBe(false);
    const list = await runBin('sources', ['list', '--json'], e.env);
    expect(list.code, list.err).toBe(0);
    expect(JSON.parse(list.out)).toMatchObject([{ kind: 'public' }]);
  }, 240_000);

  it('SIGKILL of the process that started the server strands no one; the last graceful exit stops it', async () => {
    const { e, web: first } = await setUpWithWeb();
    expect(events(first, 'db.embedded_started')).toHaveLength(1);
    const second = start('web', e);
    const url = await listening(second);
    expect(events(second, 'db.embedded_started')).toHaveLength(0); // it joined

    const both = await dbStatus(e);
    expect(both.running).toBe(true);
    expect(both.holders.map((h) => h.pid).sort()).toEqual(
      [first.process.pid, second.process.pid].sort(),
    );

    first.process.kill('SIGKILL');
    await first.exited;
    // The starter is gone; the server and the other process's database are not.
    for (let i = 0; i < 5; i++) {
      const ready = await fetch(`${url}/readyz`);
      expect(ready.status).toBe(200);
      await new Promise((r) => setTimeout(r, 200));
    }
    const after = await dbStatus(e);
    expect(after.running).toBe(true);
    expect(after.holders.map((h) => h.pid)).toEqual([second.process.pid]);

    second.process.kill('SIGINT');
    expect(await second.exited).toEqual({ code: 0, signal: null });
    expect(events(second, 'db.embedded_stopped')).toHaveLength(1);
    expect(complaints(second)).toEqual([]);
    expect((await dbStatus(e)).running).toBe(false);
  }, 180_000);

  it('Ctrl-C on the starter leaves the server to the others; one left by a killed last holder is adopted and stopped by the next command', async () => {
    const { e, web, url } = await setUpWithWeb();
    const worker = start('worker', e);
    await worker.waitForLine((l) => l.event === 'worker.started', 'worker.started', 60_000);

    web.process.kill('SIGINT'); // the terminal's Ctrl-C
    expect(await web.exited).toEqual({ code: 0, signal: null });
    expect(events(web, 'db.embedded_stopped')).toHaveLength(0);
    expect(complaints(web)).toEqual([]);
    await expect(fetch(`${url}/healthz`)).rejects.toThrow();
    const held = await dbStatus(e);
    expect(held.holders.map((h) => `${h.role}:${h.pid}`)).toEqual([`worker:${worker.process.pid}`]);

    worker.process.kill('SIGKILL');
    await worker.exited;
    // Nobody holds it now, and nothing stopped it: the next command takes it over.
    const stranded = await dbStatus(e);
    expect(stranded.running).toBe(true);
    expect(stranded.holders).toEqual([]);
    const text = await runBin('db', ['status'], e.env);
    expect(text.out).toMatch(/used by: no process \(left by one that was killed/);

    const list = await runBin('sources', ['list'], { ...e.env, LOG_LEVEL: 'debug' });
    expect(list.code, list.err).toBe(0);
    expect(list.err).toMatch(/"event":"db.embedded_stopped"/);
    expect(list.err).not.toMatch(/"event":"db.embedded_started"/); // adopted, not restarted
    expect((await dbStatus(e)).running).toBe(false);
  }, 180_000);

  it('bin/db stop refuses while a process uses the server; after --force the process holds it again, so the next command does not stop it under it', async () => {
    const { e, web, url } = await setUpWithWeb();

    const refused = await runBin('db', ['stop'], e.env);
    expect(refused.code).toBe(1);
    expect(refused.err).toMatch(new RegExp(`in use by web \\(pid ${web.process.pid}, since`));
    expect((await dbStatus(e)).running).toBe(true);

    const forced = await runBin('db', ['stop', '--force'], e.env);
    expect(forced.code, forced.err).toBe(0);
    expect(forced.out).toMatch(/^embedded Postgres stopped \(pid \d+, port \d+\)\n$/);
    // The process that lost its database says so, once, keeps running, and holds the
    // server again: it starts it (or a command started meanwhile does, and it adopts it).
    await web.waitForLine((l) => l.event === 'db.embedded_lost', 'db.embedded_lost');
    expect(web.process.exitCode).toBeNull();
    // A command run now used to be the server's only holder and stop it on its exit,
    // under the web.
    const list = await runBin('sources', ['list'], e.env);
    expect(list.code, list.err).toBe(0);
    const after = await dbStatus(e);
    expect(after.running).toBe(true);
    expect(after.holders.map((h) => h.pid)).toEqual([web.process.pid]);
    await web.waitForLine((l) => l.event === 'db.embedded_rejoined', 'db.embedded_rejoined');
    expect(events(web, 'db.embedded_lost')).toHaveLength(1);
    expect((await fetch(`${url}/readyz`)).status).toBe(200);

    web.process.kill('SIGINT');
    expect(await web.exited).toEqual({ code: 0, signal: null });
    expect(events(web, 'db.embedded_stopped')).toHaveLength(1);
    const again = await runBin('db', ['stop'], e.env);
    expect(again).toMatchObject({ code: 0, out: 'embedded Postgres is not running\n' });
  }, 120_000);

  it('a DATA_DIR the server cannot use is a configuration error that names DATA_DIR', async () => {
    const parent = await mkdtemp(path.join(os.tmpdir(), 'gpi-closed-'));
    try {
      const asRoot = process.getuid?.() === 0;
      // As root the server runs as `postgres`, which cannot pass a 0700 directory (like
      // /root); as another user, a directory it cannot write.
      const dataDir = path.join(parent, 'inner', 'data');
      if (asRoot) await mkdir(path.join(parent, 'inner'), { recursive: true });
      await chmod(parent, asRoot ? 0o700 : 0o500);
      const r = await runBin('setup', [], {
        DATABASE_URL: undefined,
        DATA_DIR: dataDir,
        EMBEDDED_POSTGRES_PORT: '1',
      });
      expect(r.code).toBe(2);
      expect(r.out).toBe('');
      expect(r.err).toMatch(
        asRoot
          ? /^setup: configuration error: DATA_DIR \(.+\) cannot be entered by the "postgres" user/
          : /^setup: configuration error: DATA_DIR \(.+\) cannot be created/,
      );
      // Refused, it leaves no directory of its own behind.
      expect(existsSync(dataDir)).toBe(false);
    } finally {
      await chmod(parent, 0o700);
      await rm(parent, { recursive: true, force: true });
    }
  });
});
