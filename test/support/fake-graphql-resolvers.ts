import type { GraphQLFieldResolver, GraphQLResolveInfo } from 'graphql';
import {
  branchTip,
  committerOf,
  DEFAULT_DATE,
  FULL_SHA,
  type Graph,
  history,
  range,
  resolveRev,
  type StoredCommit,
} from './fake-commit-graph.ts';

/**
 * The fake's GraphQL objects over the commit graph: Query.repository and rateLimit,
 * Repository, Ref, Comparison, Commit, GitActor, User and their connections. A field the
 * fake does not implement is an error naming it (never a silent null), so a query that
 * leans on one fails loudly instead of testing nothing.
 */

export class GitHubGraphQLError extends Error {
  readonly type: string | undefined;
  constructor(message: string, type?: string) {
    super(message);
    this.type = type;
  }
}

export interface RepoView {
  id: number;
  fullName: string;
  defaultBranch: string;
  graph: Graph;
}

/** A repository by its name now, or by an old name (moved), or nothing. */
export type RepoLookup = { repo: RepoView; movedFrom?: string } | null;

export interface RateLimitView {
  cost: number;
  limit: number;
  remaining: number;
  used: number;
  resetAt: Date;
  nodeCount: number;
}

export interface ExecContext {
  lookup(owner: string, name: string): RepoLookup;
  rateLimit: RateLimitView;
  /** Top-level response keys that fail with RESOURCE_LIMITS_EXCEEDED (a partial answer). */
  failKeys: Set<string>;
  /** Of those, the ones with a connection under them: they fail there, deeper. */
  failDeep: Set<string>;
  dryRun: boolean;
}

type Obj = Record<string, unknown>;
type Args = Record<string, unknown>;

const nodeId = (prefix: string, s: string) =>
  `${prefix}_${Buffer.from(s).toString('base64url').slice(0, 40)}`;

/** GitHub's DateTime: UTC, seconds. */
const dateTime = (ms: number) => `${new Date(ms).toISOString().slice(0, 19)}Z`;

/** GitHub's GitTimestamp keeps git's own offset, written `+00:00` rather than `Z`. */
const gitTimestamp = (iso: string) => iso.replace(/(\.\d+)?Z$/, '+00:00');

function rootKey(info: GraphQLResolveInfo): string {
  let p = info.path;
  while (p.prev) p = p.prev;
  return String(p.key);
}

function resourceCheck(ctx: ExecContext, info: GraphQLResolveInfo): void {
  if (ctx.failKeys.has(rootKey(info)))
    throw new GitHubGraphQLError(
      'Resource limits for this query exceeded.',
      'RESOURCE_LIMITS_EXCEEDED',
    );
}

interface Page<T> {
  totalCount: number;
  nodes: T[];
  edges: { cursor: string; node: T }[];
  pageInfo: {
    hasNextPage: boolean;
    hasPreviousPage: boolean;
    startCursor: string | null;
    endCursor: string | null;
  };
}

/**
 * A page of `items` by `first`/`after` or `last`/`before`; `cursor(i)` writes item i's
 * cursor and `offset(c)` reads one back (null: not a cursor of this connection).
 */
function page<T>(
  items: readonly T[],
  args: Args,
  cursor: (i: number) => string,
  offset: (c: string) => number | null,
  totalCount = items.length,
): Page<T> {
  const read = (c: unknown) => {
    if (c === undefined || c === null) return null;
    const n = offset(String(c));
    if (n === null || n < 0 || n >= items.length)
      throw new GitHubGraphQLError(
        `\`${String(c)}\` does not appear to be a valid cursor.`,
        'INVALID_CURSOR_ARGUMENTS',
      );
    return n;
  };
  let start = 0;
  let end = items.length;
  const after = read(args.after);
  const before = read(args.before);
  if (after !== null) start = after + 1;
  if (before !== null) end = Math.min(end, before);
  if (typeof args.first === 'number') end = Math.min(end, start + args.first);
  if (typeof args.last === 'number') start = Math.max(start, end - args.last);
  const slice = items.slice(start, Math.max(start, end));
  const edges = slice.map((node, i) => ({ cursor: cursor(start + i), node }));
  return {
    totalCount,
    nodes: slice,
    edges,
    pageInfo: {
      hasNextPage: end < items.length,
      hasPreviousPage: start > 0,
      startCursor: edges[0]?.cursor ?? null,
      endCursor: edges.at(-1)?.cursor ?? null,
    },
  };
}

