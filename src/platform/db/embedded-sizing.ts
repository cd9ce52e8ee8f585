import { randomBytes } from 'node:crypto';
import { chmod, chown, open, readFile, rename, rm, stat } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';

/**
 * The embedded server's memory and checkpoint settings, sized to the machine (ADR 0208).
 * Postgres's defaults (128 MB of shared buffers, `max_wal_size` 1 GB: a checkpoint
 * requested every ~540 MB of WAL) suit a small machine and a small store. A store of
 * millions of pushes writes its keys at random places on each push; once those keys
 * outgrow the buffers each insert reads its page from the operating system and evicts a
 * dirty one, and each checkpoint makes the next touch of every page write a full image of
 * it to the WAL (docs/performance.md).
 *
 * Written once into the cluster's postgresql.conf, as a block under a marker line, not as
 * `-c` flags: `ALTER SYSTEM` (postgresql.auto.conf) is read after postgresql.conf and so
 * overrides the block, where a flag would override the operator.
 */

export const SIZING_MARKER = '# github-push-ingestor: sized to this machine (docs/operations.md)';

const MB = 1024 * 1024;
const GB = 1024 * MB;

/**
 * The memory this process may use: the machine's, or less where a container's cgroup
 * limits it (a container of 2 GB on a 64 GB host must not be given 8 GB of buffers).
 */
export function usableMemory(): number {
  const limit = process.constrainedMemory();
  return limit > 0 ? Math.min(os.totalmem(), limit) : os.totalmem();
}

/** The block's settings for `totalBytes` of usable memory. */
export function sizingFor(totalBytes: number): Record<string, string> {
  // A quarter of memory for shared buffers, Postgres's own advice, between its default and
  // 8 GB (beyond which the operating system's cache serves as well).
  const buffers = Math.min(Math.max(Math.floor(totalBytes / 4 / MB), 128), 8 * 1024);
  const cache = Math.max(Math.floor((totalBytes * 3) / 4 / MB), buffers);
  return {
    shared_buffers: `${buffers}MB`,
    effective_cache_size: `${cache}MB`,
    // Checkpoints far apart (one requested every ~4 GB of WAL, or 15 minutes): fewer
    // full-page images of the keys' pages. The WAL kept on disk can reach max_wal_size,
    // and a crash replays up to it. The cut at 7.5 GB: an "8 GB" machine reports a little
    // less than 8 GiB.
    max_wal_size: totalBytes >= 7.5 * GB ? '8GB' : '4GB',
    checkpoint_timeout: '15min',
    checkpoint_completion_target: '0.9',
  };
}

/** The block as written to postgresql.conf. */
export function sizingBlock(settings: Record<string, string>): string {
  const lines = Object.entries(settings).map(([k, v]) => `${k} = '${v}'`);
  return `\n${SIZING_MARKER}\n# Override with ALTER SYSTEM, or edit these lines; they are written once.\n${lines.join('\n')}\n`;
}

/** The settings of the cluster's block, as its postgresql.conf holds them ({} without one). */
export async function readSizing(cluster: string): Promise<Record<string, string>> {
  const text = await readFile(path.join(cluster, 'postgresql.conf'), 'utf8');
  const at = text.indexOf(SIZING_MARKER);
  if (at < 0) return {};
  const settings: Record<string, string> = {};
  for (const line of text.slice(at).split('\n')) {
    const m = line.match(/^(\w+) = '([^']*)'$/);
    if (m) settings[m[1]!] = m[2]!;
  }
  return settings;
}

/**
 * Adds the block to the cluster's postgresql.conf unless it is there: a new cluster gets it
 * from initdb's step (under the init lock), one made before the block existed at its next
 * start. Resolves to the settings written, or null. The file is replaced whole (written beside it, then renamed over it, with its owner and
 * mode), so two processes starting the server at once leave one block, not two.
 * `totalBytes` is injectable for tests.
 */
export async function ensureSized(
  cluster: string,
  totalBytes = usableMemory(),
): Promise<Record<string, string> | null> {
  const conf = path.join(cluster, 'postgresql.conf');
  const text = await readFile(conf, 'utf8');
  if (text.includes(SIZING_MARKER)) return null;
  const settings = sizingFor(totalBytes);
  const { uid, gid, mode } = await stat(conf);
  const staging = `${conf}.sizing-${process.pid}-${randomBytes(4).toString('hex')}`;
  try {
    // Synced before the rename: a crash must leave the old file or the new one, never an
    // empty postgresql.conf. The mode is set, not left to the umask.
    const file = await open(staging, 'wx', 0o600);
    try {
      await file.writeFile(text + sizingBlock(settings));
      await file.sync();
    } finally {
      await file.close();
    }
    await chmod(staging, mode & 0o7777);
    if (process.getuid?.() === 0) await chown(staging, uid, gid);
    await rename(staging, conf);
  } finally {
    await rm(staging, { force: true });
  }
  return settings;
}
