import { createPrivateKey } from 'node:crypto';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tokenLabel } from '../../src/github/credential.ts';
import { runBin } from '../support/cli.ts';
import { useTestDatabase } from '../support/db.ts';
import { type FakeGitHub, startFakeGitHub } from '../support/fake-github.ts';
import { appKeys } from '../support/github-app-keys.ts';
import { waitFor } from './helpers.ts';
import { addPublicSource, type Child, killAll, seedPushes, spawnBin } from './world.ts';

/**
 * The credential pool's secrets never leave the process (issue 13): bin/worker and bin/web
 * run at LOG_LEVEL=trace with two sentinel tokens (GITHUB_TOKENS) and a GitHub App (its
 * PEM key; installation tokens and JWTs the fake hands out and receives), through polls,
 * enrichment on all four credentials, installation tokens that GitHub answers 401 to just
 * after issue (replication lag: retried), and a 401 on a token. Then no token, installation
 * token, JWT or line of the key — as issued (PKCS#1) or as held (PKCS#8) — appears in
 * anything either process wrote, in /status, the page, /metrics, bin/status (--json), or in
 * any row of any table (business schema and pg-boss's).
 */

const TOKENS = ['tok-POOLSENTINEL-a-3f1e', 'tok-POOLSENTINEL-b-77c2'];
const APP_ID = 5150;
const keys = appKeys();
const t = useTestDatabase();
let fake: FakeGitHub;
const children: Child[] = [];

beforeAll(async () => {
  fake = await startFakeGitHub();
  fake.addApp({
    id: APP_ID,
    publicKey: keys.publicKey,
    installations: [31, 32],
    replicationLagMs: 300,
  });
});

afterAll(async () => {
  await killAll(children);
  await fake?.close();
});

/** Lines of base64 key material, as GitHub issues the key and as the process holds it. */
function keyLines(): string[] {
  const pkcs8 = createPrivateKey(keys.privateKey).export({ type: 'pkcs8', format: 'pem' });
  return [keys.privateKey, pkcs8.toString()]
    .flatMap((pem) => pem.split('\n'))
    .filter((l) => l.length >= 40 && !l.startsWith('-----'));
}

function secrets(): string[] {
  return [
    ...TOKENS,
    ...fake.mintedTokens.map((m) => m.token),
    ...fake.jwtsSeen,
    ...fake.jwtsSeen.map((j) => j.split('.')[2]!), // a signature alone
    ...keyLines(),
  ];
}

function leaks(text: string): string[] {
  return secrets().filter((s) => text.includes(s));
}

async function allRowsAsText(): Promise<string> {
  const tables = await sql<{ schema: string; name: string }>`
    SELECT table_schema AS schema, table_name AS name FROM information_schema.tables
    WHERE table_schema IN ('public', 'pgboss') AND table_type = 'BASE TABLE'`.execute(t.db);
  const parts: string[] = [];
  for (const { schema, name } of tables.rows) {
    const r = await sql<{ t: string | null }>`
      SELECT string_agg(x::text, E'\n') AS t FROM ${sql.table(`${schema}.${name}`)} x`.execute(
      t.db,
    );
    parts.push(r.rows[0]!.t ?? '');
  }
  return parts.join('\n');
}

const everything = (c: Child) => `${JSON.stringify(c.lines)}\n${c.stderr.join('')}`;

describe('credential pool secrets', () => {
  it('no token, installation token, JWT or key line in any log, output or table', {
    timeout: 90_000,
  }, async () => {
    const world = seedPushes(fake, 8, 1300);
    await addPublicSource(t);
    // A 401 on whichever credential asks for this profile first.
    fake.fail({ path: '/users/pusher-1303', status: 401, body: '{"message":"Bad credentials"}' });
    const env = {
      DATABASE_URL: t.url,
      GITHUB_MODE: 'live',
      GITHUB_API_URL: fake.url,
      GITHUB_TOKENS: TOKENS.join(','),
      GITHUB_APP_ID: String(APP_ID),
      GITHUB_APP_PRIVATE_KEY: keys.privateKey,
      GITHUB_APP_INSTALLATION_IDS: '31,32',
      TICK_SECONDS: '1',
      LOG_LEVEL: 'trace',
      HTTP_PORT: '0',
    };
    const worker = spawnBin('worker', env);
    const web = spawnBin('web', env);
    children.push(worker, web);
    const url = String(
      (await web.waitForLine((l) => l.event === 'web.listening', 'the web to listen')).url,
    );

    await waitFor(
      async () => {
        const r = await sql<{ n: number }>`
          SELECT count(*)::int AS n FROM enrichment_attempts WHERE outcome IS NOT NULL`.execute(
          t.db,
        );
        return r.rows[0]!.n >= world.actorIds.length + world.repositoryIds.length;
      },
      { timeoutMs: 45_000, what: 'every entity to have been attempted' },
    );

    const outputs: Record<string, string> = {
      '/status': await (await fetch(`${url}/status`)).text(),
      'the page': await (await fetch(`${url}/`)).text(),
      '/metrics': await (await fetch(`${url}/metrics`)).text(),
    };
    const binEnv = { ...env, LOG_LEVEL: 'trace' };
    for (const args of [[], ['--json']]) {
      const r = await runBin('status', args, binEnv);
      expect(r.code, r.err).toBe(0);
      outputs[`bin/status ${args.join(' ')}`] = r.out + r.err;
    }

    worker.process.kill('SIGTERM');
    web.process.kill('SIGTERM');
    expect(await worker.exited).toEqual({ code: 0, signal: null });
    expect(await web.exited).toEqual({ code: 0, signal: null });

    // The secrets were really in use: all four credentials spoke to GitHub, tokens were
    // minted with JWTs, answered 401 while fresh and retried, and a token got a 401.
    const used = new Set(fake.requests.map((r) => r.credential));
    for (const label of [...TOKENS.map(tokenLabel), 'installation:31', 'installation:32'])
      expect(used, label).toContain(label);
    expect(fake.mintedTokens.length).toBeGreaterThanOrEqual(2);
    expect(fake.jwtsSeen.length).toBeGreaterThanOrEqual(2);
    const logs = everything(worker) + everything(web);
    for (const event of ['github.request', 'github.installation_token', 'enrichment.completed'])
      expect(logs, event).toContain(`"${event}"`);
    expect(logs).toContain('"retried_after_401":true');
    expect(logs).toMatch(/"error_code":"GITHUB_AUTH_FAILED"|GITHUB_AUTH_FAILED/);
    const status = JSON.parse(outputs['/status']!) as { credentials: { label: string }[] };
    expect(status.credentials).toHaveLength(4);

    expect(leaks(everything(worker)), 'bin/worker output').toEqual([]);
    expect(leaks(everything(web)), 'bin/web output').toEqual([]);
    for (const [where, text] of Object.entries(outputs)) expect(leaks(text), where).toEqual([]);
    expect(leaks(await allRowsAsText()), 'tables').toEqual([]);
    expect(logs + Object.values(outputs).join('')).not.toContain('POOLSENTINEL');
    expect(logs).not.toContain('PRIVATE KEY');
  });
});
