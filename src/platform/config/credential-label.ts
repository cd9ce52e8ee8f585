import { createHash } from 'node:crypto';

/**
 * The name a credential goes by in the ledger, the rate-limit table, lock keys, logs,
 * /status and metrics: 'anonymous', 'fixture', 'token:' + the first 8 hex of
 * sha256(token), or 'installation:' + a GitHub App installation id. Never the token
 * itself: the fingerprint tells two tokens apart without revealing either, and an
 * installation's tokens change every hour while its label (and budget) stays.
 */
export function tokenLabel(token: string): string {
  return `token:${createHash('sha256').update(token).digest('hex').slice(0, 8)}`;
}

export function installationLabel(installationId: number): string {
  return `installation:${installationId}`;
}

/** The label of a single-credential process: fixture, anonymous, or its one token. */
export function credentialOf(mode: 'live' | 'fixture', token: string | undefined): string {
  if (mode === 'fixture') return 'fixture';
  if (!token) return 'anonymous';
  return tokenLabel(token);
}

/**
 * GitHub's hourly quota before we have seen an x-ratelimit-limit header: 5,000 for a token
 * and for an App installation (an installation may get up to 12,500, or 15,000 on
 * Enterprise Cloud; the first answer tells), 60 per IP without one.
 */
export function defaultQuota(credential: string): number {
  return credential.startsWith('token:') || credential.startsWith('installation:') ? 5000 : 60;
}

/** What an operator should check when GitHub rejects this credential (401). */
export function credentialHint(credential: string | undefined): string {
  if (credential?.startsWith('installation:')) {
    return `GitHub App ${credential} (GITHUB_APP_ID, the App's private key, GITHUB_APP_INSTALLATION_IDS)`;
  }
  if (credential?.startsWith('token:')) return `GITHUB_TOKEN / GITHUB_TOKENS (${credential})`;
  return 'GITHUB_TOKEN';
}
