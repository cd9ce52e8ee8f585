import { createHash } from 'node:crypto';

/**
 * The name a credential goes by in the ledger, the rate-limit table and lock keys:
 * 'anonymous', 'fixture', or 'token:' + the first 8 hex of sha256(token). Never the
 * token itself: the fingerprint tells two tokens apart without revealing either.
 */
export function credentialOf(mode: 'live' | 'fixture', token: string | undefined): string {
  if (mode === 'fixture') return 'fixture';
  if (!token) return 'anonymous';
  return `token:${createHash('sha256').update(token).digest('hex').slice(0, 8)}`;
}

/** GitHub's hourly quota before we have seen an x-ratelimit-limit header. */
export function defaultQuota(credential: string): number {
  return credential.startsWith('token:') ? 5000 : 60;
}
