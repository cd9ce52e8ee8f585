import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/platform/config/config.ts';
import { runBin } from '../support/cli.ts';
import { configError } from '../support/config-error.ts';
import { appKeys } from '../support/github-app-keys.ts';

/**
 * The credential pool's variables: GITHUB_TOKEN, GITHUB_TOKENS and the GitHub App
 * (GITHUB_APP_ID, GITHUB_APP_PRIVATE_KEY or GITHUB_APP_PRIVATE_KEY_FILE,
 * GITHUB_APP_INSTALLATION_IDS). Every bad value or combination is one ConfigError naming
 * the variable, and no message quotes a token or the key.
 */

// As GitHub issues it: BEGIN RSA PRIVATE KEY (PKCS#1).
const { privateKey: RSA_PEM, publicKey: PUBLIC_PEM } = appKeys();
const { privateKey: EC_PEM } = generateKeyPairSync('ec', {
  namedCurve: 'prime256v1',
  privateKeyEncoding: { type: 'pkcs8', format: 'pem' },
  publicKeyEncoding: { type: 'spki', format: 'pem' },
});
const KEY_BODY = RSA_PEM.split('\n')[5]!; // a line of key material
const dir = mkdtempSync(path.join(tmpdir(), 'gpi-app-key-'));
const keyFile = path.join(dir, 'app.pem');
writeFileSync(keyFile, RSA_PEM);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const APP = { GITHUB_APP_ID: '123456', GITHUB_APP_INSTALLATION_IDS: '11,22' };

// [what, env, the variable named, what the line says]
const BAD: [string, Record<string, string>, string, RegExp][] = [
  ['an empty entry', { GITHUB_TOKENS: 'aaa,,bbb' }, 'GITHUB_TOKENS', /entry 2 is empty/],
  ['a trailing comma', { GITHUB_TOKENS: 'aaa,' }, 'GITHUB_TOKENS', /entry 2 is empty/],
  ['whitespace inside', { GITHUB_TOKENS: 'aaa, b c' }, 'GITHUB_TOKENS', /whitespace.*entry 2/],
  [
    'a token twice',
    { GITHUB_TOKENS: 'tok-one,tok-two,tok-one' },
    'GITHUB_TOKENS',
    /same token twice \(token:[0-9a-f]{8}, entries 1 and 3\)/,
  ],
  [
    'GITHUB_TOKEN again',
    { GITHUB_TOKEN: 'tok-one', GITHUB_TOKENS: 'tok-two, tok-one' },
    'GITHUB_TOKENS',
    /repeats GITHUB_TOKEN \(token:[0-9a-f]{8}\)/,
  ],
  ['an App ID that is a name', { ...APP, GITHUB_APP_ID: 'my-app' }, 'GITHUB_APP_ID', /numeric ID/],
  ['APP_ID without a key', APP, 'GITHUB_APP_PRIVATE_KEY', /must be set.*GITHUB_APP_ID is set/],
  [
    'a key without APP_ID',
    { GITHUB_APP_PRIVATE_KEY: RSA_PEM },
    'GITHUB_APP_ID',
    /must be set when GITHUB_APP_PRIVATE_KEY is set/,
  ],
  [
    'a key file without APP_ID',
    { GITHUB_APP_PRIVATE_KEY_FILE: keyFile },
    'GITHUB_APP_ID',
    /must be set when GITHUB_APP_PRIVATE_KEY_FILE is set/,
  ],
  [
    'installations without APP_ID',
    { GITHUB_APP_INSTALLATION_IDS: '1' },
    'GITHUB_APP_ID',
    /must be set when GITHUB_APP_INSTALLATION_IDS is set/,
  ],
  [
    'a key and a key file',
    { ...APP, GITHUB_APP_PRIVATE_KEY: RSA_PEM, GITHUB_APP_PRIVATE_KEY_FILE: keyFile },
    'GITHUB_APP_PRIVATE_KEY_FILE',
    /together with GITHUB_APP_PRIVATE_KEY/,
  ],
  [
    'no installations',
    { GITHUB_APP_ID: '1', GITHUB_APP_PRIVATE_KEY: RSA_PEM },
    'GITHUB_APP_INSTALLATION_IDS',
    /must list the installations/,
  ],
  [
    'an installation id that is not a number',
    { ...APP, GITHUB_APP_PRIVATE_KEY: RSA_PEM, GITHUB_APP_INSTALLATION_IDS: '11,abc' },
    'GITHUB_APP_INSTALLATION_IDS',
    /bad entry "abc"/,
  ],
  [
    'an installation twice',
    { ...APP, GITHUB_APP_PRIVATE_KEY: RSA_PEM, GITHUB_APP_INSTALLATION_IDS: '11, 22,11' },
    'GITHUB_APP_INSTALLATION_IDS',
    /installation 11 twice/,
  ],
  [
    'an unreadable key file',
    { ...APP, GITHUB_APP_PRIVATE_KEY_FILE: path.join(dir, 'missing.pem') },
    'GITHUB_APP_PRIVATE_KEY_FILE',
    /cannot be read \(ENOENT: .*missing\.pem\)/,
  ],
  [
    'a key that is not PEM',
    { ...APP, GITHUB_APP_PRIVATE_KEY: 'just-a-secret-string' },
    'GITHUB_APP_PRIVATE_KEY',
    /is not a PEM private key/,
  ],
  [
    'a truncated PEM',
    { ...APP, GITHUB_APP_PRIVATE_KEY: RSA_PEM.slice(0, 400) },
    'GITHUB_APP_PRIVATE_KEY',
    /not a readable PEM private key/,
  ],
  [
    'a damaged PEM in a file',
    { ...APP, GITHUB_APP_PRIVATE_KEY_FILE: path.join(dir, 'damaged.pem') },
    'GITHUB_APP_PRIVATE_KEY_FILE',
    /not a readable PEM private key/,
  ],
  [
    'the public key instead of the private one',
    { ...APP, GITHUB_APP_PRIVATE_KEY: PUBLIC_PEM },
    'GITHUB_APP_PRIVATE_KEY',
    /is a public key/,
  ],
  [
    'a key that is not RSA',
    { ...APP, GITHUB_APP_PRIVATE_KEY: EC_PEM },
    'GITHUB_APP_PRIVATE_KEY',
    /must be an RSA private key.*got ec/,
  ],
];
writeFileSync(
  path.join(dir, 'damaged.pem'),
  RSA_PEM.replace(KEY_BODY, 'A'.repeat(KEY_BODY.length)),
);

