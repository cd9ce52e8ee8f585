import { sqlState } from '../platform/db/errors.ts';
import { withoutUserinfo } from '../platform/redact.ts';

/**
 * One line for an error that ends a command: a lost or refused database connection is
 * named as such (what an operator can act on), never a pg error object or its stack.
 */

/** SQLSTATE classes and codes that are about the connection, not the statement. */
const CONNECTION_STATES = /^(08|57P0[1-4]|53300)/;
const NODE_NET = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'EHOSTUNREACH']);
const PG_CONNECTION_MESSAGES =
  /^(Connection terminated|timeout exceeded when trying to connect|Client has encountered a connection error|Connection ended)|is not currently accepting connections/;

/** Is this the database connection failing (lost, refused, server shutting down)? */
export function isDatabaseConnectionError(err: unknown): boolean {
  for (let e = err, depth = 0; e instanceof Error && depth < 5; depth++) {
    const state = sqlState(e);
    const code = (e as { code?: unknown }).code;
    if (state !== null && CONNECTION_STATES.test(state)) return true;
    if (typeof code === 'string' && NODE_NET.has(code)) return true;
    if (PG_CONNECTION_MESSAGES.test(e.message)) return true;
    e = (e as { cause?: unknown }).cause;
  }
  return false;
}

/** A host name that did not resolve, anywhere in the error's causes (getaddrinfo). */
function unresolvedHost(err: unknown): string | null {
  for (let e = err, depth = 0; e instanceof Error && depth < 5; depth++) {
    const x = e as { code?: unknown; hostname?: unknown };
    if ((x.code === 'ENOTFOUND' || x.code === 'EAI_AGAIN') && typeof x.hostname === 'string') {
      return x.hostname;
    }
    e = (e as { cause?: unknown }).cause;
  }
  return null;
}

/** "the database connection was lost (terminating connection due to …)", or "Name [CODE]: message". */
export function describeFailure(err: unknown): string {
  const e = err as (Error & { code?: unknown }) | null;
  const message = withoutUserinfo((e?.message ?? String(err)).split('\n')[0]!);
  const host = unresolvedHost(err);
  if (host !== null) {
    // Most often DATABASE_URL's host (the first connection a command makes), but say which.
    return `the host name ${JSON.stringify(host.slice(0, 255))} does not resolve (${message}); check the host in DATABASE_URL (or the URL that names it) and this machine's DNS`;
  }
  if (isDatabaseConnectionError(err)) {
    return `the database connection failed (${message}); check that Postgres is up and DATABASE_URL`;
  }
  const code = typeof e?.code === 'string' ? ` [${e.code}]` : '';
  return `${e?.name ?? 'Error'}${code}: ${message}`;
}
