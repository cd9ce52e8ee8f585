import { createPrivateKey, createPublicKey, sign, verify } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { ConfigError } from '../errors.ts';
import { tokenLabel } from './credential-label.ts';

/**
 * The credential variables (GITHUB_TOKEN, GITHUB_TOKENS, GITHUB_APP_*), checked together:
 * every bad value or combination stops the process at start with one line naming the
 * variable (src/platform/config/config.ts), and no message ever quotes a token or key material — a
 * duplicate is named by its fingerprint, a bad key only by what is wrong with it.
 */

export interface AppCredentials {
  /** The App's numeric ID (or its Client ID): the JWT's issuer. */
  readonly id: string;
  /** The private key as PKCS#8 PEM (normalized from what GitHub issues, PKCS#1). */
  readonly privateKey: string;
  readonly installationIds: readonly number[];
}

export interface CredentialsConfig {
  /** GITHUB_TOKEN then GITHUB_TOKENS, each once. */
  readonly tokens: readonly string[];
  readonly app: AppCredentials | null;
}

export interface CredentialEnv {
  GITHUB_TOKEN?: string;
  GITHUB_TOKENS?: string;
  GITHUB_APP_ID?: string;
  GITHUB_APP_PRIVATE_KEY?: string;
  GITHUB_APP_PRIVATE_KEY_FILE?: string;
  GITHUB_APP_INSTALLATION_IDS?: string;
}

function parseTokenList(raw: string, first: string | undefined): string[] {
  const tokens: string[] = [];
  const seen = new Map<string, string>();
  if (first !== undefined) seen.set(tokenLabel(first), 'GITHUB_TOKEN');
  raw.split(',').forEach((entry, i) => {
    const token = entry.trim();
    if (token === '') {
      throw new ConfigError(
        'GITHUB_TOKENS',
        `must be a comma-separated list of tokens (entry ${i + 1} is empty)`,
      );
    }
    if (/\s/.test(token)) {
      throw new ConfigError('GITHUB_TOKENS', `has whitespace inside entry ${i + 1}`);
    }
    const label = tokenLabel(token);
    const before = seen.get(label);
    if (before !== undefined) {
      throw new ConfigError(
        'GITHUB_TOKENS',
        before === 'GITHUB_TOKEN'
          ? `repeats GITHUB_TOKEN (${label}): list each token once`
          : `lists the same token twice (${label}, entries ${before} and ${i + 1})`,
      );
    }
    seen.set(label, String(i + 1));
    tokens.push(token);
  });
  return tokens;
}

function parseAppId(raw: string): string {
  // A numeric App ID, or the Client ID GitHub also accepts as the JWT issuer (Iv1.…, Iv23…).
  if (/^[1-9]\d{0,15}$/.test(raw) || /^Iv[0-9A-Za-z._]{4,64}$/.test(raw)) return raw;
  throw new ConfigError(
    'GITHUB_APP_ID',
    `must be the App's numeric ID (or its Client ID, Iv…) (got "${raw.slice(0, 40)}")`,
  );
}

function parseInstallationIds(raw: string): number[] {
  const ids: number[] = [];
  for (const entry of raw.split(',').map((e) => e.trim())) {
    const id = Number(entry);
    if (!/^[1-9]\d*$/.test(entry) || !Number.isSafeInteger(id)) {
      throw new ConfigError(
        'GITHUB_APP_INSTALLATION_IDS',
        `must be a comma-separated list of installation ids like 12345,67890 (bad entry "${entry.slice(0, 40)}")`,
      );
    }
    if (ids.includes(id)) {
      throw new ConfigError('GITHUB_APP_INSTALLATION_IDS', `lists installation ${id} twice`);
    }
    ids.push(id);
  }
  return ids;
}

