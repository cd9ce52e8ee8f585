import { Writable } from 'node:stream';
import { type DuckDBConnection, DuckDBInstance } from '@duckdb/node-api';
import type { Db } from '../platform/db/pool.ts';
import { type ArchiveHour, hourFileName } from '../store/archive-hours.ts';
import { type Month, monthEnd, monthHours } from '../store/history-months.ts';
import { openReasonsBetween } from '../store/open-hours.ts';
import { type ArchivePlace, localPath, measure, readSmall } from './archive-place.ts';
import { type Run, runOn } from './hour-query.ts';
import { type HourCounts, hourCounts, MANIFEST_VERSION, manifestName } from './manifest.ts';
import { parquetName, TABLES, type TableName } from './parquet.ts';
import { COMMIT_ROWS } from './parquet-rows.ts';
import { inHourSnapshot, writeHour } from './write.ts';

/**
 * Whether a month is exported (ADR 0201): every hour of it has, in the place, the JSON hour,
 * the two Parquet tables and the manifest `bin/export --format json,parquet` writes
 * (manifest.ts), and the files say what the store holds now. Each check reads the files:
 *
 * - every file the manifest must list is there, with the bytes and SHA-256 it lists;
 * - the manifest's pushes (by origin, by commits state) are the store's for the hour, and its
 *   rows are the store's pushes and commit rows;
 * - the JSON file is byte for byte what the store would write now (the export is
 *   deterministic: the hour is written again into a hash, not to disk);
 * - in a local place, each Parquet table is read by DuckDB and has the rows the manifest says;
 * - the hour holds no push the export never writes (a private repository's): dropping the
 *   month would lose it;
 * - the hour is not open (an import writing it, a gap still being filled): pushes may still
 *   be added to it.
 *
 * The first problem found is the answer: one is enough to keep the month.
 */

export const HOUR_PROBLEMS = [
  'missing',
  'manifest_unreadable',
  'file_mismatch',
  'parquet_unreadable',
  'counts_mismatch',
  'json_differs',
  'unexportable',
  'open',
  'unreadable',
] as const;
export type HourProblemKind = (typeof HOUR_PROBLEMS)[number];

export interface HourProblem {
  hour: string;
  /** The place's label (null: the store's side, whatever the place). */
  place: string | null;
  problem: HourProblemKind;
  detail: string;
}

/** What the store holds of an hour, read in one snapshot. */
export interface StoreHour {
  counts: HourCounts;
  /** Every push of the hour, the ones the export never writes included. */
  all: number;
  /** The rows of its push_commits table. */
  commitRows: number;
  /** The JSON hour the store would write now. */
  json: { bytes: number; sha256: string };
}

/** The hour's files relative to a place: the JSON hour and each table. */
export function hourFiles(hour: ArchiveHour): { json: string } & Record<TableName, string> {
  return {
    json: hourFileName(hour),
    pushes: `pushes/${parquetName(hour)}`,
    push_commits: `push_commits/${parquetName(hour)}`,
  };
}

export async function storeHour(run: Run, hour: ArchiveHour): Promise<StoreHour> {
  const counts = await hourCounts(run, hour);
  const params = [hour.start, new Date(hour.start.getTime() + 3_600_000)];
  const all = await run<{ n: string }>(
    'SELECT count(*) AS n FROM push_events p WHERE p.created_at >= $1 AND p.created_at < $2',
    params,
  );
  const commits = await run<{ n: string }>(`SELECT count(*) AS n FROM (${COMMIT_ROWS}) x`, params);
  const file = await writeHour(
    run,
    hour,
    new Writable({
      write(_c, _e, cb) {
        cb();
      },
    }),
  );
  return {
    counts,
    all: Number(all[0]?.n ?? 0),
    commitRows: Number(commits[0]?.n ?? 0),
    json: { bytes: file.bytes, sha256: file.sha256 },
  };
}

interface ListedFile {
  path: string;
  rows: number;
  bytes: number;
  sha256: string;
}

interface Manifest {
  manifest_version: number;
  hour: string;
  files: ListedFile[];
  pushes: number;
  pushes_by_origin: Record<string, number>;
  pushes_by_commits_state: Record<string, number>;
}

