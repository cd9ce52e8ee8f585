import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ENV_VARS, loadConfig, parseDurationSeconds } from '../../src/platform/config/config.ts';
import { parseSourcesList } from '../../src/platform/config/source-spec.ts';
import { ConfigError } from '../../src/platform/errors.ts';
import { configError } from '../support/config-error.ts';

// Every variable with a value that must be refused, and what the message must say.
const BAD_VALUES: [variable: string, value: string, says: RegExp][] = [
  ['DATABASE_URL', 'mysql://localhost/db', /postgres:\/\//],
  // Parsed at start: a port that is not a number used to reach the driver and exit 1.
  ['DATABASE_URL', 'postgres://u@localhost:abc/db', /not a valid URL.*port/],
  ['DATABASE_URL', 'postgres://u@localhost:70000/db', /not a valid URL/],
  ['DATABASE_URL', 'postgres://u@localhost:0/db', /port must be from 1 to 65535/],
  ['DATABASE_URL', 'postgres://u:p%zz@localhost/db', /percent-encoding/],
  ['GITHUB_MODE', 'prod', /live, fixture.*"prod"/],
  ['GITHUB_API_URL', 'not a url', /http\(s\) URL/],
  ['GITHUB_API_URL', 'ftp://example.com', /http\(s\) URL/],
  ['TICK_SECONDS', 'soon', /integer from 1 to 86400.*"soon"/],
  ['TICK_SECONDS', '0', /integer from 1/],
  ['TICK_SECONDS', '86401', /to 86400/],
  ['TICK_SECONDS', '1.5', /integer/],
  ['PGBOSS_SCHEMA', 'PgBoss', /SQL identifier/],
  ['PGBOSS_SCHEMA', 'boss; drop table x', /SQL identifier/],
  ['LOG_LEVEL', 'verbose', /one of fatal, error, warn, info, debug, trace, silent/],
  ['HTTP_PORT', '70000', /port from 0 to 65535/],
  ['HTTP_PORT', 'http', /port/],
  ['ENRICH_TTL', '7 days', /duration up to 365d, like 90s/],
  ['ENRICH_TTL', '0', /positive duration/],
  // Bounded: a TTL Postgres cannot add to a timestamp used to be accepted, then every
  // enrichment failed in the database.
  ['ENRICH_TTL', '99999999999999999999d', /up to 365d/],
  ['ENRICH_TTL', '366d', /up to 365d.*\(got "366d"\)/],
  ['ENRICH_MAX_ATTEMPTS', '0', /integer from 1 to 100/],
  ['ENRICH_MAX_ATTEMPTS', '101', /integer from 1 to 100/],
  ['ENRICH_SHARE', '1', /between 0 and 1/],
  ['ENRICH_SHARE', '0', /between 0 and 1/],
  ['ENRICH_SHARE', 'half', /between 0 and 1/],
  ['ENRICH_LEASE_SECONDS', '3601', /integer from 1 to 3600/],
  ['GATE_WAIT_SECONDS', '601', /integer from 1 to 600/],
  ['GITHUB_ENDPOINT_RATE_PER_MINUTE', '-1', /integer from 0 \(off\) to 1000000/],
  ['GITHUB_ENDPOINT_RATE_PER_MINUTE', '15.5', /integer from 0 \(off\)/],
  ['GRAPHQL_POINTS_PER_MINUTE', '2001', /integer from 0 \(off\) to 2000/],
  ['GRAPHQL_POINTS_PER_MINUTE', 'fast', /integer from 0 \(off\) to 2000/],
  // A 1-point query's pacing slot no shorter than the claims' lease: the batch outlives them.
  [
    'GRAPHQL_POINTS_PER_MINUTE',
    '1',
    /60 s apart a point \(got "1"\), no less than ENRICH_LEASE_SECONDS \(60 s\).*at least 2, or 0/,
  ],
  ['DATABASE_POOL_MAX', '0', /integer from 1 to 10000/],
  ['DATABASE_POOL_MAX', 'lots', /integer from 1 to 10000/],
  ['RETENTION_DAYS', '-1', /integer from 1 to 3650/],
  ['SOURCES', 'public,planet:mars', /bad entry "planet:mars": unknown source kind/],
  ['LOG_FORMAT', 'pretty', /one of auto, json, text.*"pretty"/],
  ['EMBEDDED_POSTGRES_PORT', '0', /port from 1 to 65535/],
  ['EMBEDDED_POSTGRES_PORT', '70000', /port from 1 to 65535/],
  ['GHARCHIVE_URL', 'data.gharchive.org', /http\(s\) URL or a file:\/\/ directory/],
  ['GHARCHIVE_URL', 's3://bucket/gharchive', /http\(s\) URL or a file:\/\/ directory/],
  // Empty is refused, not unset: unset means the public GH Archive.
  ['GHARCHIVE_URL', '', /must not be empty: unset it for https:\/\/data\.gharchive\.org/],
  ['ARCHIVE_MIN_RATE', '16k', /integer from 1 to/],
  ['ARCHIVE_RATE_WINDOW', '2h', /duration up to 1h/],
  ['ARCHIVE_DEADLINE', '0', /duration up to 1d/],
  ['ARCHIVE_SERVE', 'yes', /one of on, off.*"yes"/],
  ['COMMIT_EMAILS', 'clear', /one of gharchive, hash, keep, drop.*"clear"/],
  ['COMMITS_MAX_PER_PUSH', '0', /integer from 1 to 10000/],
  ['COMMITS_MAX_PER_PUSH', '10001', /integer from 1 to 10000/],
  ['COMMITS_MAX_PER_PUSH', '-1', /integer from 1 to 10000/],
  ['COMMITS_SHARE', '1.5', /number from 0 to 1.*"1.5"/],
  ['COMMITS_SHARE', '-0.1', /number from 0 to 1/],
  ['COMMITS_SHARE', 'half', /number from 0 to 1/],
  ['COMMITS_TRANSPORT', 'soap', /one of graphql, rest.*"soap"/],
  ['HISTORY_MONTHS', '0', /integer from 1 to 1200/],
  ['HISTORY_MONTHS', 'twelve', /integer from 1 to 1200/],
  ['HISTORY_MONTHS', '1201', /integer from 1 to 1200/],
  // Nowhere to verify a month in: nothing could ever be dropped.
  ['HISTORY_MONTHS', '12', /needs ARCHIVE_DIR or RETENTION_MIRROR/],
  ['RETENTION_MIRROR', 'https://elsewhere.example', /one of the mirrors in GHARCHIVE_URL/],
];

// Free-form variables: any non-empty string is a valid value (an empty one means unset).
const FREE_FORM = [
  'GITHUB_TOKEN',
  'GITHUB_FIXTURES_DIR',
  'HTTP_HOST',
  'WEBHOOK_SECRET',
  'DATA_DIR',
  'ARCHIVE_DIR',
];

// The credential pool's variables: their values and combinations are checked in
// config-credentials.test.ts.
const CREDENTIAL_VARS = [
  'GITHUB_TOKENS',
  'GITHUB_APP_ID',
  'GITHUB_APP_PRIVATE_KEY',
  'GITHUB_APP_PRIVATE_KEY_FILE',
  'GITHUB_APP_INSTALLATION_IDS',
];

describe('config: bad values stop the process naming the variable', () => {
  it.each(BAD_VALUES)('%s=%s', (variable, value, says) => {
    const err = configError({ [variable]: value });
    expect(err.variable).toBe(variable);
    expect(err.code).toBe('CONFIG_INVALID');
    expect(err.message.startsWith(`${variable} `)).toBe(true);
    expect(err.message).toMatch(says);
  });

  it('covers every variable the config knows', () => {
    const covered = new Set([...BAD_VALUES.map(([v]) => v), ...FREE_FORM, ...CREDENTIAL_VARS]);
    expect(ENV_VARS.filter((v) => !covered.has(v))).toEqual([]);
  });

  it('names the bad variable even when others are fine', () => {
    const err = configError({ GITHUB_MODE: 'fixture', TICK_SECONDS: '30', LOG_LEVEL: 'loud' });
    expect(err.variable).toBe('LOG_LEVEL');
  });
});

describe('config: defaults and parsing', () => {
  it('has the documented defaults when nothing is set', () => {
    const c = loadConfig({});
    expect(c.databaseUrl).toBeUndefined();
    expect(c.github.mode).toBe('live');
    expect(c.github.apiUrl).toBe('https://api.github.com');
    expect(c.github.token).toBeUndefined();
    expect(c.github.fixturesDir).toBe('test/fixtures/github');
    expect(c.github.gateWaitSeconds).toBe(10);
    expect(c.github.endpointRatePerMinute).toBe(900);
    expect(loadConfig({ GITHUB_ENDPOINT_RATE_PER_MINUTE: '0' }).github.endpointRatePerMinute).toBe(
      0,
    );
    expect(c.github.graphqlPointsPerMinute).toBe(1800);
    expect(loadConfig({ GRAPHQL_POINTS_PER_MINUTE: '0' }).github.graphqlPointsPerMinute).toBe(0);
    expect(c.databasePoolMax).toBeUndefined();
    expect(loadConfig({ DATABASE_POOL_MAX: '40' }).databasePoolMax).toBe(40);
    expect(c.tickSeconds).toBe(60);
    expect(c.pgbossSchema).toBe('pgboss');
    expect(c.logLevel).toBe('info');
    expect(c.http).toEqual({ host: '127.0.0.1', port: 3000 });
    expect(c.webhookSecret).toBeUndefined();
    expect(c.sources).toBe('public');
    expect(c.enrichment).toEqual({
      ttlSeconds: 7 * 86400,
      maxAttempts: 5,
      share: 2 / 3,
      leaseSeconds: 60,
    });
    expect(c.retentionDays).toBe(30);
    expect(c.dataDir).toBe('.data');
    expect(c.logFormat).toBe('auto');
    expect(c.embeddedPort).toBe(54329);
    expect(c.archive).toEqual({
      url: 'https://data.gharchive.org',
      mirrors: ['https://data.gharchive.org'],
      serve: true,
      download: { minBytesPerSecond: 16_384, rateWindowMs: 60_000, deadlineMs: 3_600_000 },
    });
    expect(loadConfig({ ARCHIVE_SERVE: 'off' }).archive.serve).toBe(false);
    // Unset: GH Archive's rule for a new database; one recorded keeps its value
    // (test/integration/stored-settings.test.ts).
    expect(c.commits).toEqual({
      emails: 'gharchive',
      emailsGiven: false,
      maxPerPush: 250,
      share: 0.5,
      transport: 'graphql',
    });
  });

  it('takes each COMMIT_EMAILS mode and a COMMITS_MAX_PER_PUSH within its bound', () => {
    for (const mode of ['gharchive', 'hash', 'keep', 'drop'] as const) {
      expect(loadConfig({ COMMIT_EMAILS: mode }).commits).toMatchObject({
        emails: mode,
        emailsGiven: true,
      });
    }
    expect(loadConfig({ COMMITS_MAX_PER_PUSH: '10000' }).commits.maxPerPush).toBe(10_000);
  });

  it('fetches commits by GraphQL unless COMMITS_TRANSPORT says rest', () => {
    expect(loadConfig({}).commits.transport).toBe('graphql');
    expect(loadConfig({ COMMITS_TRANSPORT: 'rest' }).commits.transport).toBe('rest');
  });

  it('takes COMMITS_SHARE from 0 to 1, both ends included', () => {
    expect(loadConfig({ COMMITS_SHARE: '0' }).commits.share).toBe(0);
    expect(loadConfig({ COMMITS_SHARE: '1' }).commits.share).toBe(1);
    expect(loadConfig({ COMMITS_SHARE: '0.25' }).commits.share).toBe(0.25);
  });

  it('takes a GH Archive mirror over HTTP or as a file:// directory', () => {
    expect(loadConfig({ GHARCHIVE_URL: 'https://mirror.example.org/gharchive/' }).archive.url).toBe(
      'https://mirror.example.org/gharchive',
    );
    expect(loadConfig({ GHARCHIVE_URL: 'file:///srv/gharchive' }).archive.url).toBe(
      'file:///srv/gharchive',
    );
  });

  it('takes several mirrors, comma-separated, the first the default', () => {
    const c = loadConfig({
      GHARCHIVE_URL:
        'https://data.gharchive.org/, file:///srv/opendigger ,https://data.gharchive.org',
    });
    expect(c.archive.url).toBe('https://data.gharchive.org');
    expect(c.archive.mirrors).toEqual(['https://data.gharchive.org', 'file:///srv/opendigger']);
  });

  it('names the bad mirror of a list', () => {
    expect(() =>
      loadConfig({ GHARCHIVE_URL: 'https://a.example.org,ftp://b.example.org' }),
    ).toThrow(
      /GHARCHIVE_URL each mirror must be an http\(s\) URL or a file:\/\/ directory \(got "ftp:\/\/b.example.org"\)/,
    );
    expect(() => loadConfig({ GHARCHIVE_URL: 'https://a.example.org,' })).toThrow(
      /GHARCHIVE_URL .*\(got ""\)/,
    );
  });

  it('bounds archive downloads by a minimum rate and a deadline', () => {
    const c = loadConfig({
      ARCHIVE_MIN_RATE: '1000',
      ARCHIVE_RATE_WINDOW: '2s',
      ARCHIVE_DEADLINE: '5m',
    });
    expect(c.archive.download).toEqual({
      minBytesPerSecond: 1000,
      rateWindowMs: 2000,
      deadlineMs: 300_000,
    });
    expect(() => loadConfig({ ARCHIVE_MIN_RATE: '0' })).toThrow(/ARCHIVE_MIN_RATE/);
  });

  it('treats an empty string as unset', () => {
    const c = loadConfig({ TICK_SECONDS: '', GITHUB_TOKEN: '', GITHUB_MODE: '' });
    expect(c.tickSeconds).toBe(60);
    expect(c.github.token).toBeUndefined();
    expect(c.github.mode).toBe('live');
  });

  it('parses set values and freezes the result', () => {
    const c = loadConfig({
      DATABASE_URL: 'postgresql://u@db:5432/x',
      GITHUB_MODE: 'fixture',
      GITHUB_API_URL: 'http://127.0.0.1:9999/',
      ENRICH_TTL: '12h',
      HTTP_PORT: '0',
    });
    expect(c.databaseUrl).toBe('postgresql://u@db:5432/x');
    expect(c.github.mode).toBe('fixture');
    expect(c.github.apiUrl).toBe('http://127.0.0.1:9999'); // trailing slash dropped
    expect(c.enrichment.ttlSeconds).toBe(12 * 3600);
    expect(c.http.port).toBe(0);
    expect(Object.isFrozen(c)).toBe(true);
    expect(Object.isFrozen(c.github)).toBe(true);
  });

  it('parses durations', () => {
    expect(parseDurationSeconds('90')).toBe(90);
    expect(parseDurationSeconds('90s')).toBe(90);
    expect(parseDurationSeconds('15m')).toBe(900);
    expect(parseDurationSeconds('7d')).toBe(7 * 86400);
    expect(parseDurationSeconds('1w')).toBeUndefined();
  });
});

describe('config: SOURCES', () => {
  it('parses the documented form', () => {
    expect(parseSourcesList('public,repo:octocat/Hello-World,org:github,user:torvalds')).toEqual([
      { kind: 'public' },
      { kind: 'repo', target: 'octocat/Hello-World' },
      { kind: 'org', target: 'github' },
      { kind: 'user', target: 'torvalds' },
    ]);
    expect(parseSourcesList(' public , ')).toEqual([{ kind: 'public' }]);
  });

  it.each([
    ['planet:mars', /unknown source kind "planet"/],
    ['repo:octocat', /not OWNER\/NAME/],
    ['repo:octo/cat/extra', /not OWNER\/NAME/],
    ['user:-torvalds', /not a GitHub login/],
    ['org:', /needs a login/],
    ['public:x', /takes no target/],
    ['repo:octocat/..', /not a GitHub repository name/],
  ])('refuses %s with a ConfigError naming SOURCES', (raw, says) => {
    let caught: unknown;
    try {
      parseSourcesList(`public,${raw}`);
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(ConfigError);
    expect((caught as ConfigError).variable).toBe('SOURCES');
    expect((caught as ConfigError).message).toContain(`"${raw}"`);
    expect((caught as ConfigError).message).toMatch(says);
  });
});

describe('config: a bad value stops a real command with exit 2', () => {
  it('DATABASE_URL with a port that is not a number: one line naming it, exit 2, no password', async () => {
    const { runBin } = await import('../support/cli.ts');
    const r = await runBin('status', [], {
      DATABASE_URL: 'postgres://gpi:hunter2-sentinel@localhost:abc/gpi',
    });
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/DATABASE_URL must be a postgres:\/\/ or postgresql:\/\/ URL/);
    expect(r.err.trim().split('\n')).toHaveLength(1);
    expect(r.err + r.out).not.toContain('hunter2-sentinel');
  });
});

describe('config: history', () => {
  it('keeps everything unless HISTORY_MONTHS is set', () => {
    expect(loadConfig({}).history).toEqual({ months: null, archiveDir: null, mirror: null });
  });

  it('takes ARCHIVE_DIR as an absolute path, and RETENTION_MIRROR as GHARCHIVE_URL lists it', () => {
    const c = loadConfig({
      HISTORY_MONTHS: '12',
      ARCHIVE_DIR: 'archive',
      GHARCHIVE_URL: 'https://data.gharchive.org,https://u:secret@mirror.example/gh/',
      RETENTION_MIRROR: 'https://mirror.example/gh',
    });
    expect(c.history.months).toBe(12);
    expect(c.history.archiveDir).toBe(path.resolve('archive'));
    // Read with the listed mirror's userinfo; named without it.
    expect(c.history.mirror).toBe('https://u:secret@mirror.example/gh');
  });
});