/** graphql-ruby's cursors: base64 of `cursor:N`, N counted from 1. */
const indexCursor = (i: number) => Buffer.from(`cursor:${i + 1}`).toString('base64');
const indexOffset = (c: string) => {
  const m = /^cursor:(\d+)$/.exec(Buffer.from(c, 'base64').toString('utf8'));
  return m ? Number(m[1]) - 1 : null;
};

function user(account: { id: number; login: string } | null | undefined): Obj | null {
  // A bot is no User: GitActor.user is null for its commits.
  if (!account || account.login.endsWith('[bot]')) return null;
  return {
    __typename: 'User',
    id: nodeId('U', String(account.id)),
    databaseId: account.id,
    login: account.login,
    url: `https://github.com/${account.login}`,
  };
}

function actor(who: { name: string; email: string; date: string }, account: Obj | null): Obj {
  return {
    __typename: 'GitActor',
    name: who.name,
    email: who.email,
    date: gitTimestamp(who.date),
    user: account,
  };
}

function commit(view: RepoView, c: StoredCommit): Obj {
  const message = c.message ?? `commit ${c.sha.slice(0, 7)}`;
  const lines = message.split('\n');
  const author = c.author ?? {
    name: 'Monalisa Octocat',
    email: 'mona@github.com',
    date: DEFAULT_DATE,
  };
  const committer = committerOf(c);
  const url = `https://github.com/${view.fullName}/commit/${c.sha}`;
  return {
    __typename: 'Commit',
    id: nodeId('C', `${view.id}:${c.sha}`),
    oid: c.sha,
    abbreviatedOid: c.sha.slice(0, 7),
    message,
    messageHeadline: lines[0],
    messageBody: lines.slice(1).join('\n').replace(/^\n+/, ''),
    committedDate: dateTime(c.committedMs),
    authoredDate: dateTime(Date.parse(author.date)),
    url,
    commitUrl: url,
    author: actor(author, user(c.account)),
    committer: actor(
      committer,
      user(c.committerAccount === undefined ? c.account : c.committerAccount),
    ),
    repository: () => repository(view),
    parents: (args: Args, ctx: ExecContext, info: GraphQLResolveInfo) => {
      resourceCheck(ctx, info);
      const parents = c.parents.map((p) => commit(view, view.graph.commits.get(p)!));
      return page(parents, args, indexCursor, indexOffset);
    },
    history: (args: Args, ctx: ExecContext, info: GraphQLResolveInfo) => {
      resourceCheck(ctx, info);
      for (const unsupported of ['path', 'author'])
        if (args[unsupported] !== undefined)
          throw new GitHubGraphQLError(
            `Commit.history(${unsupported}:) is not implemented by the fake GitHub.`,
          );
      const since = args.since === undefined ? null : Date.parse(String(args.since));
      const until = args.until === undefined ? null : Date.parse(String(args.until));
      if (Number.isNaN(since) || Number.isNaN(until))
        throw new GitHubGraphQLError('since and until must be ISO-8601 timestamps (GitTimestamp).');
      const log = history(view.graph, c.sha).filter(
        (x) =>
          (since === null || x.committedMs >= since) && (until === null || x.committedMs <= until),
      );
      // GitHub's history cursors read "<oid> <offset>".
      const cursor = (i: number) => `${c.sha} ${i}`;
      const offset = (s: string) => {
        const m = /^([0-9a-f]{40}) (\d+)$/.exec(s);
        return m && m[1] === c.sha ? Number(m[2]) : null;
      };
      const p = page(log, args, cursor, offset);
      return {
        ...p,
        nodes: p.nodes.map((x) => commit(view, x)),
        edges: p.edges.map((e) => ({ ...e, node: commit(view, e.node) })),
      };
    },
  };
}

function commitOrNull(view: RepoView, sha: string | null): Obj | null {
  const c = sha ? view.graph.commits.get(sha) : undefined;
  return c ? commit(view, c) : null;
}

