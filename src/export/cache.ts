import { createHash } from 'node:crypto';
import { type FileHandle, mkdir, open, readdir, rm, stat, utimes } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { Db } from '../db/pool.ts';
import { AppError } from '../errors.ts';
import { type ArchiveHour, hourEnd } from '../gaps/hours.ts';
import type { Logger } from '../log.ts';
import { hourKnown, hourState, type Run } from './hour-query.ts';
import { FORMAT_VERSION, type HourFile, inHourSnapshot, writeHourFile } from './write.ts';

/**
 * The hour files /archive serves (ADR 0130), built once per state of the hour and kept on
 * disk: a file is named by the hour and a fingerprint of every value its lines are made of
 * (hour-query.ts hourState, read in the same snapshot as the rows), so a file on disk is
 * exactly the bytes the store would produce now whenever its fingerprint is the current
 * one. The fingerprint is the ETag too: a 304 costs one aggregate query, never a build.
 * Content-Length is the file's size.
 *
 * A miss builds the file (one build at a time per process: a build is a full read of the
 * hour), into a temporary file renamed into place. The cache keeps the latest file of each
 * hour and at most MAX_CACHE_BYTES in all, least recently served first out. Its directory
 * is DATA_DIR/archive-cache, or one under the system's temporary directory when DATA_DIR is
 * not writable (a container's working directory); losing it costs only rebuilds.
 */

export const MAX_CACHE_BYTES = 2 * 1024 ** 3;

export type ArchiveAnswer =
  | { kind: 'unknown' }
  | { kind: 'not_modified'; etag: string }
  | { kind: 'file'; etag: string; handle: FileHandle; bytes: number; built: HourFile | null };

export interface ArchiveCacheOptions {
  db: Db;
  logger: Logger;
  dataDir: string;
  maxBytes?: number;
}

/** The cache directory could not be made anywhere. */
export class ArchiveCacheUnavailable extends AppError {
  constructor(tried: string[], cause: unknown) {
    super(
      'ARCHIVE_CACHE_UNAVAILABLE',
      `no writable archive cache directory (${tried.join(', ')})`,
      { tried },
      { cause },
    );
  }
}

/** The validator of an hour's state: quoted, as HTTP wants it. */
function etagOf(hour: ArchiveHour, digest: string): string {
  const h = createHash('sha256')
    .update(`${FORMAT_VERSION}\n${process.versions.zlib}\n${hour.name}\n${digest}`)
    .digest('hex');
  return `"${h.slice(0, 40)}"`;
}

