import { z } from 'zod';
import { ConfigError } from '../errors.ts';
import { quoted } from '../quote.ts';
import { hasUserinfo, withoutUserinfo } from '../redact.ts';
import { type AppCredentials, parseCredentials } from './credential-config.ts';
import { type HistoryConfig, parseHistory } from './history-config.ts';
import { parseSourcesList } from './source-spec.ts';

/**
 * Every environment variable the project reads, parsed once into a frozen Config.
 * A bad value stops the process with one line naming the variable (see bin/_main.ts).
 * The keys of ENV_VARS are the public list: docs/configuration.md, docker-compose and the compose test
 * check against it.
 */

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
/** auto: readable lines on a terminal, JSON otherwise; json / text force one. */
const LOG_FORMATS = ['auto', 'json', 'text'] as const;

/** "90", "90s", "15m", "12h", "7d" → seconds. */
export function parseDurationSeconds(raw: string): number | undefined {
  // At most 12 digits: far above any bound below, and exact as a double once multiplied.
  const m = /^\s*(\d{1,12})\s*([smhd]?)\s*$/.exec(raw);
  if (!m) return undefined;
  const n = Number(m[1]);
  const unit = m[2] || 's';
  const factor = unit === 's' ? 1 : unit === 'm' ? 60 : unit === 'h' ? 3600 : 86400;
  return n * factor;
}

/**
 * Every duration has an upper bound that Postgres intervals and Node timers hold with room
 * to spare (a bound in days: `max` seconds, said as `maxText`).
 */
const duration = (what: string, max: number, maxText: string) =>
  z.string().transform((raw, ctx) => {
    const s = parseDurationSeconds(raw);
    if (s === undefined || s <= 0 || s > max) {
      ctx.addIssue({
        code: 'custom',
        message: `must be a positive ${what} up to ${maxText}, like 90s, 15m, 12h or 7d (got "${raw.slice(0, 40)}")`,
      });
      return z.NEVER;
    }
    return s;
  });

const positiveInt = (max = Number.MAX_SAFE_INTEGER) =>
  z.string().transform((raw, ctx) => {
    const n = Number(raw);
    if (!/^\s*\d+\s*$/.test(raw) || !Number.isSafeInteger(n) || n < 1 || n > max) {
      ctx.addIssue({
        code: 'custom',
        message: `must be an integer from 1 to ${max} (got "${raw.slice(0, 40)}")`,
      });
      return z.NEVER;
    }
    return n;
  });

/** 0 (off) or a positive integer up to `max`. */
const countOrOff = (max: number) =>
  z.string().transform((raw, ctx) => {
    const n = Number(raw);
    if (!/^\s*\d+\s*$/.test(raw) || !Number.isSafeInteger(n) || n > max) {
      ctx.addIssue({
        code: 'custom',
        message: `must be an integer from 0 (off) to ${max} (got "${raw.slice(0, 40)}")`,
      });
      return z.NEVER;
    }
    return n;
  });

/**
 * A URL with a userinfo (`user:password@`), as the URL standard serializes it: a raw quote,
 * space or backslash in the password percent-encoded, so src/platform/redact.ts finds all of it
 * wherever the URL is shown. Other URLs are kept as written.
 */
function serialized(raw: string, u: URL): string {
  return u.username !== '' || u.password !== '' || hasUserinfo(raw) ? u.href : raw;
}

/** An outside URL in a configuration error: quoted, bounded, and without its userinfo. */
function shownUrl(raw: string): string {
  return quoted(withoutUserinfo(raw));
}

const url = z.string().transform((raw, ctx) => {
  try {
    const u = new URL(raw);
    if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new Error('protocol');
    return serialized(raw, u).replace(/\/+$/, '');
  } catch {
    ctx.addIssue({ code: 'custom', message: `must be an http(s) URL (got ${shownUrl(raw)})` });
    return z.NEVER;
  }
});

/**
 * Where GH Archive hour files come from: a comma-separated list of mirrors (docs/mirrors.md),
 * each the archive, a mirror over HTTP, or a directory. The first is bin/backfill HOUR's
 * default; gap fills read every one. A bad entry is named, so the operator sees which.
 */