const MANIFEST_MAX_BYTES = 1024 * 1024;

function parseManifest(text: string, hour: ArchiveHour): Manifest | string {
  let m: Manifest;
  try {
    m = JSON.parse(text) as Manifest;
  } catch (err) {
    return `not JSON: ${(err as Error).message}`;
  }
  if (m === null || typeof m !== 'object') return 'not an object';
  if (m.manifest_version !== MANIFEST_VERSION) {
    return `manifest_version ${JSON.stringify(m.manifest_version)}, not ${MANIFEST_VERSION}`;
  }
  if (m.hour !== hour.name) return `it is the manifest of ${JSON.stringify(m.hour)}`;
  if (!Array.isArray(m.files) || typeof m.pushes !== 'number') return 'no files or pushes';
  return m;
}

const sameCounts = (a: Record<string, number> | undefined, b: Record<string, number>) =>
  a !== undefined &&
  typeof a === 'object' &&
  Object.keys(b).every((k) => a[k] === b[k]) &&
  Object.keys(a).every((k) => a[k] === b[k]);

function describeCounts(m: Manifest, c: HourCounts): string {
  const state = (r: Record<string, number>) =>
    Object.entries(r ?? {})
      .filter(([, n]) => n > 0)
      .map(([k, n]) => `${k} ${n}`)
      .join(', ');
  return `the manifest says ${m.pushes} pushes (${state(m.pushes_by_commits_state)}), the store holds ${c.pushes} (${state(c.by_commits_state)})`;
}

/** Rows DuckDB reads from a Parquet file, or the error it gave. */
async function parquetRows(duck: DuckDBConnection, file: string): Promise<number | string> {
  try {
    const r = await duck.runAndReadAll(
      `SELECT count(*)::BIGINT AS n FROM read_parquet('${file.replaceAll("'", "''")}')`,
    );
    return Number(r.getRows()[0]![0]);
  } catch (err) {
    return (err as Error).message.split('\n')[0]!;
  }
}

/** The hour's first problem in `place`, or null when it is exported there. */
export async function checkHourIn(
  place: ArchivePlace,
  hour: ArchiveHour,
  store: StoreHour,
  duck: DuckDBConnection | null,
): Promise<HourProblem | null> {
  const problem = (kind: HourProblemKind, detail: string): HourProblem => ({
    hour: hour.name,
    place: place.label,
    problem: kind,
    detail,
  });
  const files = hourFiles(hour);
  try {
    const raw = await readSmall(place, manifestName(hour), MANIFEST_MAX_BYTES);
    if (raw === null) return problem('missing', `${manifestName(hour)} is not there`);
    const m = parseManifest(raw.toString('utf8'), hour);
    if (typeof m === 'string') return problem('manifest_unreadable', `${manifestName(hour)}: ${m}`);
    const listed = new Map(m.files.map((f) => [f.path, f]));
    for (const rel of [files.json, files.pushes, files.push_commits]) {
      const entry = listed.get(rel);
      if (!entry)
        return problem('manifest_unreadable', `${manifestName(hour)} does not list ${rel}`);
      const got = await measure(place, rel);
      if (got === null) return problem('missing', `${rel} is not there`);
      if (got.bytes !== entry.bytes || got.sha256 !== entry.sha256) {
        return problem(
          'file_mismatch',
          `${rel} is ${got.bytes} bytes, sha256 ${got.sha256.slice(0, 16)}…; the manifest lists ${entry.bytes} bytes, sha256 ${String(entry.sha256).slice(0, 16)}…`,
        );
      }
    }
    const c = store.counts;
    if (
      m.pushes !== c.pushes ||
      !sameCounts(m.pushes_by_origin, c.by_origin) ||
      !sameCounts(m.pushes_by_commits_state, c.by_commits_state) ||
      listed.get(files.json)!.rows !== c.pushes ||
      listed.get(files.pushes)!.rows !== c.pushes
    ) {
      return problem('counts_mismatch', describeCounts(m, c));
    }
    if (listed.get(files.push_commits)!.rows !== store.commitRows) {
      return problem(
        'counts_mismatch',
        `the manifest says ${listed.get(files.push_commits)!.rows} commit rows, the store holds ${store.commitRows}`,
      );
    }
    if (listed.get(files.json)!.sha256 !== store.json.sha256) {
      return problem(
        'json_differs',
        `${files.json} is not what the store writes of the hour now (sha256 ${store.json.sha256.slice(0, 16)}…): a push or its commits changed since it was exported`,
      );
    }
    if (duck) {
      for (const t of TABLES) {
        const rows = await parquetRows(duck, localPath(place, files[t])!);
        if (typeof rows === 'string') return problem('parquet_unreadable', `${files[t]}: ${rows}`);
        if (rows !== listed.get(files[t])!.rows) {
          return problem(
            'parquet_unreadable',
            `${files[t]} holds ${rows} rows, the manifest lists ${listed.get(files[t])!.rows}`,
          );
        }
      }
    }
  } catch (err) {
    return problem('unreadable', (err as Error).message);
  }
  return null;
}

