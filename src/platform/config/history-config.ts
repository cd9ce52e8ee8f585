import path from 'node:path';
import { ConfigError } from '../errors.ts';
import { quoted } from '../quote.ts';
import { withoutUserinfo } from '../redact.ts';

/**
 * How much history Postgres keeps, and where an older month must be first (ADR 0201):
 *
 * - `HISTORY_MONTHS` unset: every month is kept. N: the current month and the N-1 before it;
 *   an older month is dropped once every hour of it is verified where it was exported.
 * - `ARCHIVE_DIR`: a local directory. Retention exports a month's missing hours into it
 *   (`bin/export --month` writes there too) and verifies them there.
 * - `RETENTION_MIRROR`: one of the mirrors of GHARCHIVE_URL (a file:// directory or an
 *   http(s) mirror); the month must be verified there too. Read, never written.
 *
 * A month is dropped only when it is verified in every place that is set; with
 * HISTORY_MONTHS set and neither place, nothing could ever be dropped: refused at start.
 */
export interface HistoryConfig {
  /** HISTORY_MONTHS, or null: keep everything. */
  readonly months: number | null;
  /** ARCHIVE_DIR as an absolute path, or null. */
  readonly archiveDir: string | null;
  /** RETENTION_MIRROR as GHARCHIVE_URL lists it (a userinfo kept, to read with), or null. */
  readonly mirror: string | null;
}

export function parseHistory(
  months: number | undefined,
  archiveDir: string | undefined,
  mirror: string | undefined,
  archiveMirrors: readonly string[],
): HistoryConfig {
  let listed: string | null = null;
  if (mirror !== undefined) {
    const want = withoutUserinfo(mirror.trim()).replace(/\/+$/, '');
    listed = archiveMirrors.find((m) => withoutUserinfo(m) === want) ?? null;
    if (listed === null) {
      throw new ConfigError(
        'RETENTION_MIRROR',
        `must be one of the mirrors in GHARCHIVE_URL, so that bin/backfill can read a dropped month back from it (got ${quoted(withoutUserinfo(mirror))})`,
      );
    }
  }
  if (months !== undefined && archiveDir === undefined && listed === null) {
    throw new ConfigError(
      'HISTORY_MONTHS',
      'needs ARCHIVE_DIR or RETENTION_MIRROR: a month is dropped only once it is exported and verified there',
    );
  }
  return {
    months: months ?? null,
    archiveDir: archiveDir === undefined ? null : path.resolve(archiveDir),
    mirror: listed,
  };
}
