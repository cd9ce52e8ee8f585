import { sql } from 'kysely';
import type { Db } from '../platform/db/pool.ts';

/**
 * The fold every tally table shares (push_tallies, entity_tallies): a tally table keyed by
 * `keys` with a non-negative count `value`, and a deltas table of the same columns that
 * statement-level triggers append to. One statement moves every committed delta into the
 * tallies: a reader in another transaction sees the deltas or the tallies they became,
 * never both and never neither. A second fold at once skips the deltas the first deleted
 * (it waits for them, then finds them gone), so folds need no lock. Returns the deltas
 * folded.
 */
export interface TallyTables {
  tallies: string;
  deltas: string;
  keys: readonly string[];
  value: string;
}

export async function foldTallies(db: Db, t: TallyTables): Promise<number> {
  const keys = t.keys.join(', ');
  const tuple = (alias: string) => `(${t.keys.map((k) => `${alias}.${k}`).join(', ')})`;
  const r = await sql<{ deltas: string }>`${sql.raw(`
    WITH folded AS (
      DELETE FROM ${t.deltas} RETURNING ${keys}, ${t.value}
    ), summed AS (
      SELECT ${keys}, sum(${t.value})::bigint AS ${t.value}, count(*) AS deltas
      FROM folded GROUP BY ${keys}
    ), updated AS (
      UPDATE ${t.tallies} t SET ${t.value} = t.${t.value} + s.${t.value} FROM summed s
      WHERE ${tuple('t')} = ${tuple('s')}
      RETURNING ${t.keys.map((k) => `t.${k}`).join(', ')}
    ), inserted AS (
      -- Only keys without a tally row: an INSERT checks its row (${t.value} >= 0) before ON
      -- CONFLICT turns it into an update, so a net decrease must be the UPDATE above. A key
      -- first tallied here sums to what it holds, never below 0.
      INSERT INTO ${t.tallies} AS t (${keys}, ${t.value})
      SELECT ${keys}, s.${t.value} FROM summed s
      WHERE NOT EXISTS (SELECT 1 FROM updated u WHERE ${tuple('u')} = ${tuple('s')})
      ON CONFLICT (${keys}) DO UPDATE SET ${t.value} = t.${t.value} + excluded.${t.value}
    )
    SELECT coalesce(sum(deltas), 0) AS deltas FROM summed`)}`.execute(db);
  return Number(r.rows[0]?.deltas ?? 0);
}
