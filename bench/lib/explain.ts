import type pg from 'pg';
import { createDb, type Db } from '../../src/platform/db/pool.ts';
import { recordingPool } from './pg-recorder.ts';

/**
 * EXPLAIN for the statements a function really sends. Rather than copying a query into
 * the bench (and drifting from the code), we run the function once on a pool whose
 * clients record every statement, then EXPLAIN each recorded one with its parameters.
 */

export interface Statement {
  text: string;
  values: unknown[];
}

export interface PlanCheck {
  statement: Statement;
  /** EXPLAIN (COSTS OFF) as text lines. */
  plan: string[];
  /** `Seq Scan on <table>` nodes over tables at least BIG_TABLE_ROWS large. */
  bigSeqScans: string[];
}

/** A table this large must be reached through an index on a hot path. */
export const BIG_TABLE_ROWS = 10_000;

/** Runs `fn` against a recording pool and returns the plannable statements it sent. */
export async function captureStatements(
  url: string,
  fn: (db: Db, pool: pg.Pool) => Promise<unknown>,
): Promise<Statement[]> {
  const seen: Statement[] = [];
  const pool = recordingPool(url, 2, (s) => seen.push(s));
  const db = createDb(pool);
  try {
    await fn(db, pool);
  } finally {
    await db.destroy();
  }
  const plannable = /^\s*(\(?\s*select|insert|update|delete|with)\b/i;
  const unique = new Map<string, Statement>();
  for (const s of seen) if (plannable.test(s.text) && !unique.has(s.text)) unique.set(s.text, s);
  return [...unique.values()];
}

interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  Plans?: PlanNode[];
}

function* nodes(n: PlanNode): Generator<PlanNode> {
  yield n;
  for (const child of n.Plans ?? []) yield* nodes(child);
}

/** EXPLAINs each statement (never ANALYZE: an UPDATE is planned, not run). */
export async function explainStatements(
  pool: pg.Pool,
  statements: Statement[],
): Promise<PlanCheck[]> {
  const client = await pool.connect();
  try {
    const sizes = await client.query<{ relname: string; rows: number }>(
      `SELECT relname, reltuples::float8 AS rows FROM pg_class
       WHERE relkind = 'r' AND relnamespace = 'public'::regnamespace`,
    );
    const rowsOf = new Map(sizes.rows.map((r) => [r.relname, r.rows]));
    const out: PlanCheck[] = [];
    for (const statement of statements) {
      const text = await client.query<{ 'QUERY PLAN': string }>(
        `EXPLAIN (COSTS OFF) ${statement.text}`,
        statement.values,
      );
      const json = await client.query<{ 'QUERY PLAN': [{ Plan: PlanNode }] }>(
        `EXPLAIN (FORMAT JSON) ${statement.text}`,
        statement.values,
      );
      const bigSeqScans: string[] = [];
      for (const n of nodes(json.rows[0]!['QUERY PLAN'][0].Plan)) {
        const rel = n['Relation Name'];
        if (n['Node Type'] === 'Seq Scan' && rel && (rowsOf.get(rel) ?? 0) >= BIG_TABLE_ROWS) {
          bigSeqScans.push(`Seq Scan on ${rel} (~${Math.round(rowsOf.get(rel)!)} rows)`);
        }
      }
      out.push({ statement, plan: text.rows.map((r) => r['QUERY PLAN']), bigSeqScans });
    }
    return out;
  } finally {
    client.release();
  }
}

/** One line of SQL for printing. */
export function oneLine(sql: string, max = 160): string {
  const s = sql.replace(/\s+/g, ' ').trim();
  return s.length > max ? `${s.slice(0, max - 1)}…` : s;
}