export interface MonthCheck {
  month: string;
  /** Hours checked (the month's, all of them when exported). */
  hours: number;
  /** Pushes the month holds (the hours checked). */
  pushes: number;
  /**
   * The month's count of changing writes (archive_hour_changes) read before the first hour's
   * snapshot: a drop that reads the same under its lock drops what was verified.
   */
  changes: string;
  /** The first problem, or null: exported in every place. */
  problem: HourProblem | null;
  verifiedAt: Date;
}

/** The month's count of committed writes that may have changed one of its hours' files. */
export async function monthChanges(run: Run, month: Month): Promise<string> {
  const rows = await run<{ changes: string }>(
    `SELECT coalesce(sum(changes), 0)::text AS changes FROM archive_hour_changes
     WHERE hour >= $1 AND hour < $2`,
    [month.start, monthEnd(month)],
  );
  return rows[0]?.changes ?? '0';
}

/**
 * Checks every hour of `month` against the store and in every place, stopping at the first
 * problem. `onHour` is told each hour checked (progress).
 */
export async function checkMonth(
  db: Db,
  month: Month,
  places: readonly ArchivePlace[],
  o: { now: Date; signal?: AbortSignal; onHour?: (hour: ArchiveHour) => void },
): Promise<MonthCheck> {
  const check: MonthCheck = {
    month: month.name,
    hours: 0,
    pushes: 0,
    changes: '0',
    problem: null,
    verifiedAt: o.now,
  };
  await db.transaction().execute(async (trx) => {
    const run = runOn(trx);
    check.changes = await monthChanges(run, month);
    const open = await openReasonsBetween(run, month.start, monthEnd(month), o.now);
    for (const [t, reasons] of open) {
      if (reasons.length > 0) {
        const hour = monthHours(month).find((h) => h.start.getTime() === t);
        check.problem = {
          hour: hour?.name ?? new Date(t).toISOString(),
          place: null,
          problem: 'open',
          detail: `pushes may still be added to it (${reasons.join(', ')})`,
        };
        return;
      }
    }
  });
  if (check.problem) return check;
  const local = places.some((p) => p.dir !== null);
  const instance = local
    ? await DuckDBInstance.create(':memory:', {
        threads: '1',
        autoinstall_known_extensions: 'false',
        autoload_known_extensions: 'false',
      })
    : null;
  const duck = instance ? await instance.connect() : null;
  try {
    for (const hour of monthHours(month)) {
      o.signal?.throwIfAborted();
      const store = await inHourSnapshot(db, (run) => storeHour(run, hour));
      if (store.all !== store.counts.pushes) {
        check.problem = {
          hour: hour.name,
          place: null,
          problem: 'unexportable',
          detail: `${store.all - store.counts.pushes} of its ${store.all} pushes are never exported (a private repository's, or a webhook's of a repository not known public): dropping the month would lose them`,
        };
        return check;
      }
      for (const place of places) {
        const p = await checkHourIn(place, hour, store, place.dir !== null ? duck : null);
        if (p) {
          check.problem = p;
          return check;
        }
      }
      check.hours++;
      check.pushes += store.counts.pushes;
      o.onHour?.(hour);
    }
    return check;
  } finally {
    duck?.closeSync();
    instance?.closeSync();
  }
}