describe('credential variables: every bad value or combination names its variable', () => {
  it.each(BAD)('%s', (_what, env, variable, says) => {
    const err = configError(env);
    expect(err.variable).toBe(variable);
    expect(err.message.startsWith(`${variable} `)).toBe(true);
    expect(err.message).toMatch(says);
    expect(err.message).not.toContain('\n');
    // Never the secret itself: not the token, not a line of the key.
    for (const secret of ['tok-one', 'aaa', KEY_BODY, 'just-a-secret-string'])
      expect(err.message).not.toContain(secret);
  });

  it('a key file that is a directory is named with its path', () => {
    const err = configError({ ...APP, GITHUB_APP_PRIVATE_KEY_FILE: dir });
    expect(err.message).toBe(`GITHUB_APP_PRIVATE_KEY_FILE cannot be read (EISDIR: ${dir})`);
  });
});

describe('credential variables: what a good configuration gives', () => {
  it('GITHUB_TOKEN first, then GITHUB_TOKENS, trimmed', () => {
    const c = loadConfig({ GITHUB_TOKEN: 'tok-a', GITHUB_TOKENS: ' tok-b , tok-c ' });
    expect(c.github.token).toBe('tok-a');
    expect(c.github.tokens).toEqual(['tok-a', 'tok-b', 'tok-c']);
    expect(c.github.app).toBeNull();
    expect(Object.isFrozen(c.github.tokens)).toBe(true);
  });

  it('no credentials at all: an empty pool (the client uses anonymous)', () => {
    const c = loadConfig({});
    expect(c.github.tokens).toEqual([]);
    expect(c.github.app).toBeNull();
  });

  it('an App from an inline PEM (line breaks escaped as \\n, as in .env files) or a file', () => {
    const escaped = RSA_PEM.trim().replace(/\n/g, '\\n');
    const inline = loadConfig({ ...APP, GITHUB_APP_PRIVATE_KEY: escaped });
    const fromFile = loadConfig({ ...APP, GITHUB_APP_PRIVATE_KEY_FILE: keyFile });
    for (const c of [inline, fromFile]) {
      expect(c.github.app).toMatchObject({ id: '123456', installationIds: [11, 22] });
      // Normalized to PKCS#8 (what WebCrypto signs with), the same key either way.
      expect(c.github.app!.privateKey).toMatch(/^-----BEGIN PRIVATE KEY-----\n/);
    }
    expect(inline.github.app!.privateKey).toBe(fromFile.github.app!.privateKey);
  });

  it('accepts a Client ID as the App ID', () => {
    const c = loadConfig({
      ...APP,
      GITHUB_APP_ID: 'Iv23liABCdef12',
      GITHUB_APP_PRIVATE_KEY: RSA_PEM,
    });
    expect(c.github.app!.id).toBe('Iv23liABCdef12');
  });

  it('tokens and an App together', () => {
    const c = loadConfig({ GITHUB_TOKENS: 'tok-a', ...APP, GITHUB_APP_PRIVATE_KEY_FILE: keyFile });
    expect(c.github.tokens).toEqual(['tok-a']);
    expect(c.github.app!.installationIds).toEqual([11, 22]);
  });
});

describe('a real process with a bad combination', () => {
  it('exits 2 with one line naming the variable, and nothing of the key', async () => {
    const r = await runBin('worker', [], {
      DATABASE_URL: 'postgres://127.0.0.1:1/never-reached',
      GITHUB_APP_ID: '1',
      GITHUB_APP_PRIVATE_KEY: RSA_PEM.slice(0, 400),
      GITHUB_APP_INSTALLATION_IDS: '5',
    });
    expect(r.code).toBe(2);
    const lines = r.err.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/GITHUB_APP_PRIVATE_KEY is not a readable PEM private key/);
    expect(r.out + r.err).not.toContain(KEY_BODY);
    expect(r.out + r.err).not.toContain('PRIVATE KEY-----');
  });
});
