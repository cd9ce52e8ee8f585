import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { mkdir, mkdtemp, rename, rm, stat } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import {
  type DuckDBAppender,
  type DuckDBConnection,
  DuckDBInstance,
  version as duckdbVersion,
  timestampTZValue,
} from '@duckdb/node-api';
import { type ArchiveHour, hourEnd } from '../store/archive-hours.ts';
import { HOUR_ROWS, type HourRow, type Run, toExportRow } from './hour-query.ts';
import { COMMIT_ROWS, type CommitRow, createdAtMicros } from './parquet-rows.ts';
import { temporaryName } from './temporary-files.ts';

/**
 * An hour as two Parquet tables (ADR 0195): `pushes`, one row a push, and `push_commits`,
 * one row a commit of a push in its order. Rows are read by cursors in the caller's
 * snapshot and appended to an in-memory DuckDB table a fetch at a time (DuckDB spills to a
 * temporary directory past its memory limit), then written by DuckDB's COPY. Memory is
 * bounded by one fetch and DuckDB's limit, not by the hour.
 *
 * Same rows, same bytes: one thread (rows keep the order they were appended in, row groups
 * are cut at the same rows), fixed compression and row group size, and no time or host in
 * the file (DuckDB writes its version in `created_by`, which is part of PARQUET_FORMAT: the
 * /archive cache keys on it).
 */

/** Bump when a table's columns or their types change. */
export const PARQUET_VERSION = 1;

/** What decides the tables' bytes besides the rows. */
export const PARQUET_FORMAT = `parquet-v${PARQUET_VERSION}/duckdb-${duckdbVersion()}`;

export const TABLES = ['pushes', 'push_commits'] as const;
export type TableName = (typeof TABLES)[number];

/** Each table's columns in order, with their DuckDB (and so Parquet) types. */
export const COLUMNS: Record<TableName, readonly (readonly [string, string])[]> = {
  pushes: [
    ['event_id', 'BIGINT'],
    ['created_at', 'TIMESTAMPTZ'],
    ['actor_id', 'BIGINT'],
    ['actor_login', 'VARCHAR'],
    ['repo_id', 'BIGINT'],
    ['repo_name', 'VARCHAR'],
    ['org_id', 'BIGINT'],
    ['org_login', 'VARCHAR'],
    ['push_id', 'BIGINT'],
    ['ref', 'VARCHAR'],
    ['head', 'VARCHAR'],
    ['before', 'VARCHAR'],
    ['size', 'INTEGER'],
    ['distinct_size', 'INTEGER'],
    ['commits_state', 'VARCHAR'],
    ['origin', 'VARCHAR'],
  ],
  push_commits: [
    ['event_id', 'BIGINT'],
    ['repo_id', 'BIGINT'],
    ['push_id', 'BIGINT'],
    ['ref', 'VARCHAR'],
    ['head', 'VARCHAR'],
    ['position', 'INTEGER'],
    ['sha', 'VARCHAR'],
    ['author_name', 'VARCHAR'],
    ['author_email', 'VARCHAR'],
    ['author_id', 'BIGINT'],
    ['author_login', 'VARCHAR'],
    ['message', 'VARCHAR'],
    ['distinct', 'BOOLEAN'],
    ['authored_at', 'TIMESTAMPTZ'],
    ['committed_at', 'TIMESTAMPTZ'],
  ],
};

const COPY_OPTIONS = 'FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE 122880';
/** DuckDB's memory for one hour's tables; past it, it spills to its temporary directory. */
const MEMORY_LIMIT = '128MB';
const FIRST_FETCH = 200;
const MAX_FETCH = 5_000;
const FETCH_BYTES = 4 * 1024 * 1024;

export interface TableFile {
  rows: number;
  bytes: number;
  sha256: string;
}

export type ParquetFiles = Record<TableName, TableFile>;

export interface ParquetOptions {
  signal?: AbortSignal;
  /** Called after each fetch with the rows appended so far to a table. */
  onRows?: (table: TableName, rows: number) => void;
}

/** The hour's file name in a table's directory: `pushes/2026-12-03-5.parquet`. */
export function parquetName(hour: ArchiveHour): string {
  return `${hour.name}.parquet`;
}

type Value = string | number | boolean | bigint | null;

function appendRow(app: DuckDBAppender, table: TableName, values: readonly Value[]): void {
  const cols = COLUMNS[table];
  values.forEach((v, i) => {
    if (v === null) app.appendNull();
    else if (cols[i]![1] === 'BIGINT') app.appendBigInt(BigInt(v as string));
    else if (cols[i]![1] === 'INTEGER') app.appendInteger(v as number);
    else if (cols[i]![1] === 'BOOLEAN') app.appendBoolean(v as boolean);
    else if (cols[i]![1] === 'TIMESTAMPTZ') {
      app.appendTimestampTZ(timestampTZValue(BigInt(v as string | bigint)));
    } else app.appendVarchar(v as string);
  });
  app.endRow();
}

