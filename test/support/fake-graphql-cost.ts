import {
  type DocumentNode,
  type FieldNode,
  type FragmentDefinitionNode,
  type GraphQLCompositeType,
  type GraphQLNamedType,
  type GraphQLSchema,
  getNamedType,
  isCompositeType,
  isInterfaceType,
  isObjectType,
  Kind,
  type OperationDefinitionNode,
  type SelectionSetNode,
  type ValueNode,
} from 'graphql';

/**
 * GitHub's static arithmetic over a query, as "Rate limits and query limits for the
 * GraphQL API" documents it:
 *
 * - every connection needs `first` or `last`, 1–100 (not both);
 * - nodes: each connection may return (product of the `first`/`last` of the connections
 *   around it) × its own `first`/`last`; a query may ask for at most 500,000;
 * - points: each connection costs one request per parent it is fetched for — the product
 *   of the `first`/`last` of the connections around it (1 at the top) — and the query
 *   costs the sum of those requests divided by 100, rounded to the nearest whole number,
 *   at least 1. The doc's example (100 repositories × 50 issues × 60 labels) is
 *   1 + 100 + 5,000 = 5,101 requests: 51 points.
 *
 * A connection is a field whose type's name ends in `Connection` (GitHub's convention,
 * true of every connection in its schema). Fields are merged by response key as GraphQL
 * merges them, so a connection asked for twice through fragments counts once.
 */

export interface GitHubErrorJson {
  type?: string;
  message: string;
  path?: (string | number)[];
  locations?: { line: number; column: number }[];
}

export interface TopLevelField {
  /** Its response key (the alias, or the field name). */
  key: string;
  requests: number;
  nodes: number;
  /** Whether a connection is asked for under it (where a resource limit would strike). */
  hasConnection: boolean;
}

export interface QueryAnalysis {
  operation: OperationDefinitionNode | null;
  isMutation: boolean;
  /** Σ over connections of the product of the `first`/`last` around each. */
  requests: number;
  /** max(1, round(requests / 100)). */
  cost: number;
  nodeCount: number;
  topLevel: TopLevelField[];
  /** `rateLimit(dryRun: true)`: the cost is computed, nothing is run or charged. */
  dryRun: boolean;
  /** Pagination and node-limit errors: GitHub answers them without running the query. */
  errors: GitHubErrorJson[];
}

export function pointsFor(requests: number): number {
  return Math.max(1, Math.round(requests / 100));
}

interface Collected {
  name: string;
  parentType: GraphQLCompositeType;
  nodes: FieldNode[];
}

interface Acc {
  requests: number;
  nodes: number;
  hasConnection: boolean;
}