const archiveUrls = z.string().transform((raw, ctx) => {
  const entries = raw.split(',').map((e) => e.trim());
  const urls: string[] = [];
  for (const entry of entries) {
    let u: URL | null = null;
    try {
      u = new URL(entry);
    } catch {}
    if (!u || !['http:', 'https:', 'file:'].includes(u.protocol)) {
      ctx.addIssue({
        code: 'custom',
        message: `each mirror must be an http(s) URL or a file:// directory (got ${shownUrl(entry)})`,
      });
      return z.NEVER;
    }
    const normal = serialized(entry, u).replace(/\/+$/, '');
    // A mirror is known by its redacted form (the checkpoints' key): one entry per mirror.
    if (!urls.some((m) => withoutUserinfo(m) === withoutUserinfo(normal))) urls.push(normal);
  }
  return urls;
});

/**
 * Parsed as a URL now, so a bad one stops the process at start naming the variable
 * instead of failing later inside the driver. Never echoes the value (it may hold a password).
 */
const postgresUrl = z.string().transform((raw, ctx) => {
  const fail = (why: string) => {
    ctx.addIssue({
      code: 'custom',
      message: `must be a postgres:// or postgresql:// URL (${why})`,
    });
    return z.NEVER;
  };
  if (!/^postgres(ql)?:\/\//.test(raw)) return fail('other scheme');
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    return fail(
      'not a valid URL: check the host, the port is a number from 1 to 65535, and special characters in the password are percent-encoded',
    );
  }
  if (u.port !== '' && Number(u.port) < 1) return fail('port must be from 1 to 65535');
  try {
    decodeURIComponent(u.username);
    decodeURIComponent(u.password);
    decodeURIComponent(u.pathname);
  } catch {
    return fail('bad percent-encoding in the user, password or database name');
  }
  return raw;
});

const sqlIdentifier = z
  .string()
  .regex(/^[a-z_][a-z0-9_]{0,62}$/, 'must be a lower-case SQL identifier like pgboss');

const share = z.string().transform((raw, ctx) => {
  const n = Number(raw);
  if (!Number.isFinite(n) || n <= 0 || n >= 1) {
    ctx.addIssue({
      code: 'custom',
      message: `must be a number between 0 and 1 exclusive (got "${raw}")`,
    });
    return z.NEVER;
  }
  return n;
});

/** A fraction from 0 to 1 inclusive (COMMITS_SHARE: both ends mean something). */
const fraction = z.string().transform((raw, ctx) => {
  const n = raw.trim() === '' ? Number.NaN : Number(raw);
  if (!Number.isFinite(n) || n < 0 || n > 1) {
    ctx.addIssue({ code: 'custom', message: `must be a number from 0 to 1 (got "${raw}")` });
    return z.NEVER;
  }
  return n;
});

export const COMMIT_EMAIL_MODES = ['gharchive', 'hash', 'keep', 'drop'] as const;
/**
 * COMMIT_EMAILS of a database set up without the variable. A database recorded already
 * keeps its value (src/platform/config/stored-settings.ts).
 */
export const DEFAULT_COMMIT_EMAILS: CommitEmailMode = 'gharchive';
export type CommitEmailMode = (typeof COMMIT_EMAIL_MODES)[number];

