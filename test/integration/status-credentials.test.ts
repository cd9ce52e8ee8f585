import { sql } from 'kysely';
import { beforeAll, describe, expect, it } from 'vitest';
import { mergeCredentials } from '../../src/status/credentials.ts';
import { runBin } from '../support/cli.ts';
import { useTestDatabase } from '../support/db.ts';

/**
 * Bin/status shows the deployment's credentials, read from the database (the
 * ledger and github_rate_limits), whatever the shell's environment. The workers here ran on
 * two App installations and a token; the shell that asks has no GitHub variable at all, so
 * its own process would be `anonymous`. A token retired days ago and a GraphQL budget key are
 * in the tables too: neither is a credential of the deployment now.
 */

const t = useTestDatabase();
const now = new Date();
const minutesAgo = (m: number) => new Date(now.getTime() - m * 60_000);
const INSTALL_A = 'installation:101';
const INSTALL_B = 'installation:202';
const TOKEN = 'token:1a2b3c4d';
const RETIRED = 'token:0badc0de';

/** A shell without any credential: the App's variables and the tokens all unset. */
const BARE_SHELL = {
  GITHUB_MODE: 'live',
  GITHUB_TOKEN: undefined,
  GITHUB_TOKENS: undefined,
  GITHUB_APP_ID: undefined,
  GITHUB_APP_PRIVATE_KEY: undefined,
  GITHUB_APP_PRIVATE_KEY_FILE: undefined,
  GITHUB_APP_INSTALLATION_IDS: undefined,
  LOG_LEVEL: 'silent',
};

async function ledger(credential: string, purpose: string, n: number, counted = true) {
  await sql`
    INSERT INTO github_requests (credential, purpose, path, outcome, status, counted, reserved_at,
      sent_at, finished_at)
    SELECT ${credential}, ${purpose}, '/x', 'completed', ${counted ? 200 : 304}, ${counted},
      ${now}::timestamptz - make_interval(secs => g * 20), ${now}::timestamptz - make_interval(secs => g * 20),
      ${now}::timestamptz - make_interval(secs => g * 20)
    FROM generate_series(1, ${n}::int) g`.execute(t.db);
}

beforeAll(async () => {
  await t.db
    .insertInto('github_rate_limits')
    .values([
      {
        credential: INSTALL_A,
        quota: 12_500,
        remaining: 12_000,
        reset_at: new Date(now.getTime() + 30 * 60_000),
        observed_at: minutesAgo(1),
      },
      {
        credential: INSTALL_B,
        quota: 5000,
        remaining: 4990,
        reset_at: new Date(now.getTime() + 20 * 60_000),
        blocked_until: new Date(now.getTime() + 15 * 60_000),
        block_reason: 'auth',
        auth_failures: 2,
        auth_failed_since: minutesAgo(6),
        auth_error: 'HTTP 401: Bad credentials',
        observed_at: minutesAgo(2),
      },
      {
        credential: RETIRED,
        quota: 5000,
        remaining: 5000,
        reset_at: new Date(now.getTime() - 3 * 86_400_000),
        observed_at: new Date(now.getTime() - 3 * 86_400_000),
      },
      {
        credential: `${INSTALL_A}#graphql`,
        quota: 12_500,
        remaining: 12_400,
        reset_at: new Date(now.getTime() + 40 * 60_000),
        observed_at: minutesAgo(1),
      },
    ])
    .execute();
  await ledger(INSTALL_A, 'poll', 30);
  await ledger(INSTALL_A, 'poll', 5, false); // 304s: free
  await ledger(INSTALL_A, 'enrich', 12);
  await ledger(INSTALL_A, 'commits', 7);
  await ledger(INSTALL_B, 'enrich', 3);
  // Only in the ledger: GitHub has not answered it with headers yet.
  await ledger(TOKEN, 'poll', 4);
});

