import { sql } from 'kysely';
import type { Db } from '../platform/db/pool.ts';
import { withoutUserinfo } from '../platform/redact.ts';

/**
 * The archive mirrors (GHARCHIVE_URL, docs/mirrors.md) and what each added: one row per
 * mirror configured here or read by any process (backfill_files.mirror, stored without its
 * userinfo), with the hours it served, the hours it did not have, the failed reads and the
 * pushes its files stored first. Never a password: a configured URL is shown without its
 * userinfo, as the checkpoints key it.
 */
export interface MirrorStatus {
  /** The mirror's URL (or file:// directory), without userinfo; '' for local files and imports from before mirrors. */
  mirror: string;
  /** In this process's GHARCHIVE_URL. */
  configured: boolean;
  hoursImported: number;
  /** Hours it answered it does not have (404/410). */
  hoursMissing: number;
  /** Failed reads, and hours read while the mirror said they were still open. */
  hoursFailed: number;
  /** Pushes stored from its files (a push already held from elsewhere is not counted again). */
  pushesAdded: number;
  lastReadAt: Date | null;
}

export async function mirrorStatuses(
  db: Db,
  configured: readonly string[],
): Promise<MirrorStatus[]> {
  const r = await sql<{
    mirror: string;
    imported: string;
    missing: string;
    failed: string;
    pushes: string;
    last: Date | null;
  }>`
    SELECT mirror, count(*) FILTER (WHERE state = 'completed') AS imported,
           count(*) FILTER (WHERE state = 'missing') AS missing,
           count(*) FILTER (WHERE state IN ('failed', 'open')) AS failed,
           coalesce(sum(pushes_created), 0) AS pushes, max(updated_at) AS last
    FROM backfill_files GROUP BY mirror`.execute(db);
  const mine = configured.map((m) => withoutUserinfo(m));
  const read = new Map(r.rows.map((row) => [row.mirror, row]));
  const names = [...mine, ...[...read.keys()].filter((m) => !mine.includes(m)).sort()];
  return names.map((mirror) => {
    const row = read.get(mirror);
    return {
      mirror,
      configured: mine.includes(mirror),
      hoursImported: Number(row?.imported ?? 0),
      hoursMissing: Number(row?.missing ?? 0),
      hoursFailed: Number(row?.failed ?? 0),
      pushesAdded: Number(row?.pushes ?? 0),
      lastReadAt: row?.last ?? null,
    };
  });
}
