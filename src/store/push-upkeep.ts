import type pg from 'pg';
import type { Logger } from '../platform/log.ts';
import { addMonths, type Month, monthOf, partitionName } from './history-months.ts';

/**
 * What a bulk write leaves for autovacuum to do, done at once by the writer (bin/backfill
 * after a file, the month's partitions it wrote). Two things, both bounded by what was
 * written, not by history:
 *
 * - The BRIN indexes (push_events' created_at and ingested_at, stored_commits'
 *   first_seen_at) only know the page ranges they were summarized for. Pages written since
 *   are unsummarized, and a BRIN scan reads every unsummarized page: a coverage window or an
 *   export of one hour would read the whole month just imported. Autovacuum summarizes them
 *   when it vacuums, which on a busy store is late, and where autovacuum is off, never.
 *   `brin_summarize_new_values` summarizes only the ranges not yet summarized.
 * - The planner's statistics of a partition filled by one import say it is empty (or say
 *   nothing): its plans for the next file's merge and for an export are a guess. ANALYZE
 *   reads a fixed sample (300 × the statistics target rows), whatever the partition's size,
 *   when the relation changed enough since its last statistics (ANALYZE_DUE).
 *
 * Each step takes a SHARE UPDATE EXCLUSIVE lock, which only another ANALYZE, VACUUM or DDL
 * holds: under a second's lock timeout a partition another process is analysing is skipped
 * (it is being done), never waited for. Upkeep is an optimisation: a failure is returned to
 * be logged, never thrown into the import that succeeded.
 */

/** The months whose partitions `range` (created_at, inclusive) touches, oldest first. */
export function monthsBetween(from: Date, to: Date): Month[] {
  const out: Month[] = [];
  for (let m = monthOf(from); m.start.getTime() <= to.getTime(); m = addMonths(m, 1)) {
    out.push(m);
  }
  return out;
}

export interface UpkeepOutcome {
  /** The relations summarized. */
  relations: string[];
  /** Those of them analysed too (ANALYZE_DUE). */
  analysed: string[];
  /** BRIN page ranges summarized (of the relations done: a skipped one's are rolled back). */
  ranges: number;
  /** Relations skipped: another process held them (or they are gone: a month dropped). */
  skipped: string[];
  /** Relations left undone because the caller stopped (`signal`), in order. */
  notReached: string[];
  /** Relations a step failed on (other than a lock held elsewhere); the rest were still done. */
  failed: { relation: string; error: Error }[];
}

/** Summarizes the new BRIN ranges of `relation`'s indexes; how many it summarized. */
const SUMMARIZE = `
  SELECT coalesce(sum(brin_summarize_new_values(i.indexrelid)), 0)::int AS ranges
  FROM pg_index i
  JOIN pg_class ic ON ic.oid = i.indexrelid
  JOIN pg_am am ON am.oid = ic.relam AND am.amname = 'brin'
  WHERE i.indrelid = to_regclass($1)`;

/**
 * Whether `relation` wants ANALYZE: never analysed, or changed since by a tenth of the rows
 * its statistics counted (autovacuum's default rule, autovacuum_analyze_scale_factor 0.1,
 * with a floor of 1,000 rows). A month of ten million rows is not sampled again for each
 * hour of 100,000 added to it: 30,000 random page reads a file for statistics that barely
 * move. The change count is the statistics system's, flushed within a second of a write.
 */
const ANALYZE_DUE = `
  SELECT c.reltuples < 0
      OR coalesce(s.n_mod_since_analyze, 0) >= greatest(1000, 0.1 * c.reltuples) AS due
  FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
  WHERE c.oid = to_regclass($1)`;

/**
 * Upkeep of the partitions of `months` and of stored_commits, each in its own short
 * transaction (a lock is held only while its relation is done). A stop (`signal`) is looked
 * at between relations: a stopping import waits for one relation at most, never a month's
 * list. A relation that fails is recorded and the next is still done: one partition's
 * trouble does not leave stored_commits unsummarized.
 */
export async function upkeepAfterBulkWrite(
  client: pg.ClientBase,
  months: readonly Month[],
  signal?: AbortSignal,
): Promise<UpkeepOutcome> {
  const out: UpkeepOutcome = {
    relations: [],
    analysed: [],
    ranges: 0,
    skipped: [],
    notReached: [],
    failed: [],
  };
  const relations = [...months.map(partitionName), 'stored_commits'];
  for (const [i, relation] of relations.entries()) {
    if (signal?.aborted) {
      out.notReached.push(...relations.slice(i));
      break;
    }
    try {
      await client.query('BEGIN');
      await client.query(`SET LOCAL lock_timeout = '1s'`);
      const exists = await client.query<{ ok: boolean }>(
        'SELECT to_regclass($1) IS NOT NULL AS ok',
        [relation],
      );
      if (!exists.rows[0]?.ok) {
        await client.query('ROLLBACK');
        out.skipped.push(relation);
        continue;
      }
      const r = await client.query<{ ranges: number }>(SUMMARIZE, [relation]);
      const due = await client.query<{ due: boolean }>(ANALYZE_DUE, [relation]);
      if (due.rows[0]?.due) {
        await client.query(`ANALYZE ${client.escapeIdentifier(relation)}`);
      }
      await client.query('COMMIT');
      // Counted once committed: a lock timeout at ANALYZE rolls the summaries back too.
      out.ranges += r.rows[0]?.ranges ?? 0;
      if (due.rows[0]?.due) out.analysed.push(relation);
      out.relations.push(relation);
    } catch (err) {
      await client.query('ROLLBACK').catch(() => {});
      if ((err as { code?: string }).code === '55P03') out.skipped.push(relation);
      else out.failed.push({ relation, error: err as Error });
    }
  }
  return out;
}

/**
 * After a file that stored pushes: its months' BRIN ranges summarized and statistics taken
 * (above), so the next file's merge and the hour's export are planned on
 * what the store holds. Logged, never failing the import.
 */
export async function upkeepAfterImport(
  client: pg.ClientBase,
  range: { from: number; to: number },
  log: Logger,
  signal?: AbortSignal,
): Promise<void> {
  const started = performance.now();
  const u = await upkeepAfterBulkWrite(
    client,
    monthsBetween(new Date(range.from), new Date(range.to)),
    signal,
  );
  const fields = {
    event: 'backfill.upkeep',
    relations: u.relations,
    analysed: u.analysed,
    skipped: u.skipped,
    not_reached: u.notReached,
    brin_ranges: u.ranges,
    duration_ms: Math.round(performance.now() - started),
  };
  if (u.failed.length > 0) {
    const first = u.failed[0]!;
    log.warn(
      { ...fields, failed: u.failed.map((f) => f.relation), err: first.error },
      `upkeep after the file failed on ${u.failed.map((f) => f.relation).join(', ')}: ${first.error.message}`,
    );
  } else {
    log.debug(
      fields,
      `upkeep: ${u.relations.join(', ') || 'nothing'} summarized; ${u.analysed.join(', ') || 'none'} analysed` +
        (u.notReached.length > 0 ? `; stopped before ${u.notReached.join(', ')}` : ''),
    );
  }
}