interface CredentialJson {
  label: string;
  quota: number;
  remaining: number | null;
  blocked: boolean;
  blockReason: string | null;
  spent: { poll: number; enrich: number; commits: number };
}

describe('bin/status in a shell without the deployment’s credentials', () => {
  it('--json lists the credentials the database knows, with their spend', async () => {
    const r = await runBin('status', ['--json'], { ...BARE_SHELL, DATABASE_URL: t.url });
    expect(r.code, r.err).toBe(0);
    const report = JSON.parse(r.out) as {
      credentials: CredentialJson[];
      budget: { credential: string; quota: number; spent: CredentialJson['spent'] };
    };
    const labels = report.credentials.map((c) => c.label);
    expect(labels).toEqual([INSTALL_A, INSTALL_B, TOKEN]);
    const by = new Map(report.credentials.map((c) => [c.label, c]));
    expect(by.get(INSTALL_A)).toMatchObject({
      quota: 12_500,
      blocked: false,
      spent: { poll: 30, enrich: 12, commits: 7 },
    });
    expect(by.get(INSTALL_A)!.remaining).toBeLessThanOrEqual(12_000);
    expect(by.get(INSTALL_B)).toMatchObject({
      quota: 5000,
      blocked: true,
      blockReason: 'auth',
      spent: { poll: 0, enrich: 3, commits: 0 },
    });
    expect(by.get(TOKEN)).toMatchObject({ quota: 5000, remaining: null, spent: { poll: 4 } });
    expect(report.budget).toMatchObject({
      credential: 'pool',
      quota: 12_500 + 5000 + 5000,
      spent: { poll: 34, enrich: 15, commits: 7 },
    });
  });

  it('the terminal picture shows them, not `anonymous 60 ? never`', async () => {
    const r = await runBin('status', [], { ...BARE_SHELL, DATABASE_URL: t.url });
    expect(r.code, r.err).toBe(0);
    const credentials = r.out.slice(r.out.indexOf('\nCredentials\n'), r.out.indexOf('\nQueues'));
    expect(credentials).toMatch(new RegExp(`^  ${INSTALL_A}\\s+12500\\s+\\d+\\s+in 2\\dm`, 'm'));
    expect(credentials).toContain(INSTALL_B);
    expect(credentials).toContain(TOKEN);
    expect(credentials).toMatch(/401 since /);
    expect(r.out).not.toMatch(/anonymous/);
    expect(r.out).not.toContain(RETIRED);
    expect(r.out).not.toContain('#graphql');
    expect(r.out).toMatch(/^ {2}quota 22500\/h, /m);
  });

  it('a shell’s own token comes first; its fallback `anonymous` only when nothing else is known', () => {
    expect(mergeCredentials(['anonymous'], [INSTALL_A, TOKEN])).toEqual([INSTALL_A, TOKEN]);
    expect(mergeCredentials(['token:ffff0000'], [INSTALL_A])).toEqual([
      'token:ffff0000',
      INSTALL_A,
    ]);
    expect(mergeCredentials([TOKEN, INSTALL_A], [INSTALL_A, TOKEN])).toEqual([TOKEN, INSTALL_A]);
    expect(mergeCredentials(['anonymous'], ['anonymous', TOKEN])).toEqual(['anonymous', TOKEN]);
    expect(mergeCredentials(['anonymous'], [])).toEqual(['anonymous']);
  });

  it('with nothing in the database, the asking process’s own credential is what there is', async () => {
    await sql`DELETE FROM github_requests`.execute(t.db);
    await sql`DELETE FROM github_rate_limits`.execute(t.db);
    const r = await runBin('status', ['--json'], { ...BARE_SHELL, DATABASE_URL: t.url });
    expect(r.code, r.err).toBe(0);
    const report = JSON.parse(r.out) as { credentials: CredentialJson[] };
    expect(report.credentials).toMatchObject([{ label: 'anonymous', quota: 60, remaining: null }]);
  });
});