function comparison(view: RepoView, base: string, head: string): Obj | null {
  const r = range(view.graph, base, head);
  if (!r.mergeBase) return null;
  return {
    __typename: 'Comparison',
    id: nodeId('CMP', `${view.id}:${base}...${head}`),
    aheadBy: r.aheadBy,
    behindBy: r.behindBy,
    status: r.status.toUpperCase(),
    baseTarget: commitOrNull(view, base),
    headTarget: commitOrNull(view, head),
    commits: (args: Args, ctx: ExecContext, info: GraphQLResolveInfo) => {
      resourceCheck(ctx, info);
      const p = page(r.commits, args, indexCursor, indexOffset);
      return {
        ...p,
        nodes: p.nodes.map((x) => commit(view, x)),
        edges: p.edges.map((e) => ({ ...e, node: commit(view, e.node) })),
      };
    },
  };
}

function ref(view: RepoView, branch: string): Obj | null {
  if (branchTip(view.graph, branch) === null) return null;
  return {
    __typename: 'Ref',
    id: nodeId('REF', `${view.id}:refs/heads/${branch}`),
    name: branch,
    prefix: 'refs/heads/',
    // Read at resolution time: the tip now, not when the ref was first seen.
    target: () => commitOrNull(view, branchTip(view.graph, branch)),
    repository: () => repository(view),
    compare: (args: Args) => {
      const base = branchTip(view.graph, branch);
      const head = resolveRev(view.graph, String(args.headRef), view.defaultBranch);
      if (head === 'unsupported')
        throw new GitHubGraphQLError(
          `compare(headRef: "${String(args.headRef)}") is not implemented by the fake GitHub.`,
        );
      return base && head ? comparison(view, base, head) : null;
    },
  };
}

function repository(view: RepoView): Obj {
  const [owner, name] = view.fullName.split('/') as [string, string];
  return {
    __typename: 'Repository',
    id: nodeId('R', String(view.id)),
    databaseId: view.id,
    name,
    nameWithOwner: view.fullName,
    url: `https://github.com/${view.fullName}`,
    owner: { __typename: 'User', login: owner },
    defaultBranchRef: () => ref(view, view.defaultBranch),
    ref: (args: Args) => {
      const q = String(args.qualifiedName);
      if (q.startsWith('refs/') && !q.startsWith('refs/heads/')) return null; // no tags here
      return ref(view, q.startsWith('refs/heads/') ? q.slice('refs/heads/'.length) : q);
    },
    object: (args: Args) => {
      if (args.oid !== undefined && args.oid !== null) {
        const oid = String(args.oid);
        if (!FULL_SHA.test(oid))
          throw new GitHubGraphQLError(`Could not resolve to a GitObjectID: ${oid}`);
        return commitOrNull(view, oid);
      }
      if (args.expression !== undefined && args.expression !== null) {
        const sha = resolveRev(view.graph, String(args.expression), view.defaultBranch);
        if (sha === 'unsupported')
          throw new GitHubGraphQLError(
            `object(expression: "${String(args.expression)}") is not implemented by the fake GitHub.`,
          );
        return commitOrNull(view, sha);
      }
      throw new GitHubGraphQLError('Either oid or expression must be given.');
    },
  };
}

export function rootValue(): Obj {
  return {
    repository: (args: Args, ctx: ExecContext, info: GraphQLResolveInfo) => {
      if (ctx.dryRun) return null;
      const key = rootKey(info);
      if (ctx.failKeys.has(key) && !ctx.failDeep.has(key)) resourceCheck(ctx, info);
      const owner = String(args.owner);
      const name = String(args.name);
      const hit = ctx.lookup(owner, name);
      if (!hit || (hit.movedFrom && args.followRenames === false))
        throw new GitHubGraphQLError(
          `Could not resolve to a Repository with the name '${owner}/${name}'.`,
          'NOT_FOUND',
        );
      return repository(hit.repo);
    },
    rateLimit: (_args: Args, ctx: ExecContext) => ({
      ...ctx.rateLimit,
      resetAt: dateTime(ctx.rateLimit.resetAt.getTime()),
    }),
  };
}

/** Plain properties and methods of the objects above; anything else is not implemented. */
export const fieldResolver: GraphQLFieldResolver<unknown, ExecContext> = (
  source,
  args,
  ctx,
  info,
) => {
  const obj = source as Obj | null;
  if (obj && typeof obj === 'object' && info.fieldName in obj) {
    const v = obj[info.fieldName];
    return typeof v === 'function'
      ? (v as (a: Args, c: ExecContext, i: GraphQLResolveInfo) => unknown)(args, ctx, info)
      : v;
  }
  if (info.fieldName === '__typename') return info.parentType.name;
  throw new GitHubGraphQLError(
    `${info.parentType.name}.${info.fieldName} is not implemented by the fake GitHub.`,
  );
};
