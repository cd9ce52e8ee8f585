import { createHash } from 'node:crypto';
import { mkdir, rename, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { Writable } from 'node:stream';
import { type ArchiveHour, hourFileName } from '../store/archive-hours.ts';
import type { Run } from './hour-query.ts';
import {
  type HourCounts,
  hourCounts,
  type ManifestFile,
  manifestText,
  type OpenGap,
  openGaps,
  writeManifest,
} from './manifest.ts';
import {
  type ParquetFiles,
  type ParquetOptions,
  parquetName,
  TABLES,
  type TableName,
  writeHourParquet,
} from './parquet.ts';
import { temporaryName } from './temporary-files.ts';
import { type HourFile, type WriteOptions, writeHour, writeHourFile } from './write.ts';

/**
 * An hour in every format asked for, with its manifest (ADR 0195), from one snapshot: the
 * JSON hour file, the two Parquet tables, and HOUR.manifest.json listing what was written.
 * bin/export writes them into a directory; /archive builds the same files into its cache
 * (`buildTables`), so a manifest it serves is the one `bin/export --format json,parquet`
 * writes of the same store.
 */

export const EXPORT_FORMATS = ['json', 'parquet'] as const;
export type ExportFormat = (typeof EXPORT_FORMATS)[number];

export interface HourExport {
  json: HourFile | null;
  parquet: ParquetFiles | null;
  counts: HourCounts;
  gaps: OpenGap[];
  manifest: { path: string; bytes: number; sha256: string };
}

/** What a manifest lists of the files, and the counts: all but the gaps. */
export interface HourParts {
  files: ManifestFile[];
  counts: HourCounts;
}

const tablePath = (table: TableName, hour: ArchiveHour) => `${table}/${parquetName(hour)}`;

function partsOf(hour: ArchiveHour, json: HourFile | null, parquet: ParquetFiles | null) {
  const files: ManifestFile[] = [];
  if (json) {
    files.push({
      path: hourFileName(hour),
      rows: json.pushes,
      bytes: json.bytes,
      sha256: json.sha256,
    });
  }
  if (parquet) {
    for (const t of TABLES) files.push({ path: tablePath(t, hour), ...parquet[t] });
  }
  return files;
}

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

/**
 * Writes the hour into `out` (`HOUR.json.gz`, `pushes/HOUR.parquet`,
 * `push_commits/HOUR.parquet`, as `formats` asks) and then `HOUR.manifest.json`.
 */
export async function exportHour(
  run: Run,
  hour: ArchiveHour,
  out: string,
  formats: ReadonlySet<ExportFormat>,
  opts: WriteOptions & ParquetOptions = {},
): Promise<HourExport> {
  const json = formats.has('json')
    ? await writeHourFile(run, hour, path.join(out, hourFileName(hour)), opts)
    : null;
  const parquet = formats.has('parquet')
    ? await writeHourParquet(
        run,
        hour,
        { pushes: path.join(out, 'pushes'), push_commits: path.join(out, 'push_commits') },
        () => parquetName(hour),
        opts,
      )
    : null;
  const counts = await hourCounts(run, hour);
  const gaps = await openGaps(run, hour);
  const text = manifestText(hour, partsOf(hour, json, parquet), counts, gaps);
  const file = await writeManifest(out, hour, text);
  return {
    json,
    parquet,
    counts,
    gaps,
    manifest: { path: file, bytes: Buffer.byteLength(text), sha256: sha256(text) },
  };
}

/** What /archive's cache recorded of a build of the tables. */
export interface TablesBuilt {
  /** The parts' SHA-256: names the build's files. */
  sha256: string;
  bytes: number;
  pushes: number;
  pending: number;
}

/** The cache's name for a file of the tables' build named by `sha256`. */
export function tablesFileName(
  hour: ArchiveHour,
  sha256: string,
  what: TableName | 'parts',
): string {
  return `${hour.name}.${sha256.slice(0, 40)}.${what === 'parts' ? 'parts.json' : `${what}.parquet`}`;
}

/**
 * /archive's build: the two tables into `dir`, named by the SHA-256 of the parts (files and
 * counts), and the parts beside them, `HOUR.<sha>.parts.json`; the JSON file is written
 * through only to be measured (the cache keeps its own, the same bytes).
 */
export async function buildTables(run: Run, dir: string, hour: ArchiveHour): Promise<TablesBuilt> {
  const json = await writeHour(
    run,
    hour,
    new Writable({
      write(_c, _e, cb) {
        cb();
      },
    }),
  );
  const counts = await hourCounts(run, hour);
  let text = '';
  let sha = '';
  const parquet = await writeHourParquet(
    run,
    hour,
    { pushes: dir, push_commits: dir },
    (table, files) => {
      if (!text) {
        text = `${JSON.stringify({ files: partsOf(hour, json, files), counts })}\n`;
        sha = sha256(text);
      }
      return tablesFileName(hour, sha, table);
    },
  );
  await mkdir(dir, { recursive: true });
  const tmp = path.join(dir, temporaryName(`${hour.name}.manifest.json`));
  try {
    await writeFile(tmp, text, { flag: 'wx' });
    await rename(tmp, path.join(dir, tablesFileName(hour, sha, 'parts')));
  } catch (err) {
    await rm(tmp, { force: true }).catch(() => {});
    throw err;
  }
  return {
    sha256: sha,
    bytes: parquet.pushes.bytes + parquet.push_commits.bytes + Buffer.byteLength(text),
    pushes: json.pushes,
    pending: json.pending,
  };
}

/** The manifest /archive serves: a build's parts and the gaps open now. */
export function servedManifest(hour: ArchiveHour, partsText: string, gaps: OpenGap[]): string {
  const parts = JSON.parse(partsText) as HourParts;
  return manifestText(hour, parts.files, parts.counts, gaps);
}
