import { sql } from 'kysely';
import type { Db } from '../platform/db/pool.ts';
import { type ArchiveHour, hourEnd } from '../store/archive-hours.ts';
import type { Run } from './hour-query.ts';

/**
 * What /archive knows of an hour without reading its rows (ADR 0185). Triggers on every table
 * an hour file's lines are read from (migration 2026-12-04T1100_archive_hour_state) count, per
 * hour, the committed writes that may have changed it: archive_hour_changes, whose sum for an
 * hour only grows. archive_hour_files records, per hour and file format, the count and the
 * snapshot a file was built in and the file's SHA-256. So a request reads two short rows:
 * when the count is the one the file was built at, the file is the hour as it is now.
 *
 * One write changes an hour without counting there: an account's rename (push_events has no
 * index on actor_id to find its hours). Renames are logged with their transaction id, and a
 * file built before one is checked once: does its hour hold a push of a renamed account?
 * (renamedSince: one pass over that hour's pushes, then the file's snapshot moves on.)
 */

/** An hour's count of changing writes, as text (a bigint sum): compared, never computed with. */
export async function hourChanges(run: Run, hour: ArchiveHour): Promise<string> {
  const rows = await run<{ changes: string }>(
    'SELECT coalesce(sum(changes), 0)::text AS changes FROM archive_hour_changes WHERE hour = $1',
    [hour.start],
  );
  return rows[0]?.changes ?? '0';
}

/** What a build of the hour produced, and the state it was read in. */
export interface BuiltHour {
  changes: string;
  /** The build's snapshot (pg_snapshot as text). */
  snapshot: string;
  sha256: string;
  bytes: number;
  pushes: number;
  pending: number;
}

export async function builtHour(
  run: Run,
  hour: ArchiveHour,
  format: string,
): Promise<BuiltHour | null> {
  const rows = await run<{
    changes: string;
    snapshot: string;
    sha256: string;
    bytes: string;
    pushes: number;
    pending: number;
  }>(
    `SELECT changes::text AS changes, snapshot::text AS snapshot, sha256, bytes, pushes, pending
     FROM archive_hour_files WHERE hour = $1 AND format = $2`,
    [hour.start, format],
  );
  const r = rows[0];
  if (!r) return null;
  return { ...r, bytes: Number(r.bytes) };
}

/** The snapshot `run` reads in (its transaction's, under REPEATABLE READ), as text. */
export async function currentSnapshot(run: Run): Promise<string> {
  const rows = await run<{ s: string }>('SELECT pg_current_snapshot()::text AS s');
  return rows[0]!.s;
}

const NEWER_RENAMES = `SELECT r.actor_id FROM archive_renamed_actors r
  WHERE r.xid >= pg_snapshot_xmin($1::pg_snapshot) AND NOT pg_visible_in_snapshot(r.xid, $1::pg_snapshot)`;

/**
 * Since `snapshot`, was an account renamed? `null` when none was; else whether the hour holds
 * a push of one (its file shows the old login then).
 */
export async function renamedSince(
  run: Run,
  hour: ArchiveHour,
  snapshot: string,
): Promise<boolean | null> {
  const any = await run<{ any: boolean }>(`SELECT EXISTS (${NEWER_RENAMES}) AS any`, [snapshot]);
  if (!any[0]?.any) return null;
  const hit = await run<{ hit: boolean }>(
    `SELECT EXISTS (
       SELECT 1 FROM push_events p
       WHERE p.created_at >= $2 AND p.created_at < $3 AND p.actor_id IN (${NEWER_RENAMES})) AS hit`,
    [snapshot, hour.start, hourEnd(hour)],
  );
  return hit[0]?.hit === true;
}

/**
 * Records a build. A row of a higher count, or of the same count read in a later snapshot
 * (a rename seen since), is never replaced by an older build finishing late.
 */
export async function recordBuilt(
  db: Db,
  hour: ArchiveHour,
  format: string,
  b: BuiltHour,
): Promise<void> {
  await sql`
    INSERT INTO archive_hour_files AS f
      (hour, format, changes, snapshot, sha256, bytes, pushes, pending)
    VALUES (${hour.start}, ${format}, ${b.changes}::bigint, ${b.snapshot}::pg_snapshot,
      ${b.sha256}, ${b.bytes}, ${b.pushes}, ${b.pending})
    ON CONFLICT (hour, format) DO UPDATE SET
      changes = excluded.changes, snapshot = excluded.snapshot, sha256 = excluded.sha256,
      bytes = excluded.bytes, pushes = excluded.pushes, pending = excluded.pending,
      built_at = now()
    WHERE f.changes < excluded.changes
       OR (f.changes = excluded.changes
           AND pg_snapshot_xmax(f.snapshot) <= pg_snapshot_xmax(excluded.snapshot))`.execute(db);
  await pruneRenames(db);
}

/**
 * The file recorded for the hour is still the hour as of `snapshot` (renames since its own
 * snapshot touch no push of the hour): the next request need not look again.
 */
export async function confirmBuilt(
  db: Db,
  hour: ArchiveHour,
  format: string,
  b: BuiltHour,
  snapshot: string,
): Promise<void> {
  await sql`
    UPDATE archive_hour_files SET snapshot = ${snapshot}::pg_snapshot
    WHERE hour = ${hour.start} AND format = ${format} AND changes = ${b.changes}::bigint
      AND sha256 = ${b.sha256} AND snapshot::text = ${b.snapshot}`.execute(db);
  await pruneRenames(db);
}

/**
 * Renames every recorded file's snapshot sees are spent. A day's margin covers a build whose
 * snapshot is taken but not yet recorded (a build reads an hour in minutes, not days).
 */
async function pruneRenames(db: Db): Promise<void> {
  await sql`
    DELETE FROM archive_renamed_actors
    WHERE renamed_at < now() - interval '1 day'
      AND xid < coalesce((SELECT min(pg_snapshot_xmin(snapshot)) FROM archive_hour_files),
                         pg_snapshot_xmin(pg_current_snapshot()))`.execute(db);
}