export const envSchema = z.object({
  DATABASE_URL: postgresUrl.optional(),
  GITHUB_MODE: z.enum(['live', 'fixture']).default('live'),
  GITHUB_API_URL: url.default('https://api.github.com'),
  GITHUB_TOKEN: z.string().min(1, 'must not be empty when set').optional(),
  // The credential pool: checked together in src/platform/config/credential-config.ts.
  GITHUB_TOKENS: z.string().optional(),
  GITHUB_APP_ID: z.string().optional(),
  GITHUB_APP_PRIVATE_KEY: z.string().optional(),
  GITHUB_APP_PRIVATE_KEY_FILE: z.string().optional(),
  GITHUB_APP_INSTALLATION_IDS: z.string().optional(),
  GITHUB_FIXTURES_DIR: z.string().default('test/fixtures/github'),
  TICK_SECONDS: positiveInt(86400).default(60),
  PGBOSS_SCHEMA: sqlIdentifier.default('pgboss'),
  LOG_LEVEL: z.enum(LOG_LEVELS).default('info'),
  HTTP_HOST: z.string().min(1).default('127.0.0.1'),
  HTTP_PORT: z
    .string()
    .transform((raw, ctx) => {
      const n = Number(raw);
      if (!/^\d+$/.test(raw) || n > 65535) {
        ctx.addIssue({ code: 'custom', message: `must be a port from 0 to 65535 (got "${raw}")` });
        return z.NEVER;
      }
      return n;
    })
    .default(3000),
  WEBHOOK_SECRET: z.string().min(1, 'must not be empty when set').optional(),
  SOURCES: z.string().default('public'),
  ENRICH_TTL: duration('duration', 365 * 86400, '365d').default(7 * 86400),
  ENRICH_MAX_ATTEMPTS: positiveInt(100).default(5),
  ENRICH_SHARE: share.default(2 / 3),
  ENRICH_LEASE_SECONDS: positiveInt(3600).default(60),
  GATE_WAIT_SECONDS: positiveInt(600).default(10),
  GITHUB_ENDPOINT_RATE_PER_MINUTE: countOrOff(1_000_000).default(900),
  // GraphQL points a minute per credential: GitHub allows 2,000; 0 is no pacing.
  GRAPHQL_POINTS_PER_MINUTE: countOrOff(2_000).default(1800),
  // The most database connections one process's app pool may open: unset, the
  // pool follows the credentials (src/budget/concurrency.ts) within what max_connections leaves.
  DATABASE_POOL_MAX: positiveInt(10_000).optional(),
  RETENTION_DAYS: positiveInt(3650).default(30),
  DATA_DIR: z.string().default('.data'),
  LOG_FORMAT: z.enum(LOG_FORMATS).default('auto'),
  EMBEDDED_POSTGRES_PORT: z
    .string()
    .transform((raw, ctx) => {
      const n = Number(raw);
      if (!/^\d+$/.test(raw) || n < 1 || n > 65535) {
        ctx.addIssue({ code: 'custom', message: `must be a port from 1 to 65535 (got "${raw}")` });
        return z.NEVER;
      }
      return n;
    })
    .default(54329),
  GHARCHIVE_URL: archiveUrls.default(['https://data.gharchive.org']),
  ARCHIVE_MIN_RATE: positiveInt(1_000_000_000).default(16_384),
  ARCHIVE_RATE_WINDOW: duration('duration', 3600, '1h').default(60),
  ARCHIVE_DEADLINE: duration('duration', 86400, '1d').default(3600),
  // bin/web's GET /archive/: this store's hours as GH Archive files, for mirrors.
  ARCHIVE_SERVE: z.enum(['on', 'off']).default('on'),
  // Commits: what a commit's e-mail addresses become, and how many commits a
  // fetched push may keep (one compare answer holds at most 250).
  // Unset: the database's recorded value, or DEFAULT_COMMIT_EMAILS for a new one.
  COMMIT_EMAILS: z.enum(COMMIT_EMAIL_MODES).optional(),
  COMMITS_MAX_PER_PUSH: positiveInt(10_000).default(250),
  // commits-fetch: commits' part of the background allowance while enrichment waits.
  COMMITS_SHARE: fraction.default(0.5),
  // Batched GraphQL (REST compare where GraphQL cannot prove a push), or REST only.
  COMMITS_TRANSPORT: z.enum(['graphql', 'rest']).default('graphql'),
  // History (docs/configuration.md#history_months): months of pushes kept in Postgres, and
  // where an older month must be exported, and verified, before it is dropped.
  HISTORY_MONTHS: positiveInt(1200).optional(),
  ARCHIVE_DIR: z.string().optional(),
  RETENTION_MIRROR: z.string().optional(),
});

/** Names of every variable the config knows (the docs drift test and the compose check use this). */
export const ENV_VARS = Object.keys(envSchema.shape) as (keyof typeof envSchema.shape)[];

export type Env = z.output<typeof envSchema>;

