import { type FileHandle, mkdir, open, readdir, rm, stat, utimes } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { Db } from '../platform/db/pool.ts';
import { AppError } from '../platform/errors.ts';
import type { Logger } from '../platform/log.ts';
import { type ArchiveHour, hourEnd } from '../store/archive-hours.ts';
import { hourOpenReasons, type OpenReason, withPending } from '../store/open-hours.ts';
import { buildTables, type TablesBuilt, tablesFileName } from './hour-export.ts';
import { hourKnown, type Run } from './hour-query.ts';
import {
  type BuiltHour,
  builtHour,
  confirmBuilt,
  currentSnapshot,
  hourChanges,
  recordBuilt,
  renamedSince,
} from './hour-state.ts';
import { PARQUET_FORMAT } from './parquet.ts';
import { sweepTemporaryFiles } from './temporary-files.ts';
import { FORMAT_VERSION, inHourSnapshot, writeHourFile } from './write.ts';

/**
 * The hour files /archive serves (ADR 0130), built once per state of the hour and kept on
 * disk. What an hour looks like now is read from two short rows, never from its pushes
 * (src/export/hour-state.ts): its count of changing writes, and the file recorded for it —
 * the count and snapshot it was built at and its SHA-256. When the counts agree the
 * recorded file is the hour as it is now; its SHA-256 is the ETag, so a 304 and a hit cost
 * those rows and, for a hit, an open of the file named by it.
 *
 * A miss builds the file in the very snapshot the count was read in (one build at a time
 * per process: a build is a full read of the hour), into a temporary file renamed to its
 * SHA-256's name, and records it. A file is named by its content, so a cache directory
 * shared by two databases never serves one's bytes for the other's. The cache keeps the
 * latest file of each hour and at most MAX_CACHE_BYTES in all, least recently served first
 * out. Its directory is DATA_DIR/archive-cache, or one under the system's temporary
 * directory when DATA_DIR is not writable (a container's working directory); losing it
 * costs only rebuilds.
 *
 * An hour being imported is not built at all (`importing`): its rows change by a chunk a
 * second, and a copy of it would be neither final nor current (src/store/open-hours.ts).
 */

export const MAX_CACHE_BYTES = 2 * 1024 ** 3;

/** What decides an hour file's bytes besides the rows: the line format and the compressor. */
export const FILE_FORMAT = `v${FORMAT_VERSION}/zlib-${process.versions.zlib}`;

/**
 * The Parquet tables of an hour and the parts of its manifest are one build,
 * recorded under their own format (they depend on the line format too: the manifest lists
 * the JSON file), named by the SHA-256 of the parts.
 */
export const TABLES_FORMAT = `${FILE_FORMAT}/${PARQUET_FORMAT}`;

/** What a request asks of an hour: its JSON file, a table, or its manifest's parts. */
export type ArchivePart = 'json' | 'pushes' | 'push_commits' | 'parts';

function formatOf(part: ArchivePart): string {
  return part === 'json' ? FILE_FORMAT : TABLES_FORMAT;
}

/** The file a build named by `sha256` keeps `part` in. */
function fileName(hour: ArchiveHour, sha256: string, part: ArchivePart): string {
  return part === 'json'
    ? `${hour.name}.${sha256.slice(0, 40)}.json.gz`
    : tablesFileName(hour, sha256, part);
}

/** The names a build of `part`'s format has (the JSON file; or two tables and the parts). */
const SUFFIXES: Record<'json' | 'tables', readonly string[]> = {
  json: ['.json.gz'],
  tables: ['.pushes.parquet', '.push_commits.parquet', '.parts.json'],
};

export type ArchiveAnswer =
  | { kind: 'unknown' }
  /** An import is writing into the hour: answered 503, nothing built. */
  | { kind: 'importing'; reasons: OpenReason[] }
  | { kind: 'not_modified'; etag: string; reasons: OpenReason[] }
  | {
      kind: 'file';
      etag: string;
      handle: FileHandle;
      bytes: number;
      /** This request built it (null: served from the cache). */
      built: TablesBuilt | null;
      reasons: OpenReason[];
    };

