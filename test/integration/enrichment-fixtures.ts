import { sql } from 'kysely';
import type { EntityClass } from '../../src/budget/types.ts';
import type { Db } from '../../src/platform/db/pool.ts';
import { ENTITY_TABLES } from '../../src/work/entity.ts';

/** Row factories and probes shared by the enrichment tests (not a test file itself). */

export interface EntitySeed {
  id: number;
  name?: string;
  enrichment_state?: 'pending' | 'enriched' | 'failed' | 'gone';
  attempts?: number;
  next_attempt_at?: Date | string;
  claimed_until?: Date | string | null;
  claimed_by?: string | null;
  enriched_at?: Date | string | null;
  etag?: string | null;
  first_seen_at?: Date | string;
}

export function defaultName(cls: EntityClass, id: number): string {
  return cls === 'actor' ? `user-${id}` : `owner-${id}/repo-${id}`;
}

export async function insertEntities(db: Db, cls: EntityClass, seeds: EntitySeed[]): Promise<void> {
  if (seeds.length === 0) return;
  const { table, nameColumn } = ENTITY_TABLES[cls];
  const rows = seeds.map((s) => {
    const { id, name, ...rest } = s;
    return {
      id,
      [nameColumn]: name ?? defaultName(cls, id),
      // Due now to the millisecond: the column's now() default can be microseconds past the
      // millisecond a runner's (JS) clock reads right after, and then it is not due yet.
      next_attempt_at: sql`date_trunc('milliseconds', now())`,
      ...rest,
    };
  });
  await db
    .insertInto(table)
    .values(rows as never)
    .execute();
}

/** `count` pending rows with ids from `firstId`, first seen one second apart in id order. */
export async function insertPending(
  db: Db,
  cls: EntityClass,
  count: number,
  { firstId = 1, at = new Date(Date.now() - 3600_000) }: { firstId?: number; at?: Date } = {},
): Promise<number[]> {
  const ids = Array.from({ length: count }, (_, i) => firstId + i);
  const seeds = ids.map((id, i) => {
    const t = new Date(at.getTime() + i * 1000);
    return { id, first_seen_at: t, next_attempt_at: t };
  });
  for (let i = 0; i < seeds.length; i += 1000)
    await insertEntities(db, cls, seeds.slice(i, i + 1000));
  return ids;
}

/** The whole row as Postgres renders it: equal text means byte-identical values. */
export async function rowText(db: Db, cls: EntityClass, id: number): Promise<string> {
  const { table } = ENTITY_TABLES[cls];
  const r = await sql<{
    row: string;
  }>`SELECT t::text AS row FROM ${sql.table(table)} t WHERE id = ${id}`.execute(db);
  return r.rows[0]!.row;
}

export async function entityRow(db: Db, cls: EntityClass, id: number) {
  const { table } = ENTITY_TABLES[cls];
  const r = await sql<
    Record<string, unknown>
  >`SELECT * FROM ${sql.table(table)} WHERE id = ${id}`.execute(db);
  return r.rows[0]!;
}

export async function statesOf(db: Db, cls: EntityClass): Promise<Record<string, number>> {
  const { table } = ENTITY_TABLES[cls];
  const r = await sql<{ state: string; n: string }>`
    SELECT enrichment_state AS state, count(*) AS n FROM ${sql.table(table)} GROUP BY 1`.execute(
    db,
  );
  return Object.fromEntries(r.rows.map((x) => [x.state, Number(x.n)]));
}

export async function attemptsOf(db: Db, cls: EntityClass, id: number) {
  return db
    .selectFrom('enrichment_attempts')
    .selectAll()
    .where('class', '=', cls)
    .where('entity_id', '=', String(id))
    .orderBy('id')
    .execute();
}
