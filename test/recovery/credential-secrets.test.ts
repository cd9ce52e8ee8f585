import { createPrivateKey } from 'node:crypto';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tokenLabel } from '../../src/platform/config/credential-label.ts';
import { sourceSpec } from '../../src/platform/config/source-spec.ts';
import { addSource } from '../../src/store/sources.ts';
import { runBin } from '../support/cli.ts';
import { useTestDatabase } from '../support/db.ts';
import { type FakeGitHub, startFakeGitHub } from '../support/fake-github.ts';
import { appKeys } from '../support/github-app-keys.ts';
import { waitFor } from './helpers.ts';
import { allRowsAsText, childOutput, startWorkerAndWeb, untilAttempted } from './secret-checks.ts';
import { addPublicSource, type Child, killAll, seedPushes } from './world.ts';

/**
 * The credential pool's secrets never leave the process: bin/worker and bin/web
 * run at LOG_LEVEL=trace with two sentinel tokens (GITHUB_TOKENS) and a GitHub App (its
 * PEM key; installation tokens and JWTs the fake hands out and receives), through polls,
 * enrichment on all four credentials, installation tokens that GitHub answers 401 to just
 * after issue (replication lag: retried), and a 401 that blocks a credential. Then no token, installation
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

describe('credential pool secrets', () => {
  it('no token, installation token, JWT or key line in any log, output or table', {
    timeout: 180_000,
  }, async () => {
    const world = seedPushes(fake, 8, 1300);
    await addPublicSource(t);
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
    const { worker, web, url } = await startWorkerAndWeb(env, children);
    await untilAttempted(t.db, world.actorIds.length + world.repositoryIds.length, 45_000);

    // A 401 on every credential that polls this source, last (an installation token is
    // tried once more on a 401): each 401 blocks its credential and the page goes on to the
    // next until none is left, and the run fails GITHUB_AUTH_FAILED.
    const { source } = await addSource(t.db, sourceSpec('repo', 'secret/feed'), 'live');
    fake.fail({
      path: '/repos/secret/feed/events',
      status: 401,
      body: '{"message":"Bad credentials"}',
      times: Number.POSITIVE_INFINITY,
    });
    await waitFor(
      async () => {
        const r = await sql<{ n: number }>`
          SELECT count(*)::int AS n FROM ingestion_runs
          WHERE source_id = ${source.id} AND status = 'failed'
            AND error LIKE 'GITHUB_AUTH_FAILED:%'`.execute(t.db);
        return r.rows[0]!.n === 1;
      },
      { timeoutMs: 60_000, what: 'the 401 run to fail' },
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
    const logs = childOutput(worker) + childOutput(web);
    for (const event of ['github.request', 'github.installation_token', 'enrichment.completed'])
      expect(logs, event).toContain(`"${event}"`);
    expect(logs).toContain('"retried_after_401":true');
    expect(logs).toContain('"error_code":"GITHUB_AUTH_FAILED"');
    const status = JSON.parse(outputs['/status']!) as { credentials: { label: string }[] };
    expect(status.credentials).toHaveLength(4);

    expect(leaks(childOutput(worker)), 'bin/worker output').toEqual([]);
    expect(leaks(childOutput(web)), 'bin/web output').toEqual([]);
    for (const [where, text] of Object.entries(outputs)) expect(leaks(text), where).toEqual([]);
    expect(leaks(await allRowsAsText(t.db)), 'tables').toEqual([]);
    expect(logs + Object.values(outputs).join('')).not.toContain('POOLSENTINEL');
    expect(logs).not.toContain('PRIVATE KEY');
  });
});
