import { generateKeyPairSync, sign } from 'node:crypto';

/**
 * A GitHub App's key pair made for a test (node:crypto): the private key as GitHub issues
 * it (PKCS#1 PEM) for GITHUB_APP_PRIVATE_KEY, the public key for the fake GitHub, which
 * verifies the App's JWTs with it.
 */
export interface AppKeys {
  privateKey: string;
  publicKey: string;
}

export function appKeys(): AppKeys {
  return generateKeyPairSync('rsa', {
    modulusLength: 2048,
    privateKeyEncoding: { type: 'pkcs1', format: 'pem' },
    publicKeyEncoding: { type: 'spki', format: 'pem' },
  });
}

/** A JWT as an App signs it (RS256), with claims the test chooses. */
export function appJwt(
  privateKey: string,
  claims: { iss: number | string; iat?: number; exp?: number },
  alg = 'RS256',
): string {
  const now = Math.floor(Date.now() / 1000);
  const enc = (o: unknown) => Buffer.from(JSON.stringify(o)).toString('base64url');
  const body = `${enc({ alg, typ: 'JWT' })}.${enc({ iat: now - 30, exp: now + 540, ...claims })}`;
  return `${body}.${sign('RSA-SHA256', Buffer.from(body), privateKey).toString('base64url')}`;
}
