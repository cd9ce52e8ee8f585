import { createHash, createPublicKey, type KeyObject, randomBytes, verify } from 'node:crypto';

/**
 * GitHub Apps for the fake GitHub: `POST /app/installations/{id}/access_tokens`
 * with the App's JWT as GitHub documents it — RS256, verified with the App's PUBLIC key,
 * `iss` = the App's id, `iat` not in the future (60 s of skew allowed), `exp` ahead and at
 * most 10 minutes after `iat` — answered with an installation token (`ghs_…`) and its
 * `expires_at`. Requests made with such a token are that installation's: its own rate
 * window (its bucket outlives its tokens), and a 401 once the token expired or was
 * revoked, or while it is younger than the App's replication lag.
 */

export interface FakeAppOptions {
  id: number;
  /** The App's public key (PEM or KeyObject): tokens are minted only for JWTs it verifies. */
  publicKey: KeyObject | string;
  /** Installation ids, or with their own hourly limit (default: the fake's token limit). */
  installations: (number | { id: number; limit?: number })[];
  /** Lifetime of a minted token (GitHub: 3600 s). */
  tokenTtlSeconds?: number;
  /** A token used within this many ms of being minted answers 401 (GitHub's replication lag). */
  replicationLagMs?: number;
}

export interface MintedToken {
  installationId: number;
  token: string;
  issuedAt: Date;
  expiresAt: Date;
  revoked: boolean;
}

interface App {
  id: number;
  publicKey: KeyObject;
  installations: Map<number, { limit?: number }>;
  tokenTtlSeconds: number;
  replicationLagMs: number;
}

export interface MintAnswer {
  status: number;
  body: unknown;
  /** The App the JWT named (`app:<id>`), for the request log and per-credential counts. */
  credential: string;
}

export type TokenIdentity =
  | { ok: true; installationId: number; limit: number | undefined }
  | { ok: false; message: string };

const b64url = (s: string) => Buffer.from(s, 'base64url');

/** GitHub's own format: seconds, no milliseconds ("2016-07-11T22:14:10Z"). */
function githubTime(d: Date): string {
  return `${d.toISOString().slice(0, 19)}Z`;
}

export const MINT_PATH = /^\/app\/installations\/(\d+)\/access_tokens$/;

export function fakeApps() {
  let apps = new Map<number, App>();
  let tokens = new Map<string, MintedToken>();
  const minted: MintedToken[] = [];
  const jwts: string[] = [];

  function appOf(installationId: number): App | undefined {
    for (const app of apps.values()) if (app.installations.has(installationId)) return app;
    return undefined;
  }

  /** The App a JWT names and proves, or GitHub's 401 message. */
  function verifyJwt(jwt: string): { app: App } | { error: string; iss: string } {
    const parts = jwt.split('.');
    let header: { alg?: string };
    let payload: { iss?: unknown; iat?: unknown; exp?: unknown };
    try {
      if (parts.length !== 3) throw new Error('parts');
      header = JSON.parse(b64url(parts[0]!).toString('utf8'));
      payload = JSON.parse(b64url(parts[1]!).toString('utf8'));
    } catch {
      return { error: 'A JSON web token could not be decoded', iss: 'unknown' };
    }
    const iss = String(payload.iss);
    const app = apps.get(Number(payload.iss));
    if (header.alg !== 'RS256' || !app) {
      return { error: 'A JSON web token could not be decoded', iss };
    }
    const signed = verify(
      'RSA-SHA256',
      Buffer.from(`${parts[0]}.${parts[1]}`),
      app.publicKey,
      b64url(parts[2]!),
    );
    if (!signed) return { error: 'A JSON web token could not be decoded', iss };
    const now = Date.now() / 1000;
    const { iat, exp } = payload as { iat: number; exp: number };
    if (!Number.isInteger(iat) || iat > now + 60) {
      return {
        error:
          "'Issued at' claim ('iat') must be an Integer representing the time that the assertion was issued",
        iss,
      };
    }
    if (!Number.isInteger(exp) || exp <= now) {
      return {
        error:
          "'Expiration time' claim ('exp') must be a numeric value representing the future time at which the assertion expires",
        iss,
      };
    }
    if (exp - iat > 600 + 60) {
      return { error: "'Expiration time' claim ('exp') is too far in the future", iss };
    }
    return { app };
  }

  return {
    minted,
    jwts,
    addApp(o: FakeAppOptions): void {
      apps.set(o.id, {
        id: o.id,
        publicKey: typeof o.publicKey === 'string' ? createPublicKey(o.publicKey) : o.publicKey,
        installations: new Map(
          o.installations.map((i) =>
            typeof i === 'number' ? [i, {}] : [i.id, { limit: i.limit }],
          ),
        ),
        tokenTtlSeconds: o.tokenTtlSeconds ?? 3600,
        replicationLagMs: o.replicationLagMs ?? 0,
      });
    },
    /** The installation's own hourly limit, if it was given one. */
    limitOf(installationId: number): number | undefined {
      return appOf(installationId)?.installations.get(installationId)?.limit;
    },
    removeInstallation(installationId: number): void {
      appOf(installationId)?.installations.delete(installationId);
    },
    revokeTokens(installationId: number): void {
      for (const t of tokens.values()) if (t.installationId === installationId) t.revoked = true;
    },
    /** POST /app/installations/{id}/access_tokens with `authorization: Bearer <jwt>`. */
    mint(authorization: string | undefined, installationId: number): MintAnswer {
      const jwt = /^bearer\s+(.+)$/i.exec(authorization ?? '')?.[1];
      if (!jwt) {
        return {
          status: 401,
          body: { message: 'A JSON web token could not be decoded' },
          credential: 'app:unknown',
        };
      }
      jwts.push(jwt);
      const checked = verifyJwt(jwt);
      if ('error' in checked) {
        return { status: 401, body: { message: checked.error }, credential: `app:${checked.iss}` };
      }
      const { app } = checked;
      const credential = `app:${app.id}`;
      if (!app.installations.has(installationId)) {
        return { status: 404, body: { message: 'Not Found' }, credential };
      }
      const issuedAt = new Date();
      const t: MintedToken = {
        installationId,
        token: `ghs_${randomBytes(18).toString('hex')}`,
        issuedAt,
        expiresAt: new Date(issuedAt.getTime() + app.tokenTtlSeconds * 1000),
        revoked: false,
      };
      tokens.set(t.token, t);
      minted.push(t);
      return {
        status: 201,
        body: {
          token: t.token,
          expires_at: githubTime(t.expiresAt),
          permissions: { metadata: 'read' },
          repository_selection: 'all',
        },
        credential,
      };
    },
    /** Whose is this token: an installation's (ghs_…), or null for any other token. */
    identify(token: string): TokenIdentity | null {
      if (!token.startsWith('ghs_')) return null;
      const t = tokens.get(token);
      const app = t ? appOf(t.installationId) : undefined;
      const now = Date.now();
      if (
        !t ||
        !app ||
        t.revoked ||
        now >= t.expiresAt.getTime() ||
        now < t.issuedAt.getTime() + app.replicationLagMs
      ) {
        return { ok: false, message: 'Bad credentials' };
      }
      return {
        ok: true,
        installationId: t.installationId,
        limit: app.installations.get(t.installationId)?.limit,
      };
    },
    reset(): void {
      apps = new Map();
      tokens = new Map();
      minted.length = 0;
      jwts.length = 0;
    },
  };
}

/** The fake's name for a token's bucket: the client's label (`token:` + sha256 prefix). */
export function tokenKey(token: string): string {
  return `token:${createHash('sha256').update(token).digest('hex').slice(0, 8)}`;
}
