import type { fakeApps } from './fake-github-app.ts';
import { tokenKey } from './fake-github-app.ts';
import { nextHour } from './fake-github-http.ts';
import type { BucketOf, RateLimitSetting } from './fake-github-types.ts';

/**
 * The fake GitHub's REST quota: one bucket per credential (anonymous: 60/h, a token:
 * 5000/h, a GitHub App installation: its own), reported as `x-ratelimit-*` with resource
 * `core`; and who a request is, from its Authorization header.
 */

export interface Bucket {
  limit: number;
  remaining: number;
  resetAt: Date;
}

export interface Identity {
  /** 'anonymous', 'token:<sha256 prefix>', 'installation:<id>', or 'invalid'. */
  credential: string;
  bucket: Bucket | null;
  rejected: boolean;
}

export function restQuota(o: {
  anonymousLimit: number;
  tokenLimit: number;
  apps: ReturnType<typeof fakeApps>;
}) {
  let buckets = new Map<string, Bucket>();
  let override: RateLimitSetting | null = null;
  const revoked = new Set<string>();

  /** The bucket of a credential: 'anonymous', a token's label, or 'installation:<id>'. */
  function bucketFor(key: string, ownLimit?: number): Bucket {
    let b = buckets.get(key);
    if (!b) {
      const limit =
        override?.limit ?? ownLimit ?? (key === 'anonymous' ? o.anonymousLimit : o.tokenLimit);
      b = {
        limit,
        remaining: override?.remaining ?? limit,
        resetAt: override?.resetAt ?? nextHour(),
      };
      buckets.set(key, b);
    }
    if (Date.now() >= b.resetAt.getTime()) {
      b.remaining = b.limit;
      b.resetAt = nextHour();
    }
    return b;
  }

  const keyOf = (b: BucketOf = {}) =>
    b.installation !== undefined
      ? `installation:${b.installation}`
      : b.token
        ? tokenKey(b.token)
        : 'anonymous';

  const ownLimit = (b: BucketOf = {}) =>
    b.installation !== undefined ? o.apps.limitOf(b.installation) : undefined;

  return {
    keyOf,
    /**
     * Who is asking: a token (its bucket), an installation token (the installation's
     * bucket, or a 401 when expired, revoked or unknown), or nobody.
     */
    identify(authorization: string | undefined): Identity {
      const token = authorization?.replace(/^(token|bearer)\s+/i, '');
      if (!token)
        return { credential: 'anonymous', bucket: bucketFor('anonymous'), rejected: false };
      const installation = o.apps.identify(token);
      if (installation === null) {
        if (revoked.has(token)) return { credential: 'invalid', bucket: null, rejected: true };
        const credential = tokenKey(token);
        return { credential, bucket: bucketFor(credential), rejected: false };
      }
      if (!installation.ok) return { credential: 'invalid', bucket: null, rejected: true };
      const credential = `installation:${installation.installationId}`;
      return { credential, bucket: bucketFor(credential, installation.limit), rejected: false };
    },
    headers: (b: Bucket): Record<string, string> => ({
      'x-ratelimit-limit': String(b.limit),
      'x-ratelimit-remaining': String(b.remaining),
      'x-ratelimit-reset': String(Math.floor(b.resetAt.getTime() / 1000)),
      'x-ratelimit-used': String(b.limit - b.remaining),
      'x-ratelimit-resource': 'core',
    }),
    setRateLimit(setting: RateLimitSetting, b: BucketOf = {}): void {
      const apply = (x: Bucket) => {
        if (setting.limit !== undefined) x.limit = setting.limit;
        if (setting.remaining !== undefined) x.remaining = setting.remaining;
        if (setting.resetAt !== undefined) x.resetAt = setting.resetAt;
      };
      if (b.token !== undefined || b.installation !== undefined) {
        apply(bucketFor(keyOf(b), ownLimit(b)));
        return;
      }
      override = { ...override, ...setting };
      for (const x of buckets.values()) apply(x);
    },
    rateLimit(b: BucketOf = {}) {
      const x = bucketFor(keyOf(b), ownLimit(b));
      return { ...x, used: x.limit - x.remaining };
    },
    revokeToken(token: string): void {
      revoked.add(token);
    },
    reset(): void {
      buckets = new Map();
      override = null;
      revoked.clear();
    },
  };
}
