import { readFileSync } from 'node:fs';
import {
  buildSchema,
  type DocumentNode,
  GraphQLError,
  type GraphQLSchema,
  parse,
  validate,
} from 'graphql';
import { analyzeQuery } from './fake-graphql-cost.ts';

/**
 * GitHub's published GraphQL schema (the SDL of `@octokit/graphql-schema`, a dev
 * dependency), built once per process. The SDL declares a few fields twice, so it is built
 * with `assumeValidSDL`. Read from the package's file, not its index, which would also
 * build a second copy from the 7 MB introspection JSON on import.
 */

let schema: GraphQLSchema | null = null;

export function githubSchema(): GraphQLSchema {
  if (!schema) {
    const sdl = readFileSync(
      new URL('../../node_modules/@octokit/graphql-schema/schema.graphql', import.meta.url),
      'utf8',
    );
    schema = buildSchema(sdl, { assumeValidSDL: true });
  }
  return schema;
}

export interface GraphQLRequestBody {
  query: string;
  variables?: Record<string, unknown>;
  operationName?: string;
}

/**
 * Every reason GitHub would refuse this query before running it, as messages (empty: it
 * would run): a syntax error, a schema validation error (an unknown field or argument, a
 * wrong type, an unused variable…), and GitHub's own static limits — `first` or `last`
 * (1–100, not both) on every connection, at most 500,000 nodes. A `first` given by a
 * variable needs that variable's value (or its default) in `variables`.
 */
export function validateAgainstGitHubSchema(
  request: string | GraphQLRequestBody,
  nodeLimit = 500_000,
): string[] {
  const body = typeof request === 'string' ? { query: request } : request;
  let document: DocumentNode;
  try {
    document = parse(body.query);
  } catch (err) {
    return [err instanceof GraphQLError ? err.message : String(err)];
  }
  const errors = validate(githubSchema(), document);
  if (errors.length > 0) return errors.map((e) => e.message);
  const analysis = analyzeQuery(githubSchema(), document, {
    variables: body.variables ?? {},
    operationName: body.operationName,
    nodeLimit,
  });
  return analysis.errors.map((e) => `${e.type}: ${e.message}`);
}
