import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tokenLabel } from '../../src/platform/config/credential-label.ts';
import { startWebServer, type WebServer } from '../../src/web/server.ts';
import { runBin } from '../support/cli.ts';
import { useTestDatabase } from '../support/db.ts';
import { type FakeGitHub, startFakeGitHub } from '../support/fake-github.ts';
import { appKeys } from '../support/github-app-keys.ts';
import { clientFactory, memoryLogger, randomToken, testConfig } from '../support/github-client.ts';
import { userProfile } from '../support/github-factories.ts';
import { parsePrometheusText, sampleValue } from '../support/prometheus.ts';

/**
 * The pool on every surface: /status JSON `credentials: [{label, quota,
 * remaining, resetAt, blocked}]`, the page's credentials table, per-credential metrics,
 * bin/status and bin/status --json — with two tokens and two App installations, one token
 * rejected by GitHub. Labels only: no token, minted token, JWT or key line anywhere.
 */

const t = useTestDatabase();
const clients = clientFactory(t);
const keys = appKeys();
const TOKENS = [randomToken(), randomToken()];
const LABELS = [...TOKENS.map(tokenLabel), 'installation:101', 'installation:202'];
let fake: FakeGitHub;
let web: WebServer;
let env: Record<string, string>;

beforeAll(async () => {
  fake = await startFakeGitHub();
  fake.addApp({ id: 77, publicKey: keys.publicKey, installations: [101, 202] });
  env = {
    GITHUB_TOKENS: TOKENS.join(','),
    GITHUB_APP_ID: '77',
    GITHUB_APP_PRIVATE_KEY: keys.privateKey,
    GITHUB_APP_INSTALLATION_IDS: '101,202',
  };
  // A process that spends: 12 requests over the pool, then GitHub revokes one token. A
  // request that meets it is sent again on another credential, so it
  // succeeds; the revoked token is blocked alone.
  const worker = clients.make({ apiUrl: fake.url, token: null, env });
  for (let i = 0; i < 12; i++) fake.setUser(userProfile({ id: i + 1, login: `u${i}` }));
  for (let i = 0; i < 12; i++) await worker.request({ purpose: 'enrich', path: `/users/u${i}` });
  fake.revokeToken(TOKENS[0]!);
  const blockedRow = () =>
    t.db
      .selectFrom('github_rate_limits')
      .select('credential')
      .where('block_reason', '=', 'auth')
      // A 401 blocks the credential's GraphQL key too (ADR 0110 §1): the REST row says which.
      .where('credential', 'not like', '%#graphql')
      .execute();
  for (let i = 0; i < 40 && (await blockedRow()).length === 0; i++) {
    expect((await worker.request({ purpose: 'poll', path: '/users/u0' })).status).toBe(200);
  }
  expect(await blockedRow()).toEqual([{ credential: LABELS[0] }]);

  const config = testConfig(t, { apiUrl: fake.url, token: null, env });
  const github = clients.make({ apiUrl: fake.url, token: null, env });
  const { logger } = memoryLogger('silent');
  web = await startWebServer({ config, db: t.db, logger, github }, { host: '127.0.0.1', port: 0 });
});

afterAll(async () => {
  await web?.close();
  await clients.closeAll();
  await fake?.close();
});

/** Everything secret the deployment holds or GitHub handed out. */
function secrets(): string[] {
  const keyLines = keys.privateKey.split('\n').filter((l) => l.length > 40);
  return [...TOKENS, ...fake.mintedTokens.map((m) => m.token), ...fake.jwtsSeen, ...keyLines];
}

function expectNoSecret(text: string, where: string) {
  expect(fake.mintedTokens.length, 'installation tokens were minted').toBeGreaterThan(0);
  for (const s of secrets()) expect(text.includes(s), `${where} holds a secret`).toBe(false);
}

interface CredentialJson {
  label: string;
  quota: number;
  remaining: number | null;
  resetAt: string | null;
  blocked: boolean;
  blockReason: string | null;
  spent: { poll: number; enrich: number };
}