export interface Config {
  readonly databaseUrl: string | undefined;
  /** DATABASE_POOL_MAX: a cap on the app pool the in-flight plan sizes (undefined: none). */
  readonly databasePoolMax: number | undefined;
  readonly github: {
    readonly mode: 'live' | 'fixture';
    readonly apiUrl: string;
    readonly token: string | undefined;
    /** Every token of the pool: GITHUB_TOKEN, then GITHUB_TOKENS (each once). Never logged. */
    readonly tokens: readonly string[];
    /** The GitHub App whose installations join the pool (GITHUB_APP_*), or null. */
    readonly app: AppCredentials | null;
    readonly fixturesDir: string;
    readonly userAgent: string;
    readonly connectTimeoutMs: number;
    readonly responseTimeoutMs: number;
    readonly gateWaitSeconds: number;
    /** GitHub's secondary limit: requests a minute to one endpoint per credential (0: no pacing). */
    readonly endpointRatePerMinute: number;
    /** GraphQL points a minute per credential, paced (0: no pacing). */
    readonly graphqlPointsPerMinute: number;
  };
  readonly tickSeconds: number;
  readonly pgbossSchema: string;
  readonly logLevel: (typeof LOG_LEVELS)[number];
  readonly logFormat: (typeof LOG_FORMATS)[number];
  readonly http: { readonly host: string; readonly port: number };
  readonly webhookSecret: string | undefined;
  readonly sources: string;
  readonly enrichment: {
    readonly ttlSeconds: number;
    readonly maxAttempts: number;
    readonly share: number;
    readonly leaseSeconds: number;
  };
  readonly retentionDays: number;
  readonly dataDir: string;
  /** Where the embedded Postgres listens when this process starts it (DATABASE_URL unset). */
  readonly embeddedPort: number;
  /** GH Archive and its mirrors: where backfill reads `YYYY-MM-DD-H.json.gz` hour files. */
  readonly archive: {
    /** The first mirror: bin/backfill HOUR's default. */
    readonly url: string;
    /** Every mirror, in the order given (docs/mirrors.md). */
    readonly mirrors: readonly string[];
    /** bin/web serves GET /archive/ (ARCHIVE_SERVE). */
    readonly serve: boolean;
    /** Download bounds: below minBytesPerSecond over rateWindowMs, or past deadlineMs, a download is abandoned. */
    readonly download: {
      readonly minBytesPerSecond: number;
      readonly rateWindowMs: number;
      readonly deadlineMs: number;
    };
  };
  readonly commits: {
    /**
     * gharchive: GH Archive's SHA-1 of the local part, `@`, the domain; hash: 'sha256:<hex>'
     * of the trimmed lower-cased address; keep: as given; drop: NULL.
     */
    readonly emails: CommitEmailMode;
    /**
     * COMMIT_EMAILS was set in the environment. When it was not, a database that recorded a
     * value keeps it: the process takes the recorded value (adoptStoredSettings).
     */
    readonly emailsGiven: boolean;
    readonly maxPerPush: number;
    /** COMMITS_SHARE: ceil(background × share) is what commits take while enrichment waits. */
    readonly share: number;
    /** COMMITS_TRANSPORT: GraphQL batches (with a credential) or REST compare only. */
    readonly transport: 'graphql' | 'rest';
  };
  /** HISTORY_MONTHS, ARCHIVE_DIR, RETENTION_MIRROR (src/platform/config/history-config.ts). */
  readonly history: HistoryConfig;
}

function deepFreeze<T>(o: T): T {
  if (o && typeof o === 'object') {
    for (const v of Object.values(o)) deepFreeze(v);
    Object.freeze(o);
  }
  return o;
}

/** The least GRAPHQL_POINTS_PER_MINUTE whose `queries` 1-point slots fit in `leaseSeconds`. */
export function leastPointsPerMinute(leaseSeconds: number, queries = 1): number {
  return Math.floor((60 * queries) / leaseSeconds) + 1;
}

/**
 * GraphQL's pacing holds a 1-point query's slot for 60 s ÷ GRAPHQL_POINTS_PER_MINUTE; a slot
 * as long as ENRICH_LEASE_SECONDS lets the claims of a batch's pushes expire before its next
 * query may go (another fetcher takes them, and counts deaths nobody died). Refused.
 */
function checkGraphQLPacing(pointsPerMinute: number, leaseSeconds: number): void {
  if (pointsPerMinute === 0 || 60 / pointsPerMinute < leaseSeconds) return;
  const spacing = 60 / pointsPerMinute;
  throw new ConfigError(
    'GRAPHQL_POINTS_PER_MINUTE',
    `spaces GraphQL queries ${Number.isInteger(spacing) ? spacing : spacing.toFixed(1)} s apart a point (got "${pointsPerMinute}"), no less than ENRICH_LEASE_SECONDS (${leaseSeconds} s): a batch's claims would expire before its next query may go; set at least ${leastPointsPerMinute(leaseSeconds)}, or 0 for no pacing`,
  );
}

