import { int4Key, LockSpace } from '../platform/db/locks.ts';
import { hourOf } from './archive-hours.ts';

/**
 * Which hours of the store an archive import holds open (ADR 0185). Each import says in its
 * checkpoint which pushes' hours it writes into (backfill_files.writes_from / writes_to:
 * announced at its start, widened in each chunk's transaction), so in any snapshot that sees
 * some of an import's pushes and not yet its `completed`, the hours those pushes fall in are:
 *
 * - `importing`: the import runs now (its file lock is held): the hour grows by a chunk a
 *   second, and no copy of it is worth building or keeping;
 * - `incomplete`: it stopped part-way (killed, cut, or read while its mirror said the hour
 *   was open) and no import of the same file and scope has completed since: the rest of the
 *   file is not in the store until someone runs it again. A gap's own import is left to its
 *   gap, which stays open while it is not filled (the `gap` reason of src/export).
 */

/** A statement on the caller's connection (the snapshot of src/export/write.ts). */
export type Query = <R>(text: string, params?: readonly unknown[]) => Promise<R[]>;

/** The advisory lock (LockSpace.backfillFile) an import of (file, scope, mirror) holds while it runs. */
export function fileLockKey(file: string, scope: string, mirror: string): number {
  return int4Key(`${file}\u0000${scope}\u0000${mirror}`);
}

export type ImportHold = 'importing' | 'incomplete';

const HOUR_MS = 3_600_000;

interface Unfinished {
  file: string;
  scope: string;
  mirror: string;
  state: 'running' | 'failed' | 'open';
  lines_done: string;
  gap: boolean;
  lo: Date;
  hi: Date;
  completed_since: boolean;
}

/** Advisory lock keys of LockSpace.backfillFile held by some session of this database now. */
async function heldFileLocks(q: Query, keys: number[]): Promise<Set<number>> {
  if (keys.length === 0) return new Set();
  const rows = await q<{ key: number }>(
    `SELECT k AS key FROM unnest($2::int[]) AS k WHERE EXISTS (
       SELECT 1 FROM pg_locks l
       WHERE l.locktype = 'advisory' AND l.granted
         AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
         AND l.classid = $1::int::oid AND l.objid = k::oid AND l.objsubid = 2)`,
    [LockSpace.backfillFile, keys],
  );
  return new Set(rows.map((r) => r.key));
}

/**
 * The hours in [from, to) that an unfinished import holds open, by the hour's start (ms),
 * with the stronger hold when two imports hold one hour.
 */
export async function importHolds(
  q: Query,
  from: Date,
  to: Date,
): Promise<Map<number, ImportHold>> {
  const rows = await q<Unfinished>(
    `SELECT b.file, b.scope, b.mirror, b.state, b.lines_done, b.gap_id IS NOT NULL AS gap,
       greatest(b.writes_from, $1::timestamptz) AS lo, least(b.writes_to, $2::timestamptz) AS hi,
       EXISTS (SELECT 1 FROM backfill_files c
               WHERE c.file = b.file AND c.scope = b.scope AND c.state = 'completed') AS completed_since
     FROM backfill_files b
     WHERE b.state IN ('running', 'failed', 'open')
       AND b.writes_from < $2::timestamptz AND b.writes_to >= $1::timestamptz`,
    [from, to],
  );
  const holds = new Map<number, ImportHold>();
  if (rows.length === 0) return holds;
  const keyOf = (r: Unfinished) => fileLockKey(r.file, r.scope, r.mirror);
  const held = await heldFileLocks(q, rows.filter((r) => r.state === 'running').map(keyOf));
  for (const r of rows) {
    // A running checkpoint whose lock nobody holds was left by a process that died.
    let hold: ImportHold | null = null;
    if (r.state === 'running' && held.has(keyOf(r))) hold = 'importing';
    else if (!r.gap && Number(r.lines_done) > 0 && !r.completed_since) hold = 'incomplete';
    if (!hold) continue;
    const last = hourOf(r.hi).start.getTime();
    for (let t = hourOf(r.lo).start.getTime(); t <= last && t < to.getTime(); t += HOUR_MS) {
      if (hold === 'importing' || !holds.has(t)) holds.set(t, hold);
    }
  }
  return holds;
}