function pushValues(r: HourRow): Value[] {
  const e = toExportRow(r);
  return [
    e.id,
    createdAtMicros(e.createdAt),
    e.actorId,
    e.login,
    e.repositoryId,
    e.fullName,
    e.org?.id ?? null,
    e.org?.login ?? null,
    e.pushId,
    e.ref,
    e.head,
    e.before,
    e.size,
    e.distinctSize,
    r.commits_state,
    r.origin,
  ];
}

function commitValues(c: CommitRow): Value[] {
  return [
    c.event_id,
    c.repo_id,
    c.push_id,
    c.ref,
    c.head,
    c.position,
    c.sha,
    c.author_name,
    c.author_email,
    c.author_id,
    c.author_login,
    c.message,
    c.distinct,
    c.authored_us,
    c.committed_us,
  ];
}

/** Roughly what a fetched row weighs: its text. */
function weight(values: readonly Value[]): number {
  let n = 16;
  for (const v of values) n += typeof v === 'string' ? v.length : 8;
  return n;
}

/** Walks `query` by a cursor, appending each row; returns the rows appended. */
async function fill(
  run: Run,
  conn: DuckDBConnection,
  table: TableName,
  query: string,
  params: readonly unknown[],
  toValues: (row: never) => Value[],
  opts: ParquetOptions,
): Promise<number> {
  const cols = COLUMNS[table].map(([name, type]) => `"${name}" ${type}`).join(', ');
  await conn.run(`CREATE TABLE "${table}" (${cols})`);
  const app = await conn.createAppender(table);
  const cursor = `gpi_parquet_${table}`;
  let rows = 0;
  try {
    await run(`DECLARE ${cursor} NO SCROLL CURSOR FOR ${query}`, params);
    let size = FIRST_FETCH;
    for (;;) {
      opts.signal?.throwIfAborted();
      const fetched = await run<never>(`FETCH ${size} FROM ${cursor}`);
      let bytes = 0;
      for (const r of fetched) {
        const values = toValues(r);
        bytes += weight(values);
        appendRow(app, table, values);
      }
      app.flushSync();
      rows += fetched.length;
      opts.onRows?.(table, rows);
      if (fetched.length < size) break;
      size = Math.max(
        1,
        Math.min(MAX_FETCH, Math.floor(FETCH_BYTES / Math.max(1, bytes / fetched.length))),
      );
    }
    await run(`CLOSE ${cursor}`);
  } finally {
    app.closeSync();
  }
  return rows;
}

async function sha256Of(file: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(file)) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

/**
 * Writes the hour's two tables from `run`'s snapshot: each into a temporary file in its
 * directory (`dirs`), renamed to `name(table, files)` there once both are complete (the
 * /archive cache names them by what was written).
 */
export async function writeHourParquet(
  run: Run,
  hour: ArchiveHour,
  dirs: Record<TableName, string>,
  name: (table: TableName, files: ParquetFiles) => string,
  opts: ParquetOptions = {},
): Promise<ParquetFiles> {
  const scratch = await mkdtemp(path.join(os.tmpdir(), 'gpi-parquet-'));
  const tmp = {} as Record<TableName, string>;
  const duck = await DuckDBInstance.create(':memory:', {
    threads: '1',
    memory_limit: MEMORY_LIMIT,
    temp_directory: scratch,
    // Everything needed is built in; nothing is ever downloaded.
    autoinstall_known_extensions: 'false',
    autoload_known_extensions: 'false',
  });
  let conn: DuckDBConnection | null = null;
  try {
    conn = await duck.connect();
    const params = [hour.start, hourEnd(hour)];
    const files = {} as ParquetFiles;
    for (const table of TABLES) {
      const rows =
        table === 'pushes'
          ? await fill(run, conn, table, HOUR_ROWS, params, pushValues as never, opts)
          : await fill(run, conn, table, COMMIT_ROWS, params, commitValues as never, opts);
      await mkdir(dirs[table], { recursive: true });
      tmp[table] = path.join(dirs[table], temporaryName(parquetName(hour)));
      await conn.run(`COPY "${table}" TO '${tmp[table].replaceAll("'", "''")}' (${COPY_OPTIONS})`);
      await conn.run(`DROP TABLE "${table}"`);
      files[table] = {
        rows,
        bytes: (await stat(tmp[table])).size,
        sha256: await sha256Of(tmp[table]),
      };
    }
    for (const table of TABLES) {
      await rename(tmp[table], path.join(dirs[table], name(table, files)));
    }
    return files;
  } catch (err) {
    for (const t of Object.values(tmp)) await rm(t, { force: true }).catch(() => {});
    throw err;
  } finally {
    conn?.closeSync();
    duck.closeSync();
    await rm(scratch, { recursive: true, force: true }).catch(() => {});
  }
}