/**
 * Parses the environment. Empty strings count as unset, as a shell `FOO=` usually means.
 * Throws ConfigError naming the first bad variable.
 */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  // An empty GHARCHIVE_URL is refused rather than read as unset: the default is a public
  // archive on the internet, and an empty list is more likely a template's missing value
  // than a wish to read data.gharchive.org.
  if (env.GHARCHIVE_URL === '') {
    throw new ConfigError(
      'GHARCHIVE_URL',
      'must not be empty: unset it for https://data.gharchive.org, or list at least one mirror',
    );
  }
  const input: Record<string, string> = {};
  for (const key of ENV_VARS) {
    const v = env[key];
    if (v !== undefined && v !== '') input[key] = v;
  }
  const parsed = envSchema.safeParse(input);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const variable = String(issue.path[0] ?? 'environment');
    const message =
      issue.code === 'invalid_value'
        ? `must be one of ${(issue as { values: unknown[] }).values.join(', ')} (got "${input[variable]}")`
        : issue.message;
    throw new ConfigError(variable, message);
  }
  const e = parsed.data;
  // SOURCES is only used by bin/setup, but a bad list should stop any process at start.
  parseSourcesList(e.SOURCES);
  checkGraphQLPacing(e.GRAPHQL_POINTS_PER_MINUTE, e.ENRICH_LEASE_SECONDS);
  const credentials = parseCredentials(e);
  const history = parseHistory(
    e.HISTORY_MONTHS,
    e.ARCHIVE_DIR,
    e.RETENTION_MIRROR,
    e.GHARCHIVE_URL,
  );
  return deepFreeze({
    databaseUrl: e.DATABASE_URL,
    databasePoolMax: e.DATABASE_POOL_MAX,
    github: {
      mode: e.GITHUB_MODE,
      apiUrl: e.GITHUB_API_URL,
      token: e.GITHUB_TOKEN,
      tokens: credentials.tokens,
      app: credentials.app,
      fixturesDir: e.GITHUB_FIXTURES_DIR,
      userAgent: 'github-push-ingestor/0.1 (+https://github.com/github-push-ingestor)',
      connectTimeoutMs: 5_000,
      responseTimeoutMs: 15_000,
      gateWaitSeconds: e.GATE_WAIT_SECONDS,
      endpointRatePerMinute: e.GITHUB_ENDPOINT_RATE_PER_MINUTE,
      graphqlPointsPerMinute: e.GRAPHQL_POINTS_PER_MINUTE,
    },
    tickSeconds: e.TICK_SECONDS,
    pgbossSchema: e.PGBOSS_SCHEMA,
    logLevel: e.LOG_LEVEL,
    logFormat: e.LOG_FORMAT,
    http: { host: e.HTTP_HOST, port: e.HTTP_PORT },
    webhookSecret: e.WEBHOOK_SECRET,
    sources: e.SOURCES,
    enrichment: {
      ttlSeconds: e.ENRICH_TTL,
      maxAttempts: e.ENRICH_MAX_ATTEMPTS,
      share: e.ENRICH_SHARE,
      leaseSeconds: e.ENRICH_LEASE_SECONDS,
    },
    retentionDays: e.RETENTION_DAYS,
    dataDir: e.DATA_DIR,
    embeddedPort: e.EMBEDDED_POSTGRES_PORT,
    archive: {
      url: e.GHARCHIVE_URL[0]!,
      mirrors: e.GHARCHIVE_URL,
      serve: e.ARCHIVE_SERVE === 'on',
      download: {
        minBytesPerSecond: e.ARCHIVE_MIN_RATE,
        rateWindowMs: e.ARCHIVE_RATE_WINDOW * 1000,
        deadlineMs: e.ARCHIVE_DEADLINE * 1000,
      },
    },
    commits: {
      emails: e.COMMIT_EMAILS ?? DEFAULT_COMMIT_EMAILS,
      emailsGiven: e.COMMIT_EMAILS !== undefined,
      maxPerPush: e.COMMITS_MAX_PER_PUSH,
      share: e.COMMITS_SHARE,
      transport: e.COMMITS_TRANSPORT,
    },
    history,
  });
}