export interface ArchiveCacheOptions {
  /** The archive's own pool (bin/web gives it a share of its connections). */
  db: Db;
  logger: Logger;
  dataDir: string;
  maxBytes?: number;
  /** Runs a use of the database within the archive's share (src/web/archive-gate.ts). */
  withSlot?: <T>(fn: () => Promise<T>) => Promise<T>;
  /** Waits for another request's build, within the archive's share. */
  waitFor?: <T>(p: Promise<T>) => Promise<T>;
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

/** The ETag of a file: its SHA-256 (the first 160 bits), quoted as HTTP wants it. */
export function etagOf(sha256: string): string {
  return `"${sha256.slice(0, 40)}"`;
}

/** If-None-Match holds `etag` (a list, weak or strong, or `*`). */
export function matches(ifNoneMatch: string | undefined, etag: string): boolean {
  if (!ifNoneMatch) return false;
  return ifNoneMatch
    .split(',')
    .map((t) => t.trim().replace(/^W\//, ''))
    .some((t) => t === '*' || t === etag);
}

/** What one look at the hour, in one snapshot, found or did. */
type Step =
  | { answer: ArchiveAnswer; record?: BuiltHour; confirm?: { built: BuiltHour; snapshot: string } }
  /** A build of another request runs: wait for it and look again. */
  | null;

const direct = <T>(fn: () => Promise<T>) => fn();

export class ArchiveCache {
  readonly #db: Db;
  readonly #logger: Logger;
  readonly #dataDir: string;
  readonly #maxBytes: number;
  readonly #withSlot: <T>(fn: () => Promise<T>) => Promise<T>;
  readonly #waitFor: <T>(p: Promise<T>) => Promise<T>;
  #dir: Promise<string> | null = null;
  /** One build at a time (a build is a full read of the hour); the others wait for it. */
  #building: Promise<void> = Promise.resolve();
  #buildingNow = false;
  /** Builds finished by this process: a look that began before one ended must look again. */
  #buildsDone = 0;

  constructor(opts: ArchiveCacheOptions) {
    this.#db = opts.db;
    this.#logger = opts.logger;
    this.#dataDir = opts.dataDir;
    this.#maxBytes = opts.maxBytes ?? MAX_CACHE_BYTES;
    this.#withSlot = opts.withSlot ?? direct;
    this.#waitFor = opts.waitFor ?? ((p) => p);
  }

  /** The directory, made on first use (and swept of what killed builds left in it). */
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
          const swept = await sweepTemporaryFiles(dir);
          if (swept.files.length > 0) {
            this.#logger.info(
              {
                event: 'export.temporary_swept',
                dir,
                files: swept.files.length,
                bytes: swept.bytes,
              },
              `archive cache: removed ${swept.files.length} temporary files (${swept.bytes} bytes) left by killed builds`,
            );
          }
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
   * The hour's file as it is now, open for reading (the caller closes the handle), or a 304
   * when `ifNoneMatch` names its current ETag, or `importing`, or unknown (nothing stored of
   * the hour). A hit never waits for a build; a miss while another build runs waits for it
   * and looks again (it may be the same hour).
   */
  async answer(
    hour: ArchiveHour,
    now: Date,
    ifNoneMatch?: string,
    part: ArchivePart = 'json',
  ): Promise<ArchiveAnswer> {
    const dir = await this.dir();
    for (;;) {
      const step = await this.#withSlot(async () => {
        let building: (() => void) | null = null;
        try {
          const s = await inHourSnapshot(this.#db, (run) =>
            this.#look(run, dir, hour, now, ifNoneMatch, part, (release) => {
              building = release;
            }),
          );
          try {
            // Recorded before the build is released: whoever waited for it finds the row.
            if (s?.record) await recordBuilt(this.#db, hour, formatOf(part), s.record);
            if (s?.confirm) {
              const { built, snapshot } = s.confirm;
              await confirmBuilt(this.#db, hour, formatOf(part), built, snapshot);
            }
          } catch (err) {
            if (s?.answer.kind === 'file') await s.answer.handle.close().catch(() => {});
            throw err;
          }
          return s;
        } finally {
          (building as (() => void) | null)?.();
        }
      });
      if (step) return step.answer;
      await this.#waitFor(this.#building);
    }
  }

