import { performance } from 'node:perf_hooks';
import { sql } from 'kysely';
import type { PushOrigin } from '../../src/platform/db/columns.ts';
import { copyChunks, copyFrom } from '../../src/platform/db/copy.ts';
import type { PushRow } from '../../src/store/mapping.ts';
import type { BenchDatabase } from './database.ts';
import { secondsSince } from './stats.ts';

/**
 * The physical ceiling the ingest and backfill benchmarks compare against: the same push
 * rows, mapped by the same code, COPYed into a table with push_events' columns, keys and
 * indexes (LIKE … INCLUDING ALL; LIKE copies no foreign keys).
 */

/** A push as a COPY row of push_events' columns. */
export function pushCopyRow(
  p: PushRow,
  origin: PushOrigin,
  sourceId: number | null = null,
  runId: number | null = null,
): unknown[] {
  return [
    p.id,
    p.actor.id,
    p.repository.id,
    p.pushId,
    p.ref,
    p.head,
    p.before,
    p.createdAt,
    JSON.stringify(p.payload),
    p.size,
    p.distinctSize,
    origin,
    sourceId,
    runId,
  ];
}

/** Rows per second of one COPY of `rows` into a fresh table shaped like push_events. */
export async function copyCeiling(database: BenchDatabase, rows: unknown[][]): Promise<number> {
  return copyCeilingOf(database, copyChunks(rows), rows.length);
}

/**
 * The same from COPY data built beforehand: a benchmark that measures something else in
 * the same process can drop the row objects (a heap of 50,000 parsed rows would slow its
 * garbage collector and skew the comparison).
 */
export async function copyCeilingOf(
  database: BenchDatabase,
  chunks: Buffer[],
  rows: number,
): Promise<number> {
  await sql`DROP TABLE IF EXISTS bench_copy_push_events`.execute(database.db);
  await sql`CREATE TABLE bench_copy_push_events (LIKE push_events INCLUDING ALL)`.execute(
    database.db,
  );
  // Start from a clean WAL position, as the run it is compared with does.
  await sql`CHECKPOINT`.execute(database.db);
  const client = await database.pool.connect();
  try {
    const t0 = performance.now();
    const copied = await copyFrom(
      client,
      `COPY bench_copy_push_events (id, actor_id, repository_id, push_id, ref, head, before,
         created_at, payload, size, distinct_size, origin, source_id, run_id) FROM STDIN`,
      chunks,
    );
    const seconds = secondsSince(t0);
    if (copied !== rows) throw new Error(`COPY wrote ${copied} of ${rows} rows`);
    return rows / seconds;
  } finally {
    client.release();
    await sql`DROP TABLE IF EXISTS bench_copy_push_events`.execute(database.db);
  }
}
