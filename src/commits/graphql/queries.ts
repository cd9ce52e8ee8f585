/**
 * Every GraphQL document the project can send to GitHub, as examples a unit test
 * (test/unit/graphql-queries.test.ts) validates against GitHub's published schema and
 * static limits (pagination on every connection, the node limit). A query builder added
 * here adds an example of each shape it can produce.
 */

import { buildQuery } from './batch.ts';

/**
 * One batch of pushes, each an alias: the repository by name (renames followed), its
 * default branch's tip, and the history back from the push's head with what a stored
 * commit row needs. Twenty commits a push and two parents a commit: 2 pushes cost
 * 2 + 40 requests, 1 point; 50 such pushes 50 + 1,000 requests, 11 points.
 */
const PUSH_HISTORY_BATCH = `
query PushHistories(
  $o0: String!, $n0: String!, $h0: GitObjectID!,
  $o1: String!, $n1: String!, $h1: GitObjectID!
) {
  rateLimit { cost remaining resetAt limit used nodeCount }
  p0: repository(owner: $o0, name: $n0) { ...PushRepository head: object(oid: $h0) { ...PushHistory } }
  p1: repository(owner: $o1, name: $n1) { ...PushRepository head: object(oid: $h1) { ...PushHistory } }
}
fragment PushRepository on Repository {
  databaseId
  nameWithOwner
  defaultBranchRef { name target { oid } }
}
fragment PushHistory on Commit {
  oid
  history(first: 20) {
    totalCount
    pageInfo { hasNextPage endCursor }
    nodes {
      oid
      message
      committedDate
      authoredDate
      author { name email date user { databaseId login } }
      committer { name email date user { databaseId login } }
      parents(first: 2) { totalCount nodes { oid } }
    }
  }
}`;

/**
 * A new branch against the default branch as it is now: ahead/behind and the commits
 * only the branch has, oldest first.
 */
const NEW_BRANCH_COMPARE = `
query NewBranch($owner: String!, $name: String!, $base: String!, $head: String!, $after: String) {
  rateLimit { cost remaining resetAt }
  repository(owner: $owner, name: $name) {
    ref(qualifiedName: $base) {
      compare(headRef: $head) {
        aheadBy
        behindBy
        status
        commits(first: 100, after: $after) {
          totalCount
          pageInfo { hasNextPage endCursor }
          nodes { oid parents(first: 2) { totalCount nodes { oid } } }
        }
      }
    }
  }
}`;

const oid = (c: string) => c.repeat(40);

/**
 * What the batched fetcher sends (graphql-batch.ts buildQuery), one example of each shape:
 * a first round (the head with its parents, the base's newest ancestors; or the head alone
 * without its count), a new branch's first round (the default branch's tip and its newest
 * ancestors), and the later rounds (a walk from a commit, a count, the next page of the
 * base's history). The examples are built by the builder, so
 * a change to it is validated here.
 */
const BATCH_EXAMPLES = [
  buildQuery(
    [
      {
        fullName: 'octo/one',
        repositoryId: '1',
        asks: [
          { kind: 'walk', from: oid('a'), first: 1 },
          { kind: 'base', first: 100, after: null },
        ],
      },
      {
        fullName: 'octo/two',
        repositoryId: '2',
        asks: [{ kind: 'walk', from: oid('b'), first: 1 }],
        defaultBranch: true,
      },
      {
        fullName: 'octo/three',
        repositoryId: '3',
        asks: [{ kind: 'commit', of: oid('9') }],
        defaultBranch: true,
      },
    ],
    [oid('c'), null, null],
  ),
  buildQuery(
    [
      {
        fullName: 'octo/one',
        repositoryId: '1',
        asks: [
          { kind: 'walk', from: oid('d'), first: 100 },
          { kind: 'count', of: oid('e') },
          { kind: 'count', of: oid('f'), first: 100 },
          { kind: 'base', first: 100, after: `${oid('c')} 99` },
        ],
      },
    ],
    [oid('c')],
  ),
].map((q) => q.query);

export const GRAPHQL_QUERY_EXAMPLES: readonly string[] = [
  PUSH_HISTORY_BATCH,
  NEW_BRANCH_COMPARE,
  ...BATCH_EXAMPLES,
];