  async #look(
    run: Run,
    dir: string,
    hour: ArchiveHour,
    now: Date,
    ifNoneMatch: string | undefined,
    part: ArchivePart,
    onBuild: (release: () => void) => void,
  ): Promise<Step> {
    const seen = this.#buildsDone;
    const open = await hourOpenReasons(run, hour, now);
    if (open.includes('importing')) return { answer: { kind: 'importing', reasons: open } };
    const changes = await hourChanges(run, hour);
    const built = await builtHour(run, hour, formatOf(part));
    let confirm: { built: BuiltHour; snapshot: string } | undefined;
    let current = built !== null && built.changes === changes;
    if (current) {
      const renamed = await renamedSince(run, hour, built!.snapshot);
      if (renamed === true) current = false;
      else if (renamed === false) confirm = { built: built!, snapshot: await currentSnapshot(run) };
    }
    if (current && built) {
      const etag = etagOf(built.sha256);
      const reasons = withPending(open, built.pending);
      if (matches(ifNoneMatch, etag)) {
        return { answer: { kind: 'not_modified', etag, reasons }, confirm };
      }
      const held = await this.#openFile(dir, fileName(hour, built.sha256, part));
      if (held) return { answer: { kind: 'file', etag, ...held, built: null, reasons }, confirm };
      // Recorded, but not on this disk (another replica built it, or the cache was pruned):
      // built again below, in this snapshot, where it is the same bytes.
    } else if (!(await hourKnown(run, hour.start, hourEnd(hour)))) {
      return { answer: { kind: 'unknown' } };
    }
    // Checked and taken with no await between: one build at a time. A build that ended
    // since this look began may be this hour's, recorded after this snapshot: look again.
    if (this.#buildingNow || this.#buildsDone !== seen) return null;
    this.#buildingNow = true;
    let done!: () => void;
    this.#building = new Promise<void>((resolve) => {
      done = resolve;
    });
    onBuild(() => {
      this.#buildingNow = false;
      this.#buildsDone++;
      done();
    });
    const snapshot = await currentSnapshot(run);
    const file = await this.#build(run, dir, hour, part);
    if (current && built && built.sha256 !== file.sha256) {
      // The recorded file's count said nothing changed, but the bytes did: a write the
      // triggers do not watch. Served and recorded as built; worth a report.
      this.#logger.warn(
        {
          event: 'export.hour_unwatched_change',
          hour: hour.name,
          recorded_sha256: built.sha256,
          sha256: file.sha256,
        },
        `archive: ${hour.name} changed without a counted write (recorded ${built.sha256.slice(0, 12)}…, built ${file.sha256.slice(0, 12)}…)`,
      );
    }
    const opened = await this.#openFile(dir, fileName(hour, file.sha256, part));
    if (!opened) {
      throw new Error(
        `archive cache: ${fileName(hour, file.sha256, part)} vanished after its build`,
      );
    }
    const etag = etagOf(file.sha256);
    const record: BuiltHour = {
      changes,
      snapshot,
      sha256: file.sha256,
      bytes: file.bytes,
      pushes: file.pushes,
      pending: file.pending,
    };
    const reasons = withPending(open, file.pending);
    if (matches(ifNoneMatch, etag)) {
      await opened.handle.close();
      return { answer: { kind: 'not_modified', etag, reasons }, record };
    }
    return { answer: { kind: 'file', etag, ...opened, built: file, reasons }, record };
  }

  async #openFile(dir: string, name: string) {
    const file = path.join(dir, name);
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

  async #build(run: Run, dir: string, hour: ArchiveHour, part: ArchivePart): Promise<TablesBuilt> {
    const t0 = Date.now();
    const file =
      part === 'json'
        ? await writeHourFile(run, hour, (f) => path.join(dir, fileName(hour, f.sha256, part)), {
            dir,
          })
        : await buildTables(run, dir, hour);
    this.#logger.info(
      {
        event: 'export.hour_written',
        hour: hour.name,
        format: part === 'json' ? 'json' : 'parquet',
        pushes: file.pushes,
        pending: file.pending,
        bytes: file.bytes,
        sha256: file.sha256,
        etag: etagOf(file.sha256),
        seconds: (Date.now() - t0) / 1000,
        to: 'archive-cache',
      },
      `archive: ${hour.name} built: ${file.pushes} pushes, ${file.bytes} bytes`,
    );
    const kind = part === 'json' ? 'json' : 'tables';
    await this.#prune(dir, hour, kind, file.sha256).catch((err: unknown) =>
      this.#logger.warn({ err }, `archive cache: pruning ${dir} failed`),
    );
    return file;
  }

  /**
   * Older builds of the hour of the same kind go; then the least recently served files until
   * under the cap (a build's files apart, when they are not the one just made).
   */
  async #prune(
    dir: string,
    hour: ArchiveHour,
    kind: 'json' | 'tables',
    sha256: string,
  ): Promise<void> {
    const all = [...SUFFIXES.json, ...SUFFIXES.tables];
    const entries = await Promise.all(
      (await readdir(dir))
        .filter((n) => all.some((s) => n.endsWith(s)))
        .map(async (n) => ({ name: n, ...(await stat(path.join(dir, n)).catch(() => null)) })),
    );
    const files = entries.filter(
      (e): e is typeof e & { size: number; mtimeMs: number } => 'size' in e,
    );
    const prefix = `${hour.name}.`;
    const keep = `${hour.name}.${sha256.slice(0, 40)}.`;
    const left = [];
    for (const f of files) {
      const mine = SUFFIXES[kind].some((s) => f.name.endsWith(s));
      if (mine && f.name.startsWith(prefix) && !f.name.startsWith(keep))
        await rm(path.join(dir, f.name), { force: true });
      else left.push(f);
    }
    let total = left.reduce((n, f) => n + f.size, 0);
    for (const f of left.sort((a, b) => a.mtimeMs - b.mtimeMs)) {
      if (total <= this.#maxBytes) break;
      if (f.name.startsWith(keep)) continue;
      await rm(path.join(dir, f.name), { force: true });
      total -= f.size;
    }
  }
}
