import type { Config } from '../platform/config/config.ts';
import {
  defaultQuota,
  installationLabel,
  tokenLabel,
} from '../platform/config/credential-label.ts';
import type { Logger } from '../platform/log.ts';
import { type InstallationTokens, installationTokens } from './installation-tokens.ts';

/**
 * The credentials this process may spend (ADR 0050): in live mode every token
 * of GITHUB_TOKEN/GITHUB_TOKENS and every installation of GITHUB_APP_INSTALLATION_IDS, or
 * `anonymous` when there are none; in fixture mode only `fixture`. Each has its own
 * label, budget, ledger rows and request gate; the secrets stay in this module's closures.
 */

export type CredentialKind = 'anonymous' | 'fixture' | 'token' | 'installation';

export interface Authorization {
  /** The Authorization header to send, or null (anonymous, fixture). */
  header: string | null;
  /** When this installation token was issued (ms since epoch); null for other kinds. */
  issuedAt: number | null;
}

export interface Credential {
  readonly label: string;
  readonly kind: CredentialKind;
  /** The quota assumed until GitHub's first x-ratelimit-limit for it. */
  readonly defaultQuota: number;
  /** The header for the next request; an installation asks for a new token when due. */
  authorize(): Promise<Authorization>;
  /** GitHub rejected the current installation token: the next authorize() asks for a new one. */
  invalidate(): void;
}

const NONE: Authorization = { header: null, issuedAt: null };

function plain(label: string, kind: CredentialKind, header: string | null): Credential {
  const authorization = { header, issuedAt: null };
  return {
    label,
    kind,
    defaultQuota: defaultQuota(label),
    authorize: async () => (header ? authorization : NONE),
    invalidate() {},
  };
}

function installation(id: number, tokens: InstallationTokens): Credential {
  const label = installationLabel(id);
  return {
    label,
    kind: 'installation',
    defaultQuota: defaultQuota(label),
    async authorize() {
      const t = await tokens.get(id);
      return { header: `token ${t.token}`, issuedAt: t.issuedAt };
    },
    invalidate: () => tokens.invalidate(id),
  };
}

/**
 * The labels of the pool buildCredentials builds, in its order, without building it: what
 * a process plans its concurrency and its pool from before its client exists (createApp).
 */
export function credentialLabels(config: Config): string[] {
  const { mode, tokens, app } = config.github;
  if (mode === 'fixture') return ['fixture'];
  const labels = tokens.map(tokenLabel);
  if (app) labels.push(...app.installationIds.map(installationLabel));
  return labels.length > 0 ? labels : ['anonymous'];
}

export function buildCredentials(
  config: Config,
  o: {
    logger: Logger;
    fetch: typeof fetch;
    /** The request gate of a name (a credential's label, or `app:<id>` for token requests). */
    gate: (name: string) => { run<T>(fn: () => Promise<T>): Promise<T> };
  },
): Credential[] {
  const { mode, tokens, app } = config.github;
  if (mode === 'fixture') return [plain('fixture', 'fixture', null)];
  const pool = tokens.map((t) => plain(tokenLabel(t), 'token', `token ${t}`));
  if (app) {
    const minted = installationTokens({
      app,
      apiUrl: config.github.apiUrl,
      userAgent: config.github.userAgent,
      fetch: o.fetch,
      logger: o.logger,
      serially: (fn) => o.gate(`app:${app.id}`).run(fn),
    });
    pool.push(...app.installationIds.map((id) => installation(id, minted)));
  }
  return pool.length > 0 ? pool : [plain('anonymous', 'anonymous', null)];
}
