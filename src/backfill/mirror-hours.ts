import { sql } from 'kysely';
import { ladderIntervalSql } from '../platform/attempts.ts';
import type { Db } from '../platform/db/pool.ts';
import { withoutUserinfo } from '../platform/redact.ts';
import { RETRY_WINDOW_MS } from '../store/archive-hours.ts';

/**
 * What each mirror gave each hour of a gap (docs/mirrors.md): the gap's checkpoints in
 * backfill_files, one per (hour, mirror). A gap is filled once every hour was read from one
 * mirror; a mirror that lacked an hour then (missing, or failing) is asked again until the
 * hour's retry window ends (48 h after the hour), and what it adds is counted on the same
 * gap (its checkpoint's pushes_created, which gaps.events_recovered sums).
 */

export interface MirrorHourRow {
  mirror: string;
  hour: string;
  /** imported | missing | failed | running | open (read while the mirror said the hour was open) */
  state: string;
  pushesAdded: number;
  attempts: number;
  error: string | null;
}

export async function mirrorHours(db: Db, gapId: number): Promise<MirrorHourRow[]> {
  const r = await sql<{
    mirror: string;
    file: string;
    state: string;
    pushes_created: string;
    attempts: number;
    error: string | null;
  }>`
    SELECT mirror, file, state, pushes_created, attempts, error FROM backfill_files
    WHERE gap_id = ${gapId} ORDER BY hour, file, mirror`.execute(db);
  return r.rows.map((row) => ({
    mirror: row.mirror,
    hour: row.file,
    state: row.state === 'completed' ? 'imported' : row.state,
    pushesAdded: Number(row.pushes_created),
    attempts: row.attempts,
    error: row.error,
  }));
}

export interface LateMirrorHour {
  gapId: number;
  /** The configured mirror (a GHARCHIVE_URL entry, its userinfo included: it is requested). */
  mirror: string;
  hour: string;
  attempts: number;
}

/**
 * Hours of filled gaps that a configured mirror lacked (missing, failed) or served while it
 * said they were still open, and may still publish or finish: inside their retry window,
 * their wait on the fill ladder over (as a gap's, by attempts). Oldest first.
 */
export async function lateMirrorHours(
  db: Db,
  now: Date,
  mirrors: readonly string[],
  limit: number,
): Promise<LateMirrorHour[]> {
  // Stored mirrors have no userinfo (src/platform/redact.ts): matched to the configured entries by
  // their redacted form, and answered as configured, so the request has its credentials.
  const configured = new Map(mirrors.map((m) => [withoutUserinfo(m), m]));
  const r = await sql<{ gap_id: string; mirror: string; file: string; attempts: number }>`
    SELECT b.gap_id, b.mirror, b.file, b.attempts
    FROM backfill_files b JOIN gaps g ON g.id = b.gap_id
    WHERE g.state = 'filled' AND b.state IN ('missing', 'failed', 'open')
      AND b.mirror = ANY(${[...configured.keys()]}::text[])
      AND b.hour + interval '1 hour' + make_interval(secs => ${RETRY_WINDOW_MS / 1000}) > ${now}
      AND b.updated_at + ${ladderIntervalSql('fill', sql`b.attempts`)} <= ${now}
    ORDER BY b.updated_at, b.id
    LIMIT ${limit}`.execute(db);
  return r.rows.map((row) => ({
    gapId: Number(row.gap_id),
    mirror: configured.get(row.mirror) ?? row.mirror,
    hour: row.file,
    attempts: row.attempts,
  }));
}
