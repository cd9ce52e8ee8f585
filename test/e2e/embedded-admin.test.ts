import { type ChildProcess, spawn } from 'node:child_process';
import { copyFile, mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { runBin } from '../support/cli.ts';
import { type EmbeddedEnv, freshEmbeddedEnv, sparePort } from '../support/embedded-env.ts';

/**
 * bin/db stop without --force never stops a server it cannot ask who uses it (ADR 0030).
 * The server here is a stand-in: a process named `postgres` (all runningPostmaster()
 * checks) that a postmaster.pid names, on a port nothing listens on, so the admin
 * connection fails the way it does when the server is wedged, full, or not yet listening.
 */

let env: EmbeddedEnv | undefined;
let fake: ChildProcess | undefined;

afterEach(async () => {
  fake?.kill('SIGKILL');
  fake = undefined;
  await env?.cleanup();
  env = undefined;
});

async function fakePostmaster(e: EmbeddedEnv): Promise<ChildProcess> {
  const cluster = path.join(e.dataDir, 'postgres');
  await mkdir(cluster, { recursive: true });
  const binary = path.join(e.dataDir, 'postgres-bin', 'postgres');
  await mkdir(path.dirname(binary));
  await copyFile('/bin/sleep', binary);
  const child = spawn(binary, ['300'], { stdio: 'ignore' });
  await new Promise((resolve, reject) => child.once('spawn', resolve).once('error', reject));
  expect((await readFile(`/proc/${child.pid}/comm`, 'utf8')).trim()).toBe('postgres');
  const port = await sparePort(); // free: the admin connection is refused
  // postmaster.pid: pid, data dir, start time, port, socket dir, listen address, shmem, status
  await writeFile(
    path.join(cluster, 'postmaster.pid'),
    `${child.pid}\n${cluster}\n0\n${port}\n/tmp\n127.0.0.1\n0 0\nready   \n`,
  );
  return child;
}

const alive = (c: ChildProcess) => c.exitCode === null && c.signalCode === null;

describe('bin/db stop', () => {
  it('without --force refuses when it cannot check who uses the server; --force stops it', async () => {
    env = await freshEmbeddedEnv();
    const server = await fakePostmaster(env);
    fake = server;
    const exited = new Promise((r) => server.once('exit', r));

    const refused = await runBin('db', ['stop'], env.env);
    expect(refused.code).toBe(1);
    expect(refused.out).toBe('');
    expect(refused.err).toMatch(
      new RegExp(
        `^db: the embedded Postgres \\(pid ${server.pid}\\) is running, but cannot check who uses it: .*ECONNREFUSED.*; use --force to stop it anyway\\n$`,
      ),
    );
    await new Promise((r) => setTimeout(r, 200));
    expect(alive(server)).toBe(true);

    const forced = await runBin('db', ['stop', '--force'], env.env);
    expect(forced.code, forced.err).toBe(0);
    expect(forced.out).toMatch(/^embedded Postgres stopped \(pid \d+, port \d+\)\n$/);
    await exited;
  });
});
