import { routeTemplate } from './pacing.ts';

/**
 * What a request is, for the limits its answer is read under (ADR 0110 §6): an events page,
 * a profile, a compare, a GraphQL query, an App token. Derived from the method and path in
 * this one place, so no caller can forget to say it and every path has exactly one kind.
 */
export const REQUEST_KINDS = ['events', 'profile', 'compare', 'graphql', 'token', 'other'] as const;
export type RequestKind = (typeof REQUEST_KINDS)[number];

export type RequestMethod = 'GET' | 'POST';

export function requestKind(method: RequestMethod, path: string): RequestKind {
  const route = routeTemplate(path);
  if (route === '/graphql') return 'graphql';
  if (method === 'POST' && route.endsWith('/access_tokens')) return 'token';
  if (route.endsWith('/events') || route.endsWith('/events/public')) return 'events';
  if (route.includes('/compare/')) return 'compare';
  if (
    route === '/users/{username}' ||
    route === '/user/{account_id}' ||
    route === '/repos/{owner}/{repo}' ||
    route === '/repositories/{repository_id}'
  ) {
    return 'profile';
  }
  return 'other';
}