export function analyzeQuery(
  schema: GraphQLSchema,
  document: DocumentNode,
  o: { variables?: Record<string, unknown>; operationName?: string; nodeLimit?: number } = {},
): QueryAnalysis {
  const variables = o.variables ?? {};
  const nodeLimit = o.nodeLimit ?? 500_000;
  const operations = document.definitions.filter(
    (d): d is OperationDefinitionNode => d.kind === Kind.OPERATION_DEFINITION,
  );
  const fragments = new Map<string, FragmentDefinitionNode>();
  for (const d of document.definitions)
    if (d.kind === Kind.FRAGMENT_DEFINITION) fragments.set(d.name.value, d);
  const operation = o.operationName
    ? (operations.find((op) => op.name?.value === o.operationName) ?? null)
    : operations.length === 1
      ? operations[0]!
      : null;
  const result: QueryAnalysis = {
    operation,
    isMutation: operation?.operation === 'mutation',
    requests: 0,
    cost: 1,
    nodeCount: 0,
    topLevel: [],
    dryRun: false,
    errors: [],
  };
  if (!operation) {
    result.errors.push({
      message: o.operationName
        ? `Unknown operation named "${o.operationName}".`
        : 'An operation name is required when a document holds several operations.',
    });
    return result;
  }
  const defaults = new Map<string, ValueNode>();
  for (const v of operation.variableDefinitions ?? [])
    if (v.defaultValue) defaults.set(v.variable.name.value, v.defaultValue);

  const literalValue = (node: ValueNode | undefined): unknown => {
    if (!node) return undefined;
    switch (node.kind) {
      case Kind.VARIABLE: {
        const name = node.name.value;
        if (variables[name] !== undefined) return variables[name];
        return literalValue(defaults.get(name));
      }
      case Kind.INT:
        return Number(node.value);
      case Kind.BOOLEAN:
        return node.value;
      case Kind.NULL:
        return null;
      default:
        return 'value' in node ? node.value : undefined;
    }
  };
  const arg = (field: FieldNode, name: string) =>
    literalValue(field.arguments?.find((a) => a.name.value === name)?.value);

  function collect(
    sets: readonly SelectionSetNode[],
    parentType: GraphQLCompositeType,
    into = new Map<string, Collected>(),
    seen = new Set<string>(),
  ): Map<string, Collected> {
    for (const set of sets) {
      for (const sel of set.selections) {
        if (sel.kind === Kind.FIELD) {
          const key = sel.alias?.value ?? sel.name.value;
          const hit = into.get(key);
          if (hit) hit.nodes.push(sel);
          else into.set(key, { name: sel.name.value, parentType, nodes: [sel] });
        } else {
          const fragment = sel.kind === Kind.INLINE_FRAGMENT ? sel : fragments.get(sel.name.value);
          if (!fragment) continue;
          if (sel.kind === Kind.FRAGMENT_SPREAD) {
            if (seen.has(sel.name.value)) continue;
            seen.add(sel.name.value);
          }
          const cond = fragment.typeCondition
            ? schema.getType(fragment.typeCondition.name.value)
            : parentType;
          if (cond && isCompositeType(cond)) collect([fragment.selectionSet], cond, into, seen);
        }
      }
    }
    return into;
  }

  let nodeLimitReported = false;
  function walk(
    sets: readonly SelectionSetNode[],
    parentType: GraphQLCompositeType,
    multiplier: number,
    path: string[],
    acc: Acc,
  ): void {
    for (const [key, f] of collect(sets, parentType)) {
      if (f.name.startsWith('__')) continue;
      const def =
        isObjectType(f.parentType) || isInterfaceType(f.parentType)
          ? f.parentType.getFields()[f.name]
          : undefined;
      if (!def) continue; // schema validation reports it
      const named: GraphQLNamedType = getNamedType(def.type);
      const here = [...path, key];
      let childMultiplier = multiplier;
      if (named.name.endsWith('Connection')) {
        const node = f.nodes[0]!;
        const at = node.loc
          ? [{ line: node.loc.startToken.line, column: node.loc.startToken.column }]
          : undefined;
        const first = arg(node, 'first');
        const last = arg(node, 'last');
        const given = [first, last].filter((v) => v !== undefined && v !== null) as number[];
        acc.requests += multiplier;
        acc.hasConnection = true;
        if (given.length === 0) {
          result.errors.push({
            type: 'MISSING_PAGINATION_BOUNDARIES',
            path: here,
            locations: at,
            message: `You must provide a \`first\` or \`last\` value to properly paginate the \`${f.name}\` connection.`,
          });
        } else if (given.length === 2) {
          result.errors.push({
            path: here,
            locations: at,
            message: `Passing both \`first\` and \`last\` to paginate the \`${f.name}\` connection is not supported.`,
          });
        } else {
          const which = first !== undefined && first !== null ? 'first' : 'last';
          const n = given[0]!;
          if (n > 100) {
            result.errors.push({
              type: 'EXCESSIVE_PAGINATION',
              path: here,
              locations: at,
              message: `Requesting ${n} records on the \`${f.name}\` connection exceeds the \`${which}\` limit of 100 records.`,
            });
          } else if (n < 1) {
            result.errors.push({
              path: here,
              locations: at,
              message: `\`${which}\` on the \`${f.name}\` connection must be between 1 and 100.`,
            });
          }
          childMultiplier = multiplier * Math.max(0, Math.min(n, 100));
          acc.nodes += childMultiplier;
          if (!nodeLimitReported && result.nodeCount + acc.nodes > nodeLimit) {
            nodeLimitReported = true;
            result.errors.push({
              type: 'MAX_NODE_LIMIT_EXCEEDED',
              path: here,
              locations: at,
              message: `By the time this query traverses to the ${f.name} connection, it is requesting up to ${(result.nodeCount + acc.nodes).toLocaleString('en-US')} possible nodes which exceeds the maximum limit of ${nodeLimit.toLocaleString('en-US')}.`,
            });
          }
        }
      }
      const subSets = f.nodes.flatMap((n) => (n.selectionSet ? [n.selectionSet] : []));
      if (subSets.length > 0 && isCompositeType(named))
        walk(subSets, named, childMultiplier, here, acc);
    }
  }

  const root =
    operation.operation === 'mutation'
      ? schema.getMutationType()
      : operation.operation === 'subscription'
        ? schema.getSubscriptionType()
        : schema.getQueryType();
  if (!root) return result;
  for (const [key, f] of collect([operation.selectionSet], root)) {
    if (f.name === 'rateLimit' && arg(f.nodes[0]!, 'dryRun') === true) result.dryRun = true;
    const acc: Acc = { requests: 0, nodes: 0, hasConnection: false };
    walk([{ kind: Kind.SELECTION_SET, selections: f.nodes }], root, 1, [], acc);
    result.topLevel.push({ key, ...acc });
    result.requests += acc.requests;
    result.nodeCount += acc.nodes;
  }
  result.cost = pointsFor(result.requests);
  return result;
}
