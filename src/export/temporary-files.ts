import { createHash } from 'node:crypto';
import { lstat, readdir, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';

/**
 * The temporary files hour files are written into before their rename (src/export/write.ts),
 * and the sweep that removes the ones a killed writer left (a SIGKILLed bin/export, or
 * bin/web mid-build): each is named after the hour file, the writer's pid, a timestamp and
 * its host, `2026-11-29-14.json.gz.<pid>.<time>.<host>.tmp` (or of a `.parquet` table or a
 * `.manifest.json`), so the next writer into the
 * same directory can tell a dead writer's file from a live one's:
 *
 * - written on this host by a process that no longer runs: removed;
 * - written by a running process, or on another host (a shared directory): left alone,
 *   unless untouched for STALE_MS (a live writer appends every few seconds).
 *
 * A pid reused by an unrelated process keeps its dead file until it is stale. Only names of
 * this exact shape are ever touched (and names of the shape without a host, from earlier
 * versions, read as this host's).
 */

/** A temporary file untouched this long is a dead writer's, whatever its pid says. */
export const STALE_MS = 24 * 3_600_000;

const HOST_TAG = createHash('sha256').update(os.hostname()).digest('hex').slice(0, 8);
const TEMPORARY =
  /^\d{4}-\d{2}-\d{2}-\d{1,2}\.(?:json\.gz|parquet|manifest\.json)\.(\d{1,10})\.[0-9a-z]{1,12}(?:\.([0-9a-f]{8}))?\.tmp$/;

/** The temporary name this process writes `fileName` under. */
export function temporaryName(fileName: string): string {
  return `${fileName}.${process.pid}.${Date.now().toString(36)}.${HOST_TAG}.tmp`;
}

function running(pid: number): boolean {
  if (pid === process.pid) return true;
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // EPERM: it runs, as another user.
    return (err as NodeJS.ErrnoException).code !== 'ESRCH';
  }
}

export interface Swept {
  files: string[];
  bytes: number;
}

/** Removes the temporary files of dead writers in `dir` (see above). Never throws for one file. */
export async function sweepTemporaryFiles(dir: string, now = Date.now()): Promise<Swept> {
  const swept: Swept = { files: [], bytes: 0 };
  let names: string[];
  try {
    names = await readdir(dir);
  } catch {
    return swept;
  }
  for (const name of names) {
    const m = TEMPORARY.exec(name);
    if (!m) continue;
    const file = path.join(dir, name);
    const st = await lstat(file).catch(() => null);
    if (!st?.isFile()) continue;
    const ours = m[2] === undefined || m[2] === HOST_TAG;
    const stale = now - st.mtimeMs > STALE_MS;
    if (!stale && (!ours || running(Number(m[1])))) continue;
    try {
      await rm(file);
      swept.files.push(name);
      swept.bytes += st.size;
    } catch {
      // Gone already (another sweeper), or not ours to remove: left.
    }
  }
  return swept;
}
