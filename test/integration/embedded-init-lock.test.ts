import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, readdir, rm, utimes, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import {
  checkDataDir,
  clusterPaths,
  ensureInitialised,
  serverUser,
} from '../../src/platform/db/embedded-cluster.ts';

/**
 * The embedded cluster's init lock: one starter runs initdb, the others wait for it. The
 * lock once appeared empty until its pid was written; a waiter reading it then took it
 * for a dead owner's, took it over and cleared the owner's staging directory under its
 * running initdb ("initdb exited 1" for one of 10 concurrent bin/setup under load).
 */

let root: string | undefined;

afterEach(async () => {
  if (root) await rm(root, { recursive: true, force: true });
  root = undefined;
});

async function freshCluster(): Promise<{ cluster: string; ids: ReturnType<typeof serverUser> }> {
  root = await mkdtemp(path.join(os.tmpdir(), 'gpi-init-lock-'));
  // As root, initdb runs as `postgres`, which must pass the temporary directory.
  await chmod(root, 0o755);
  const ids = serverUser();
  const dataDir = path.join(root, 'data');
  await checkDataDir(dataDir, ids);
  return { cluster: clusterPaths(dataDir).cluster, ids };
}

describe('the embedded cluster init lock', () => {
  it('six starters at once in one process: one initdb, every one finds a cluster, no leftovers', async () => {
    const { cluster, ids } = await freshCluster();
    const results = await Promise.all(
      Array.from({ length: 6 }, () => ensureInitialised(cluster, ids)),
    );
    expect(results.filter((r) => r === 'initialised')).toHaveLength(1);
    expect(results.filter((r) => r === 'existing')).toHaveLength(5);
    expect(existsSync(path.join(cluster, 'PG_VERSION'))).toBe(true);
    // No lock, staging directory or private lock attempt is left beside the cluster.
    const beside = (await readdir(path.dirname(cluster))).filter(
      (e) => e !== path.basename(cluster) && e.startsWith(path.basename(cluster)),
    );
    expect(beside).toEqual([]);
  });

  it('a lock file without a pid is held until it is 5 s old, then taken over', async () => {
    const { cluster, ids } = await freshCluster();
    const lockPath = `${cluster}.init-lock`;
    await writeFile(lockPath, '');
    // Aged 3 s: the starter must still wait about 2 s before it may take it over.
    const aged = new Date(Date.now() - 3_000);
    await utimes(lockPath, aged, aged);
    const started = Date.now();
    const result = await ensureInitialised(cluster, ids);
    expect(result).toBe('initialised');
    // A lower bound only (a loaded machine only makes it later): it waited for the age.
    expect(Date.now() - started).toBeGreaterThanOrEqual(1_900);
    expect(existsSync(lockPath)).toBe(false);
  });

  it("clears a dead starter's leftovers, never a live one's staging directory", async () => {
    const { cluster, ids } = await freshCluster();
    // A process that has exited: its pid names no live process (for the next few moments).
    const gone = spawn('true');
    await new Promise((r) => gone.once('exit', r));
    const live = spawn('sleep', ['60']);
    try {
      const dead = `${cluster}.init-${gone.pid}-old`;
      const deadTry = `${cluster}.lock-try-${gone.pid}-old`;
      const running = `${cluster}.init-${live.pid}-now`;
      await mkdir(dead);
      await writeFile(deadTry, String(gone.pid));
      await mkdir(running);
      expect(await ensureInitialised(cluster, ids)).toBe('initialised');
      expect(existsSync(dead)).toBe(false);
      expect(existsSync(deadTry)).toBe(false);
      // Another holder's initdb may be running there: left alone.
      expect(existsSync(running)).toBe(true);
    } finally {
      live.kill('SIGKILL');
    }
  });
});