/** If-None-Match holds `etag` (a list, weak or strong, or `*`). */
export function matches(ifNoneMatch: string | undefined, etag: string): boolean {
  if (!ifNoneMatch) return false;
  return ifNoneMatch
    .split(',')
    .map((t) => t.trim().replace(/^W\//, ''))
    .some((t) => t === '*' || t === etag);
}

export class ArchiveCache {
  readonly #db: Db;
  readonly #logger: Logger;
  readonly #dataDir: string;
  readonly #maxBytes: number;
  #dir: Promise<string> | null = null;
  /** One build at a time (a build is a full read of the hour); the others wait for it. */
  #building: Promise<void> = Promise.resolve();
  #buildingNow = false;

  constructor(opts: ArchiveCacheOptions) {
    this.#db = opts.db;
    this.#logger = opts.logger;
    this.#dataDir = opts.dataDir;
    this.#maxBytes = opts.maxBytes ?? MAX_CACHE_BYTES;
  }

  /** The directory, made on first use. */
  dir(): Promise<string> {
    this.#dir ??= (async () => {
      const uid = typeof process.getuid === 'function' ? process.getuid() : null;
      const candidates = [
        path.resolve(this.#dataDir, 'archive-cache'),
        path.join(os.tmpdir(), `gpi-archive-cache-${uid ?? 'user'}`),
      ];
      let last: unknown;
      for (const dir of candidates) {
        try {
          await mkdir(dir, { recursive: true, mode: 0o700 });
          // A directory someone else made (a shared /tmp) could hold files of theirs under
          // the names this cache serves: only one of this user's is used.
          const st = await stat(dir);
          if (uid !== null && (st.uid !== uid || (st.mode & 0o022) !== 0)) {
            throw new Error(`${dir} is not this user's alone`);
          }
          const probe = await open(path.join(dir, `.probe-${process.pid}`), 'w');
          await probe.close();
          await rm(path.join(dir, `.probe-${process.pid}`), { force: true });
          return dir;
        } catch (err) {
          last = err;
        }
      }
      this.#dir = null;
      throw new ArchiveCacheUnavailable(candidates, last);
    })();
    return this.#dir;
  }

  /**
   * The hour's file as it is now, open for reading (the caller closes the handle), or a
   * 304 when `ifNoneMatch` names its current ETag, or unknown (nothing stored of the hour).
   * A miss builds the file in the very snapshot its fingerprint was read in; a miss while
   * another build runs waits for that one and looks again (it may be the same hour). A hit
   * never waits for a build.
   */
  async answer(hour: ArchiveHour, ifNoneMatch?: string): Promise<ArchiveAnswer> {
    const dir = await this.dir();
    for (;;) {
      const a = await inHourSnapshot(this.#db, async (run): Promise<ArchiveAnswer | null> => {
        if (!(await hourKnown(run, hour.start, hourEnd(hour)))) return { kind: 'unknown' };
        const etag = etagOf(hour, (await hourState(run, hour.start, hourEnd(hour))).digest);
        if (matches(ifNoneMatch, etag)) return { kind: 'not_modified', etag };
        const held = await this.#openFile(dir, hour, etag);
        if (held) return { kind: 'file', etag, ...held, built: null };
        // Checked and taken with no await between: one build at a time.
        if (this.#buildingNow) return null;
        this.#buildingNow = true;
        let done!: () => void;
        this.#building = new Promise<void>((resolve) => {
          done = resolve;
        });
        try {
          const built = await this.#build(run, dir, hour, etag);
          const opened = await this.#openFile(dir, hour, etag);
          if (!opened)
            throw new Error(`archive cache: ${fileName(hour, etag)} vanished after its build`);
          return { kind: 'file', etag, ...opened, built };
        } finally {
          this.#buildingNow = false;
          done();
        }
      });
      if (a) return a;
      // A miss while another build runs: wait for it, then look again.
      await this.#building;
    }
  }

  async #openFile(dir: string, hour: ArchiveHour, etag: string) {
    const file = path.join(dir, fileName(hour, etag));
    let handle: FileHandle;
    try {
      handle = await open(file, 'r');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw err;
    }
    // Open before anything else: a file pruned meanwhile stays readable through the handle.
    const bytes = (await handle.stat()).size;
    const now = new Date();
    await utimes(file, now, now).catch(() => {});
    return { handle, bytes };
  }

  async #build(run: Run, dir: string, hour: ArchiveHour, etag: string): Promise<HourFile> {
    const t0 = Date.now();
    const file = await writeHourFile(run, hour, path.join(dir, fileName(hour, etag)));
    this.#logger.info(
      {
        event: 'export.hour_written',
        hour: hour.name,
        pushes: file.pushes,
        pending: file.pending,
        bytes: file.bytes,
        sha256: file.sha256,
        etag,
        seconds: (Date.now() - t0) / 1000,
        to: 'archive-cache',
      },
      `archive: ${hour.name} built: ${file.pushes} pushes, ${file.bytes} bytes`,
    );
    await this.#prune(dir, hour, fileName(hour, etag)).catch((err: unknown) =>
      this.#logger.warn({ err }, `archive cache: pruning ${dir} failed`),
    );
    return file;
  }

  /** Older files of the hour go; then the least recently served until under the cap. */
  async #prune(dir: string, hour: ArchiveHour, keep: string): Promise<void> {
    const entries = await Promise.all(
      (await readdir(dir))
        .filter((n) => n.endsWith('.json.gz'))
        .map(async (n) => ({ name: n, ...(await stat(path.join(dir, n)).catch(() => null)) })),
    );
    const files = entries.filter(
      (e): e is typeof e & { size: number; mtimeMs: number } => 'size' in e,
    );
    const prefix = `${hour.name}.`;
    const left = [];
    for (const f of files) {
      if (f.name !== keep && f.name.startsWith(prefix))
        await rm(path.join(dir, f.name), { force: true });
      else left.push(f);
    }
    let total = left.reduce((n, f) => n + f.size, 0);
    for (const f of left.sort((a, b) => a.mtimeMs - b.mtimeMs)) {
      if (total <= this.#maxBytes) break;
      if (f.name === keep) continue;
      await rm(path.join(dir, f.name), { force: true });
      total -= f.size;
    }
  }
}

function fileName(hour: ArchiveHour, etag: string): string {
  return `${hour.name}.${etag.replaceAll('"', '')}.json.gz`;
}
