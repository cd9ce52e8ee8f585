import type { FakeGitHub } from './fake-github-types.ts';

/** POST /graphql to a fake GitHub as a client would, for the fake's own tests. */

export interface GraphQLReply {
  status: number;
  headers: Headers;
  // biome-ignore lint/suspicious/noExplicitAny: an answer is read field by field in tests
  body: any;
}

export async function postGraphQL(
  fake: Pick<FakeGitHub, 'url'>,
  query: string,
  variables: Record<string, unknown> = {},
  token: string | null = 'token-a',
): Promise<GraphQLReply> {
  const r = await fetch(`${fake.url}/graphql`, {
    method: 'POST',
    headers: token ? { authorization: `bearer ${token}` } : {},
    body: JSON.stringify({ query, variables }),
  });
  const text = await r.text();
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {}
  return { status: r.status, headers: r.headers, body };
}

/** `history(first: n)` of a commit, the fields a stored commit row needs. */
export function historyQuery(first = 100): string {
  return `query($o: String!, $n: String!, $h: GitObjectID!, $after: String) {
    repository(owner: $o, name: $n) {
      object(oid: $h) { ... on Commit {
        history(first: ${first}, after: $after) {
          totalCount
          pageInfo { hasNextPage endCursor }
          nodes { oid parents(first: 2) { totalCount nodes { oid } } }
        }
      } }
    }
  }`;
}
