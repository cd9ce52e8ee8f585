import { describe, expect, it } from 'vitest';
import { networkHint } from '../../src/backfill/archive.ts';
import { describeFailure } from '../../src/cli/failure.ts';

/**
 * A host that does not resolve, or a connection nobody answers, says what to check, not
 * only "run it again" (a DNS failure once told bin/backfill's user to run the same command
 * again to resume). The errors are Node's own shapes (getaddrinfo, connect): no lookup is
 * made here. The whole line of bin/backfill for a refused connection:
 * test/integration/backfill-cli.test.ts.
 */

function nodeError(code: string, message: string, extra: Record<string, unknown> = {}): Error {
  return Object.assign(new Error(message), { code, ...extra });
}

describe('a mirror that cannot be reached', () => {
  it('names what to check: the host name and DNS, the URL and the mirror, or the network', () => {
    expect(networkHint(nodeError('ENOTFOUND', 'getaddrinfo ENOTFOUND x.invalid'))).toBe(
      "; the mirror's host name does not resolve: check it in GHARCHIVE_URL (or --mirror) and this machine's DNS",
    );
    expect(networkHint(nodeError('EAI_AGAIN', 'getaddrinfo EAI_AGAIN x'))).toContain(
      "this machine's DNS",
    );
    expect(networkHint(nodeError('ECONNREFUSED', 'connect ECONNREFUSED'))).toContain(
      'and that it is up',
    );
    expect(networkHint(nodeError('ETIMEDOUT', 'connect ETIMEDOUT'))).toContain('the network');
    expect(networkHint(new Error('something else'))).toBe('');
  });
});

describe('a command that ends on a host name that does not resolve', () => {
  it('names the host and says to check DATABASE_URL and the DNS, whatever wrapped the error', () => {
    const dns = nodeError('ENOTFOUND', 'getaddrinfo ENOTFOUND db.example.invalid', {
      hostname: 'db.example.invalid',
      syscall: 'getaddrinfo',
    });
    const expected =
      'the host name "db.example.invalid" does not resolve (getaddrinfo ENOTFOUND db.example.invalid); check the host in DATABASE_URL (or the URL that names it) and this machine\'s DNS';
    expect(describeFailure(dns)).toBe(expected);
    const wrapped = new Error('getaddrinfo ENOTFOUND db.example.invalid', { cause: dns });
    expect(describeFailure(wrapped)).toBe(expected);
    // A refused connection stays the database's (as before).
    expect(describeFailure(nodeError('ECONNREFUSED', 'connect ECONNREFUSED 127.0.0.1:5'))).toBe(
      'the database connection failed (connect ECONNREFUSED 127.0.0.1:5); check that Postgres is up and DATABASE_URL',
    );
  });
});
