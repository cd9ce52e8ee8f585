import { describe, expect, it } from 'vitest';
import * as queries from '../../src/commits/graphql/queries.ts';
import { validateAgainstGitHubSchema } from '../support/fake-graphql-schema.ts';

/**
 * Every GraphQL document the project can send is valid against GitHub's published schema
 * (@octokit/graphql-schema) and within GitHub's static limits. The examples are the
 * module's GRAPHQL_QUERY_EXAMPLES plus any other exported string that is a document.
 */

const isDocument = (v: unknown): v is string =>
  typeof v === 'string' && /^\s*(query|fragment|\{)/.test(v);

const exported: [string, unknown][] = Object.entries(queries);
const documents: [string, string][] = [
  ...queries.GRAPHQL_QUERY_EXAMPLES.map((q, i): [string, string] => [
    `GRAPHQL_QUERY_EXAMPLES[${i}]`,
    q,
  ]),
  ...exported.flatMap(([name, v]): [string, string][] => (isDocument(v) ? [[name, v]] : [])),
];

describe('the queries the project sends to GitHub', () => {
  it('has examples to check', () => {
    expect(queries.GRAPHQL_QUERY_EXAMPLES.length).toBeGreaterThan(0);
  });

  it.each(documents)('%s is valid against GitHub’s schema and limits', (_name, query) => {
    expect(validateAgainstGitHubSchema(query)).toEqual([]);
  });
});

describe('validateAgainstGitHubSchema', () => {
  const repo = (inner: string) =>
    `{ repository(owner: "o", name: "n") { object(expression: "main") { ... on Commit { ${inner} } } } }`;

  it('refuses what GitHub would refuse', () => {
    expect(validateAgainstGitHubSchema('{ repository(owner: "o") { id }')[0]).toMatch(
      /Syntax Error/,
    );
    expect(validateAgainstGitHubSchema('{ repository(owner: "o", name: "n") { sha } }')).toEqual([
      'Cannot query field "sha" on type "Repository".',
    ]);
    expect(validateAgainstGitHubSchema('{ repository(owner: "o") { id } }')[0]).toMatch(
      /argument "name" of type "String!" is required/,
    );
    expect(validateAgainstGitHubSchema(repo('history { totalCount }'))).toEqual([
      'MISSING_PAGINATION_BOUNDARIES: You must provide a `first` or `last` value to properly paginate the `history` connection.',
    ]);
    expect(validateAgainstGitHubSchema(repo('history(first: 101) { totalCount }'))).toEqual([
      'EXCESSIVE_PAGINATION: Requesting 101 records on the `history` connection exceeds the `first` limit of 100 records.',
    ]);
    expect(validateAgainstGitHubSchema(repo('history(first: 0) { totalCount }'))[0]).toMatch(
      /between 1 and 100/,
    );
    expect(
      validateAgainstGitHubSchema(repo('history(first: 1, last: 1) { totalCount }'))[0],
    ).toMatch(/both `first` and `last`/);
  });

  it('reads first from the variables, and refuses a variable left without a value', () => {
    const q = `query($n: Int) ${repo('history(first: $n) { totalCount }')}`;
    expect(validateAgainstGitHubSchema({ query: q, variables: { n: 10 } })).toEqual([]);
    expect(validateAgainstGitHubSchema({ query: q, variables: { n: 200 } })[0]).toMatch(
      /EXCESSIVE/,
    );
    expect(validateAgainstGitHubSchema(q)[0]).toMatch(/MISSING_PAGINATION_BOUNDARIES/);
    const withDefault = `query($n: Int = 5) ${repo('history(first: $n) { totalCount }')}`;
    expect(validateAgainstGitHubSchema(withDefault)).toEqual([]);
  });

  it('refuses more than 500,000 nodes', () => {
    const q = repo(
      'history(first: 100) { nodes { history(first: 100) { nodes { history(first: 100) { totalCount } } } } }',
    );
    expect(validateAgainstGitHubSchema(q)).toEqual([
      'MAX_NODE_LIMIT_EXCEEDED: By the time this query traverses to the history connection, it is requesting up to 1,010,100 possible nodes which exceeds the maximum limit of 500,000.',
    ]);
  });
});
