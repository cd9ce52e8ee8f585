import { CompiledQuery, type RawBuilder } from 'kysely';
import type { Db } from '../../src/platform/db/pool.ts';

/**
 * Query plans as Postgres's JSON (`EXPLAIN (FORMAT JSON)`), read by field, never by the text
 * EXPLAIN prints: the text differs between server versions (Postgres 17 prints an InitPlan's
 * value as `(InitPlan 2).col1` where 15 and 16 print `$1`), the fields a test asserts on — node
 * type, relation, index, index condition's column and operator — do not. Every plan test reads
 * plans through here, so it holds on the machine's Postgres 15 and the embedded Postgres 18.
 */

export interface PlanNode {
  'Node Type': string;
  /** The partition a scan read, when its table is partitioned ('Relation Name' is then the table's). */
  'Partition Name'?: string;
  'Relation Name'?: string;
  'Index Name'?: string;
  'Index Cond'?: string;
  'Scan Direction'?: string;
  Filter?: string;
  'Actual Rows'?: number;
  'Actual Loops'?: number;
  'Rows Removed by Filter'?: number;
  Plans?: PlanNode[];
}

/** One plan: its root, every node in it (depth first), and a readable rendering for messages. */
export interface Plan {
  root: PlanNode;
  nodes: PlanNode[];
  /** One line a node, from the JSON fields: for an assertion's message, never to match. */
  shown: string;
}

/** The first statement's plan from the rows `EXPLAIN (FORMAT JSON …)` returned. */
export function planFromRows(rows: readonly unknown[]): Plan {
  const first = (rows[0] as { 'QUERY PLAN': unknown } | undefined)?.['QUERY PLAN'];
  const doc = (typeof first === 'string' ? JSON.parse(first) : first) as { Plan: PlanNode }[];
  return planOf(doc[0]!.Plan);
}

function planOf(root: PlanNode): Plan {
  const nodes: PlanNode[] = [];
  const lines: string[] = [];
  const walk = (n: PlanNode, depth: number) => {
    nodes.push(n);
    lines.push(`${'  '.repeat(depth)}${describeNode(n)}`);
    for (const c of n.Plans ?? []) walk(c, depth + 1);
  };
  walk(root, 0);
  return { root, nodes, shown: lines.join('\n') };
}

function describeNode(n: PlanNode): string {
  const parts = [n['Node Type']];
  if (n['Scan Direction'] === 'Backward') parts.push('Backward');
  if (n['Index Name']) parts.push(`using ${n['Index Name']}`);
  if (n['Relation Name']) parts.push(`on ${n['Relation Name']}`);
  if (n['Index Cond']) parts.push(`[Index Cond: ${n['Index Cond']}]`);
  if (n.Filter) parts.push(`[Filter: ${n.Filter}]`);
  return parts.join(' ');
}

/** The plan of `statement` (EXPLAIN, or EXPLAIN ANALYZE: then it runs). */
export async function explain(
  db: Db,
  statement: RawBuilder<unknown>,
  o: { analyze?: boolean } = {},
): Promise<Plan> {
  const compiled = statement.compile(db);
  const options = o.analyze ? '(ANALYZE, FORMAT JSON)' : '(FORMAT JSON)';
  const r = await db.executeQuery({ ...compiled, sql: `EXPLAIN ${options} ${compiled.sql}` });
  return asPartitionedTables(db, planFromRows(r.rows));
}

/**
 * A plan over a partitioned table (push_events by month, ADR 0199) names each partition and
 * each partition's own index. A test asserts on the table and the index it declared: each
 * scan is renamed to its partition tree's root (the partition kept as 'Partition Name').
 */
async function asPartitionedTables(db: Db, plan: Plan): Promise<Plan> {
  const names = [
    ...new Set(
      plan.nodes.flatMap((n) =>
        [n['Relation Name'], n['Index Name']].filter((x) => x !== undefined),
      ),
    ),
  ];
  if (names.length === 0) return plan;
  const r = await db.executeQuery<{ name: string; root: string }>(
    CompiledQuery.raw(
      `SELECT c.relname AS name, pg_partition_root(c.oid)::regclass::text AS root
      FROM pg_class c WHERE c.relname = ANY ($1::text[])
        AND c.relnamespace = current_schema()::regnamespace AND c.relispartition`,
      [names],
    ),
  );
  if (r.rows.length === 0) return plan;
  const root = new Map(r.rows.map((x) => [x.name, x.root.replace(/^.*\./, '')]));
  for (const n of plan.nodes) {
    const table = n['Relation Name'] && root.get(n['Relation Name']);
    if (table) {
      n['Partition Name'] = n['Relation Name'];
      n['Relation Name'] = table;
    }
    const index = n['Index Name'] && root.get(n['Index Name']);
    if (index) n['Index Name'] = index;
  }
  return planOf(plan.root);
}

/** Scans of `relation` by a node type (e.g. 'Seq Scan'). */
export function scansOf(plan: Plan, nodeType: string, relation: string): PlanNode[] {
  return plan.nodes.filter((n) => n['Node Type'] === nodeType && n['Relation Name'] === relation);
}

/** Sequential scans, of `relation` or of any table. */
export function seqScans(plan: Plan, relation?: string): PlanNode[] {
  return plan.nodes.filter(
    (n) =>
      n['Node Type'] === 'Seq Scan' && (relation === undefined || n['Relation Name'] === relation),
  );
}

const INDEX_NODES = ['Index Scan', 'Index Only Scan', 'Bitmap Index Scan'];

/** Nodes that read `index`, of the given types (default: any index scan, bitmap included). */
export function indexReads(
  plan: Plan,
  index: string,
  nodeTypes: readonly string[] = INDEX_NODES,
): PlanNode[] {
  return plan.nodes.filter((n) => n['Index Name'] === index && nodeTypes.includes(n['Node Type']));
}

/** Rows each relation's scans returned or filtered out, summed over an executed plan. */
export function rowsRead(plan: Plan): Record<string, number> {
  const out: Record<string, number> = {};
  for (const n of plan.nodes) {
    const relation = n['Relation Name'];
    if (!relation) continue;
    const loops = n['Actual Loops'] ?? 1;
    const read = (n['Actual Rows'] ?? 0) + (n['Rows Removed by Filter'] ?? 0);
    out[relation] = (out[relation] ?? 0) + read * loops;
  }
  return out;
}
