import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { jsonInteger, parseJson } from '../../src/platform/json/exact.ts';
import {
  addressUnderPolicy,
  jsonTextUnderPolicy,
  jsonUnderPolicy,
  textUnderPolicy,
} from '../../src/store/commit-emails.ts';

// COMMIT_EMAILS as one rule applied everywhere (ADR 0184): an address field, addresses
// inside text, and whole JSON values (payloads, rejected events).

const hashOf = (a: string) =>
  `sha256:${createHash('sha256').update(a.trim().toLowerCase()).digest('hex')}`;

describe('one address', () => {
  it('hash: sha256 of the trimmed lower-cased address; keep: as given; drop: null', () => {
    expect(addressUnderPolicy(' Mona@Example.COM ', 'hash')).toBe(hashOf('mona@example.com'));
    expect(addressUnderPolicy(' Mona@Example.COM ', 'keep')).toBe(' Mona@Example.COM ');
    expect(addressUnderPolicy('mona@example.com', 'drop')).toBeNull();
    expect(addressUnderPolicy('   ', 'hash')).toBeNull();
    // Hashed already (another instance's hour file): joins the same address hashed here.
    expect(addressUnderPolicy(hashOf('a@b.org'), 'hash')).toBe(hashOf('a@b.org'));
    // Not address-shaped, but an address field: held to the policy all the same.
    expect(addressUnderPolicy('arifarhan1602@.com', 'hash')).toBe(hashOf('arifarhan1602@.com'));
  });
});

describe('addresses inside text', () => {
  it('a trailer keeps its shape and joins its author: the same hash as the address field', () => {
    const message =
      'fix\n\nSigned-off-by: Jane Doe <Jane.Doe@Example.org>\nCo-authored-by: x <y+z@a.b.co>';
    expect(textUnderPolicy(message, 'hash')).toBe(
      `fix\n\nSigned-off-by: Jane Doe <${hashOf('jane.doe@example.org')}>\nCo-authored-by: x <${hashOf('y+z@a.b.co')}>`,
    );
    expect(textUnderPolicy(message, 'drop')).toBe(
      'fix\n\nSigned-off-by: Jane Doe <>\nCo-authored-by: x <>',
    );
    expect(textUnderPolicy(message, 'keep')).toBe(message);
  });

  it('leaves what only looks a little like one: versions, scopes, mentions', () => {
    for (const text of [
      'bump lodash@4.17.21 and node@20.1.0',
      'use @types/node and @octocat',
      'email me',
      'a@b',
    ]) {
      expect(textUnderPolicy(text, 'hash')).toBe(text);
    }
  });
});

describe('JSON values', () => {
  it('an email field is an address, every other string text, keys too; nothing else moves', () => {
    const payload = {
      size: 1,
      push_id: jsonInteger('90071992547409930'),
      commits: [
        {
          sha: 'a'.repeat(40),
          author: { email: 'Dev@Example.com', name: 'dev@example.com' },
          message: 'hi <dev@example.com>',
          distinct: true,
        },
      ],
      'odd@key.example': null,
    };
    const under = jsonUnderPolicy(payload, 'hash') as typeof payload;
    expect(under).not.toBe(payload);
    expect(under.commits[0]!.author).toEqual({
      email: hashOf('dev@example.com'),
      name: hashOf('dev@example.com'),
    });
    expect(under.commits[0]!.message).toBe(`hi <${hashOf('dev@example.com')}>`);
    expect(Object.keys(under)).toContain(hashOf('odd@key.example'));
    // The input is untouched, and an exact number stays exact.
    expect(payload.commits[0]!.author.email).toBe('Dev@Example.com');
    expect(jsonTextUnderPolicy(payload, 'hash')).toContain('"push_id":90071992547409930');
    expect(jsonUnderPolicy(payload, 'drop')).toMatchObject({
      commits: [{ author: { email: null, name: '' } }],
    });
  });

  it('returns the very value when nothing in it is an address (and always under keep)', () => {
    const plain = parseJson('{"ref":"refs/heads/main","head":"abc","size":2,"n":[1,2]}');
    expect(jsonUnderPolicy(plain, 'hash')).toBe(plain);
    const withAddress = { author: { email: 'a@b.org' } };
    expect(jsonUnderPolicy(withAddress, 'keep')).toBe(withAddress);
    expect(jsonTextUnderPolicy(withAddress, 'keep')).toBe(JSON.stringify(withAddress));
  });
});
