/**
 * Telling a database that refused some content from a database that is not there.
 * SQLSTATE classes 22 (data exception: bad encoding, out of range, bad jsonb), 23
 * (integrity constraint) and 54 (program limit: index row too large, stack depth) are
 * answers about the rows we sent — the same rows will be refused again, so they are
 * content to reject. Anything else (connection lost, server shutting down, a
 * serialization failure) is about the database and is worth trying again later.
 */
export function sqlState(err: unknown): string | null {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) ? code : null;
}

export function isContentRefusal(err: unknown): boolean {
  const code = sqlState(err);
  return code !== null && /^(22|23|54)/.test(code);
}
