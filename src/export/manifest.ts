import { rename, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import {
  COMMITS_STATES,
  type CommitsState,
  PUSH_ORIGINS,
  type PushOrigin,
} from '../platform/db/columns.ts';
import { type ArchiveHour, hourEnd } from '../store/archive-hours.ts';
import { type Run, VISIBLE } from './hour-query.ts';
import { temporaryName } from './temporary-files.ts';

/**
 * An hour's manifest (ADR 0195), `HOUR.manifest.json` beside what an export wrote: each
 * file with its bytes and SHA-256, and what the hour holds, read in the snapshot the files
 * were written from:
 *
 * - pushes by origin, and by commits state, every state listed with its count (a reader
 *   summing `complete` never takes a `pending` push for a push without commits);
 * - the gaps still open over the hour: pushes may be missing there.
 *
 * Nothing in it depends on when or where it was written (no time, no host, no absolute
 * path): the same store gives the same bytes, in bin/export and at /archive.
 */

export const MANIFEST_VERSION = 1;

export interface ManifestFile {
  /** Relative to the manifest's directory: `2026-12-03-5.json.gz`, `pushes/2026-12-03-5.parquet`. */
  path: string;
  /** Lines (JSON) or rows (a table). */
  rows: number;
  bytes: number;
  sha256: string;
}

export interface HourCounts {
  pushes: number;
  by_origin: Record<PushOrigin, number>;
  by_commits_state: Record<CommitsState, number>;
}

export interface OpenGap {
  id: string;
  from: string;
  to: string;
}

export function manifestName(hour: ArchiveHour): string {
  return `${hour.name}.manifest.json`;
}

/** The hour's visible pushes counted by origin and by commits state (every key present). */
export async function hourCounts(run: Run, hour: ArchiveHour): Promise<HourCounts> {
  const rows = await run<{ origin: PushOrigin; state: CommitsState; n: string }>(
    `SELECT p.origin, p.commits_state AS state, count(*) AS n
     FROM push_events p JOIN repositories r ON r.id = p.repository_id
     WHERE p.created_at >= $1 AND p.created_at < $2 AND ${VISIBLE}
     GROUP BY 1, 2`,
    [hour.start, hourEnd(hour)],
  );
  const counts: HourCounts = {
    pushes: 0,
    by_origin: Object.fromEntries(PUSH_ORIGINS.map((o) => [o, 0])) as Record<PushOrigin, number>,
    by_commits_state: Object.fromEntries(COMMITS_STATES.map((s) => [s, 0])) as Record<
      CommitsState,
      number
    >,
  };
  for (const r of rows) {
    const n = Number(r.n);
    counts.pushes += n;
    counts.by_origin[r.origin] += n;
    counts.by_commits_state[r.state] += n;
  }
  return counts;
}

/** The gaps open over the hour (as the /archive index counts them), oldest first. */
export async function openGaps(run: Run, hour: ArchiveHour): Promise<OpenGap[]> {
  const rows = await run<{ id: string; from_at: Date; to_at: Date }>(
    `SELECT id::text AS id, from_at, to_at FROM gaps
     WHERE state = 'open' AND to_at >= $1 AND from_at < $2
     ORDER BY from_at, id`,
    [hour.start, hourEnd(hour)],
  );
  return rows.map((g) => ({ id: g.id, from: g.from_at.toISOString(), to: g.to_at.toISOString() }));
}

/** The manifest's bytes: keys in a fixed order, files by path, one trailing newline. */
export function manifestText(
  hour: ArchiveHour,
  files: readonly ManifestFile[],
  counts: HourCounts,
  gaps: readonly OpenGap[],
): string {
  const manifest = {
    manifest_version: MANIFEST_VERSION,
    hour: hour.name,
    from: hour.start.toISOString(),
    to: hourEnd(hour).toISOString(),
    files: [...files]
      .sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0))
      .map((f) => ({ path: f.path, rows: f.rows, bytes: f.bytes, sha256: f.sha256 })),
    pushes: counts.pushes,
    pushes_by_origin: Object.fromEntries(PUSH_ORIGINS.map((o) => [o, counts.by_origin[o]])),
    pushes_by_commits_state: Object.fromEntries(
      COMMITS_STATES.map((s) => [s, counts.by_commits_state[s]]),
    ),
    gaps_open: gaps.map((g) => ({ id: g.id, from: g.from, to: g.to })),
  };
  return `${JSON.stringify(manifest, null, 2)}\n`;
}

/** Writes `text` as DIR/HOUR.manifest.json, whole or not at all. */
export async function writeManifest(dir: string, hour: ArchiveHour, text: string): Promise<string> {
  const file = path.join(dir, manifestName(hour));
  const tmp = path.join(dir, temporaryName(manifestName(hour)));
  try {
    await writeFile(tmp, text, { flag: 'wx' });
    await rename(tmp, file);
  } catch (err) {
    await rm(tmp, { force: true }).catch(() => {});
    throw err;
  }
  return file;
}