describe('the pool on every surface', () => {
  it('/status lists every credential by label, the budget is the pool total', async () => {
    const res = await fetch(`${web.url}/status`);
    const text = await res.text();
    const s = JSON.parse(text) as {
      credentials: CredentialJson[];
      budget: { credential: string; quota: number; spent: { poll: number; enrich: number } };
    };
    expect(s.credentials.map((c) => c.label)).toEqual(LABELS);
    for (const c of s.credentials) {
      expect(Object.keys(c)).toEqual(
        expect.arrayContaining(['label', 'quota', 'remaining', 'resetAt', 'blocked']),
      );
      expect(c.quota).toBe(5000);
      expect(typeof c.blocked).toBe('boolean');
    }
    const blocked = s.credentials.filter((c) => c.blocked);
    expect(blocked).toHaveLength(1);
    expect(blocked[0]).toMatchObject({ blockReason: 'auth' });
    expect(LABELS).toContain(blocked[0]!.label);
    // Every credential took part, and the total is their sum.
    const spent = s.credentials.map((c) => c.spent.enrich + c.spent.poll);
    expect(spent.every((n) => n > 0)).toBe(true);
    expect(s.budget.credential).toBe('pool');
    expect(s.budget.quota).toBe(20_000);
    expect(s.budget.spent.enrich + s.budget.spent.poll).toBe(spent.reduce((a, b) => a + b));
    expectNoSecret(text, '/status');
  });

  it('the page shows the credentials table and says one credential is blocked', async () => {
    const html = await (await fetch(`${web.url}/`)).text();
    const table = html.slice(
      html.indexOf('id="credentials"'),
      html.indexOf('</table>', html.indexOf('id="credentials"')),
    );
    for (const label of LABELS) expect(table).toContain(`<code>${label}</code>`);
    expect(table).toContain('401 until');
    expect(html).toMatch(/1 of 4 credentials blocked/);
    expectNoSecret(html, 'the page');
  });

  it('/metrics has per-credential budget, remaining and blocked gauges', async () => {
    const text = await (await fetch(`${web.url}/metrics`)).text();
    const m = parsePrometheusText(text);
    for (const label of LABELS) {
      expect(
        sampleValue(m, 'gpi_github_credential_allowance', { credential: label, purpose: 'enrich' }),
      ).toBe(3333);
      expect(
        sampleValue(m, 'gpi_github_credential_spent', { credential: label, purpose: 'poll' }),
      ).toBeGreaterThanOrEqual(0);
    }
    const blocked = LABELS.map((credential) =>
      sampleValue(m, 'gpi_github_credential_blocked', { credential, reason: 'auth' }),
    );
    expect(blocked.filter((v) => v === 1)).toHaveLength(1);
    expect(
      sampleValue(m, 'gpi_github_credential_remaining', { credential: 'installation:101' }),
    ).toBeGreaterThan(4900);
    expect(sampleValue(m, 'gpi_github_budget_allowance', { purpose: 'enrich' })).toBe(4 * 3333);
    expectNoSecret(text, '/metrics');
  });

  it('bin/status and bin/status --json show the same pool', async () => {
    const binEnv = { DATABASE_URL: t.url, GITHUB_API_URL: fake.url, LOG_LEVEL: 'silent', ...env };
    const text = await runBin('status', [], binEnv);
    expect(text.code, text.err).toBe(0);
    expect(text.out).toMatch(/^Credentials$/m);
    for (const label of LABELS)
      expect(text.out).toMatch(new RegExp(`^\\s+${label}\\s+5000\\s+`, 'm'));
    expect(text.out).toMatch(/401 since \d{4}-\S+ until \d{4}-\S+ \(HTTP 401: Bad credentials\)/);
    const json = await runBin('status', ['--json'], binEnv);
    expect(json.code, json.err).toBe(0);
    const report = JSON.parse(json.out) as { credentials: CredentialJson[] };
    expect(report.credentials.map((c) => c.label)).toEqual(LABELS);
    expectNoSecret(text.out + text.err + json.out + json.err, 'bin/status');
  });

  it('no table holds a secret', async () => {
    const tables = await sql<{ name: string }>`
      SELECT table_name AS name FROM information_schema.tables
      WHERE table_schema = 'public' AND table_type = 'BASE TABLE'`.execute(t.db);
    for (const { name } of tables.rows) {
      const r = await sql<{ t: string | null }>`
        SELECT string_agg(x::text, E'\n') AS t FROM ${sql.table(name)} x`.execute(t.db);
      expectNoSecret(r.rows[0]!.t ?? '', `table ${name}`);
    }
  });
});
