import type { BuiltQuery } from '../../src/commits/graphql/batch.ts';
import type { SendResult } from '../../src/commits/graphql/rounds.ts';
import { fakeRepos } from './fake-github-repos.ts';
import { fakeGraphQL } from './fake-graphql.ts';
import type { RepoLookup } from './fake-graphql-resolvers.ts';

/**
 * The fake GitHub's `POST /graphql` in process, without HTTP: the same schema, resolvers,
 * cost formula and limits, for unit tests of the batched fetch and for the bench. Every
 * query is recorded with the points the fake charged it.
 */
export function inProcessGraphQL(o: { repos?: ReturnType<typeof fakeRepos> } = {}) {
  const repos = o.repos ?? fakeRepos();
  const gql = fakeGraphQL({ limitFor: () => 1_000_000_000 });
  const controls = gql.controls(() => 'token:driver');
  let n = 0;
  async function send(
    q: BuiltQuery,
  ): Promise<SendResult & { cost: number | null; status: number }> {
    const a = await gql.handle({
      credential: 'token:driver',
      bucket: gql.bucketFor('token:driver'),
      body: JSON.stringify({ query: q.query, variables: q.variables }),
      requestId: `R${++n}`,
      lookup: (owner: string, name: string): RepoLookup => repos.lookup(owner, name),
      sleep: async () => {},
    });
    if (a.status !== 200) {
      const err = new Error(`fake GraphQL answered ${a.status}`) as Error & { code: string };
      err.code = a.status >= 500 ? 'GITHUB_UNAVAILABLE' : 'GITHUB_REQUEST_FAILED';
      throw err;
    }
    let body: { data?: Record<string, unknown> | null; errors?: SendResult['errors'] };
    try {
      body = JSON.parse(a.body);
    } catch {
      // As the client reads it (graphql-answer.ts): a 200 that is not JSON is malformed.
      const err = new Error('fake GraphQL answered 200 with a body that is not JSON') as Error & {
        code: string;
      };
      err.code = 'MALFORMED_RESPONSE';
      throw err;
    }
    const rate = body.data?.rateLimit as { cost?: number } | undefined;
    return {
      data: body.data ?? null,
      errors: body.errors ?? [],
      cost: rate?.cost ?? null,
      status: a.status,
    };
  }
  return { repos, send, controls };
}
