import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { createWriteStream } from 'node:fs';
import { rename, rm } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { Transform, type Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { constants, createGzip } from 'node:zlib';
import type { Db } from '../platform/db/pool.ts';
import { type ArchiveHour, hourEnd, hourFileName } from '../store/archive-hours.ts';
import { HOUR_ROWS, type HourRow, type Run, runOn, toExportRow } from './hour-query.ts';
import { exportLine, MAX_LINE_COMMITS } from './line.ts';
import { temporaryName } from './temporary-files.ts';

/**
 * Writing an hour file (ADR 0130): the hour's rows walked with a cursor inside one
 * REPEATABLE READ snapshot, each turned into its line, the lines gzipped on the way out.
 * Memory is bounded whatever the hour holds: a fetch is sized to about FETCH_BYTES of
 * lines (a push of 20 commits of 64 KB messages is 1.3 MB; most are under 2 KB), and the
 * gzip stream's backpressure holds the next fetch until the sink took the last one.
 *
 * Same rows, same bytes: the order is total (hour-query.ts), every line is built key by
 * key (line.ts), and gzip runs with fixed settings, no name and no timestamp in its header
 * (Node writes mtime 0). The zlib version is part of the cache key (src/export/cache.ts):
 * another zlib may compress the same lines differently.
 */

/** Bump when a line's format changes: the /archive cache and ETags follow it. */
export const FORMAT_VERSION = 1;

export const GZIP_OPTIONS = {
  level: 6,
  memLevel: 8,
  windowBits: 15,
  strategy: constants.Z_DEFAULT_STRATEGY,
  chunkSize: 64 * 1024,
} as const;

const FIRST_FETCH = 100;
const MAX_FETCH = 2_000;
const FETCH_BYTES = 4 * 1024 * 1024;

export interface HourFile {
  hour: string;
  /** Lines written (one per push). */
  pushes: number;
  /** Lines with `size` (and `commits`); the rest say nothing of their commits yet. */
  withSize: number;
  withCommits: number;
  /** Pushes whose commits are pending: no `size`, no `commits`. */
  pending: number;
  /** Commits listed in all lines. */
  commits: number;
  /** Compressed bytes and their SHA-256 (hex). */
  bytes: number;
  sha256: string;
}

export interface WriteOptions {
  /** Called after each fetch with the lines written so far. */
  onLines?: (lines: number) => void;
  signal?: AbortSignal;
  /** writeHourFile with a path decided after the write: the directory it goes into. */
  dir?: string;
}

/**
 * The hour's file into `out`, from the snapshot `run` belongs to (the caller's
 * transaction). Resolves once `out` has taken every byte.
 */
export async function writeHour(
  run: Run,
  hour: ArchiveHour,
  out: Writable,
  opts: WriteOptions = {},
): Promise<HourFile> {
  const file: HourFile = {
    hour: hour.name,
    pushes: 0,
    withSize: 0,
    withCommits: 0,
    pending: 0,
    commits: 0,
    bytes: 0,
    sha256: '',
  };
  const hash = createHash('sha256');
  const meter = new Transform({
    transform(chunk: Buffer, _enc, done) {
      hash.update(chunk);
      file.bytes += chunk.length;
      done(null, chunk);
    },
  });
  const gzip = createGzip(GZIP_OPTIONS);
  const finished = pipeline(gzip, meter, out);
  // Awaited below; until then a failed sink must not be an unhandled rejection.
  finished.catch(() => {});
  await run(`DECLARE gpi_export NO SCROLL CURSOR FOR ${HOUR_ROWS}`, [hour.start, hourEnd(hour)]);
  let size = FIRST_FETCH;
  try {
    for (;;) {
      opts.signal?.throwIfAborted();
      const rows = await run<HourRow>(`FETCH ${size} FROM gpi_export`);
      let text = '';
      for (const r of rows) {
        const row = toExportRow(r);
        text += `${exportLine(row)}\n`;
        file.pushes++;
        if (r.commits_state === 'pending') file.pending++;
        if (row.size !== null) file.withSize++;
        if (row.size !== null && row.commits !== null) {
          file.withCommits++;
          file.commits += Math.min(row.commits.length, MAX_LINE_COMMITS);
        }
      }
      if (text.length > 0 && !gzip.write(text)) {
        await Promise.race([once(gzip, 'drain'), finished]);
      }
      opts.onLines?.(file.pushes);
      if (rows.length < size) break;
      // Aim at FETCH_BYTES a fetch, from what the last one weighed.
      const perRow = Math.max(1, text.length / rows.length);
      size = Math.max(1, Math.min(MAX_FETCH, Math.floor(FETCH_BYTES / perRow)));
    }
    await run('CLOSE gpi_export');
  } catch (err) {
    gzip.destroy(err as Error);
    throw err;
  }
  gzip.end();
  await finished;
  file.sha256 = hash.digest('hex');
  return file;
}

/**
 * Runs `fn` in a read-only REPEATABLE READ transaction: every statement of it (the hour's
 * state, its rows) sees one snapshot, so a file and the state it was keyed by agree. The
 * session's time zone and date style are fixed, since row text feeds the fingerprint.
 */
export async function inHourSnapshot<T>(db: Db, fn: (run: Run) => Promise<T>): Promise<T> {
  return db
    .transaction()
    .setIsolationLevel('repeatable read')
    .setAccessMode('read only')
    .execute(async (trx) => {
      const run = runOn(trx);
      await run(`SET LOCAL TimeZone = 'UTC'`);
      await run(`SET LOCAL DateStyle = 'ISO, YMD'`);
      // A cursor over an hour is one long plan: JIT compiling it costs seconds and saves none.
      await run(`SET LOCAL jit = off`);
      return fn(run);
    });
}

/**
 * Writes the hour to `path` whole or not at all: into a temporary file beside it, renamed
 * over `path` once complete (a reader never sees half a file, a crash leaves no truncated
 * one under the real name: the next writer into the directory sweeps what a killed one
 * left, temporary-files.ts). `path` may be decided by what was written (the archive cache
 * names a file by its SHA-256).
 */
export async function writeHourFile(
  run: Run,
  hour: ArchiveHour,
  path: string | ((file: HourFile) => string),
  opts: WriteOptions = {},
): Promise<HourFile> {
  const dir = typeof path === 'string' ? dirname(path) : (opts.dir ?? '.');
  const tmp = join(dir, temporaryName(hourFileName(hour)));
  try {
    const file = await writeHour(run, hour, createWriteStream(tmp, { flags: 'wx' }), opts);
    await rename(tmp, typeof path === 'string' ? path : path(file));
    return file;
  } catch (err) {
    await rm(tmp, { force: true }).catch(() => {});
    throw err;
  }
}