/** Reads and checks the App's key; the messages say what is wrong, never what the key holds. */
function parsePrivateKey(variable: string, raw: string): string {
  // Keys kept in .env files often have their line breaks escaped as \n.
  const pem = raw.replace(/\\n/g, '\n').trim();
  if (/^-----BEGIN [A-Z ]*PUBLIC KEY-----/.test(pem)) {
    throw new ConfigError(
      variable,
      'is a public key: the App signs its JWTs with its private key (the .pem GitHub generated)',
    );
  }
  if (!/^-----BEGIN [A-Z ]*PRIVATE KEY-----/.test(pem)) {
    throw new ConfigError(
      variable,
      'is not a PEM private key (expected the .pem file GitHub issues for the App, starting "-----BEGIN RSA PRIVATE KEY-----")',
    );
  }
  let key: ReturnType<typeof createPrivateKey>;
  try {
    key = createPrivateKey({ key: pem, format: 'pem' });
  } catch {
    throw new ConfigError(
      variable,
      'is not a readable PEM private key (truncated, damaged, or protected by a passphrase)',
    );
  }
  if (key.asymmetricKeyType !== 'rsa') {
    throw new ConfigError(
      variable,
      `must be an RSA private key, as GitHub issues for Apps (got ${key.asymmetricKeyType ?? 'another kind'})`,
    );
  }
  // A key can parse and still be damaged (a changed byte in the middle): then what it signs
  // does not verify, and every JWT would be a 401. One signature now says so at start.
  let consistent = false;
  try {
    const probe = Buffer.from('github-push-ingestor key check');
    consistent = verify('sha256', probe, createPublicKey(key), sign('sha256', probe, key));
  } catch {
    consistent = false;
  }
  if (!consistent) {
    throw new ConfigError(
      variable,
      'is not a readable PEM private key (it parses, but its parts do not fit together: damaged)',
    );
  }
  return key.export({ type: 'pkcs8', format: 'pem' }).toString();
}

function readKeyFile(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch (err) {
    const code = (err as { code?: string }).code ?? 'unreadable';
    throw new ConfigError('GITHUB_APP_PRIVATE_KEY_FILE', `cannot be read (${code}: ${path})`);
  }
}

function parseApp(env: CredentialEnv): AppCredentials | null {
  const { GITHUB_APP_ID: id, GITHUB_APP_INSTALLATION_IDS: installations } = env;
  const inline = env.GITHUB_APP_PRIVATE_KEY;
  const file = env.GITHUB_APP_PRIVATE_KEY_FILE;
  if (id === undefined) {
    const stray =
      inline !== undefined
        ? 'GITHUB_APP_PRIVATE_KEY'
        : file !== undefined
          ? 'GITHUB_APP_PRIVATE_KEY_FILE'
          : installations !== undefined
            ? 'GITHUB_APP_INSTALLATION_IDS'
            : null;
    if (stray) throw new ConfigError('GITHUB_APP_ID', `must be set when ${stray} is set`);
    return null;
  }
  const appId = parseAppId(id);
  if (inline !== undefined && file !== undefined) {
    throw new ConfigError(
      'GITHUB_APP_PRIVATE_KEY_FILE',
      'cannot be set together with GITHUB_APP_PRIVATE_KEY (set one)',
    );
  }
  if (inline === undefined && file === undefined) {
    throw new ConfigError(
      'GITHUB_APP_PRIVATE_KEY',
      'must be set (or GITHUB_APP_PRIVATE_KEY_FILE) when GITHUB_APP_ID is set',
    );
  }
  const privateKey =
    inline !== undefined
      ? parsePrivateKey('GITHUB_APP_PRIVATE_KEY', inline)
      : parsePrivateKey('GITHUB_APP_PRIVATE_KEY_FILE', readKeyFile(file!));
  if (installations === undefined) {
    throw new ConfigError(
      'GITHUB_APP_INSTALLATION_IDS',
      'must list the installations to use when GITHUB_APP_ID is set (e.g. 12345,67890)',
    );
  }
  return { id: appId, privateKey, installationIds: parseInstallationIds(installations) };
}

export function parseCredentials(env: CredentialEnv): CredentialsConfig {
  const tokens = env.GITHUB_TOKEN === undefined ? [] : [env.GITHUB_TOKEN];
  if (env.GITHUB_TOKENS !== undefined)
    tokens.push(...parseTokenList(env.GITHUB_TOKENS, env.GITHUB_TOKEN));
  return { tokens, app: parseApp(env) };
}
