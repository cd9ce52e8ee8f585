import type { RawBuilder } from 'kysely';
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
  const root = doc[0]!.Plan;
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
  return planFromRows(r.rows);
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
