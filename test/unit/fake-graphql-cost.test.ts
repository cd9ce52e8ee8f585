import { parse } from 'graphql';
import { describe, expect, it } from 'vitest';
import { analyzeQuery, pointsFor } from '../support/fake-graphql-cost.ts';
import { githubSchema } from '../support/fake-graphql-schema.ts';

/**
 * The fake's point and node arithmetic on the examples of GitHub's "Rate limits and query
 * limits for the GraphQL API", which give their answers.
 */

const analyze = (query: string, variables: Record<string, unknown> = {}) =>
  analyzeQuery(githubSchema(), parse(query), { variables });

describe('GitHub’s point formula', () => {
  it('the doc’s example: 100 repositories × 50 issues × 60 labels is 5,101 requests, 51 points', () => {
    const a = analyze(`query {
      viewer { login repositories(first: 100) { edges { node { id
        issues(first: 50) { edges { node { id
          labels(first: 60) { edges { node { id name } } } } } } } } } } }`);
    expect(a.requests).toBe(1 + 100 + 5000);
    expect(a.cost).toBe(51);
    expect(a.errors).toEqual([]);
  });

  it('rounds to the nearest whole number and costs at least 1', () => {
    expect([0, 1, 49, 50, 149, 150, 5101].map(pointsFor)).toEqual([1, 1, 1, 1, 1, 2, 51]);
    expect(analyze('{ rateLimit { cost } }').cost).toBe(1);
  });

  it('50 aliased repository { object { history(first: 5) } } cost 1 point', () => {
    const aliases = Array.from(
      { length: 50 },
      (_, i) =>
        `r${i}: repository(owner: "o", name: "n${i}") { object(oid: "${'a'.repeat(40)}") { ... on Commit { history(first: 5) { nodes { oid } } } } }`,
    );
    const a = analyze(`{ ${aliases.join('\n')} }`);
    expect(a.requests).toBe(50);
    expect(a.cost).toBe(1);
    expect(a.nodeCount).toBe(250);
    expect(a.topLevel).toHaveLength(50);
    expect(a.topLevel[0]).toEqual({ key: 'r0', requests: 1, nodes: 5, hasConnection: true });
  });

  it('counts a connection asked for twice through fragments once, and reads first from variables', () => {
    const a = analyze(
      `query($n: Int!) { repository(owner: "o", name: "n") { object(expression: "main") {
        ... on Commit { history(first: $n) { totalCount } }
        ...H } } }
      fragment H on Commit { history(first: $n) { nodes { parents(first: 2) { totalCount } } } }`,
      { n: 100 },
    );
    expect(a.requests).toBe(1 + 100);
    expect(a.nodeCount).toBe(100 + 200);
    expect(a.cost).toBe(1);
  });

  it('nested histories: 1 + 100 + 10,000 requests is 101 points', () => {
    const a =
      analyze(`{ repository(owner: "o", name: "n") { object(expression: "main") { ... on Commit {
      history(first: 100) { nodes { history(first: 100) { nodes { history(first: 40) { totalCount } } } } } } } } }`);
    expect(a.requests).toBe(10_101);
    expect(a.cost).toBe(101);
    expect(a.nodeCount).toBe(100 + 10_000 + 400_000);
    expect(a.errors).toEqual([]);
  });
});

describe('GitHub’s node limit', () => {
  it('the doc’s simple example is 550 nodes, the complex one 22,060', () => {
    expect(
      analyze(`query { viewer { repositories(first: 50) { edges { repository:node { name
        issues(first: 10) { totalCount edges { node { title bodyHTML } } } } } } } }`).nodeCount,
    ).toBe(550);
    expect(
      analyze(`query { viewer { repositories(first: 50) { edges { repository:node { name
        pullRequests(first: 20) { edges { pullRequest:node { title
          comments(first: 10) { edges { comment:node { bodyHTML } } } } } }
        issues(first: 20) { totalCount edges { issue:node { title bodyHTML
          comments(first: 10) { edges { comment:node { bodyHTML } } } } } } } } }
        followers(first: 10) { edges { follower:node { login } } } } }`).nodeCount,
    ).toBe(22_060);
  });

  it('a query past 500,000 nodes is refused at the connection that crosses it', () => {
    const a =
      analyze(`{ repository(owner: "o", name: "n") { object(expression: "main") { ... on Commit {
      history(first: 100) { nodes { history(first: 100) { nodes { history(first: 51) { totalCount } } } } } } } } }`);
    expect(a.errors).toHaveLength(1);
    expect(a.errors[0]).toMatchObject({
      type: 'MAX_NODE_LIMIT_EXCEEDED',
      path: ['repository', 'object', 'history', 'nodes', 'history', 'nodes', 'history'],
    });
  });
});

describe('dryRun', () => {
  it('rateLimit(dryRun: true) marks the query as one to cost, not run', () => {
    expect(analyze('{ rateLimit(dryRun: true) { cost } }').dryRun).toBe(true);
    expect(analyze('{ rateLimit { cost } }').dryRun).toBe(false);
  });
});
