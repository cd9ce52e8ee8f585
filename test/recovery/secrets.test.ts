import { sign } from '@octokit/webhooks-methods';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addSource, sourceSpec } from '../../src/ingestion/sources.ts';
import { useTestDatabase } from '../support/db.ts';
import { type FakeGitHub, startFakeGitHub } from '../support/fake-github.ts';
import { pushPayload } from '../support/web.ts';
import { waitFor } from './helpers.ts';
import { allRowsAsText, childOutput, startWorkerAndWeb, untilAttempted } from './secret-checks.ts';
import { addPublicSource, type Child, killAll, seedPushes } from './world.ts';

/**
 * Secrets never leave the process (issue 6): bin/worker and bin/web run with a sentinel
 * GITHUB_TOKEN and WEBHOOK_SECRET at LOG_LEVEL=trace, through a poll, enrichment, a webhook
 * delivery, a badly signed delivery, and errors (a 500, a reset, a 401 on the token). Then
 * neither sentinel appears in anything either process wrote to stdout or stderr, nor in
 * any row of any table (business schema and pg-boss's). The token is not shaped like a
 * GitHub token on purpose: the log redaction's patterns must not be what saves it.
 */

const TOKEN = 'tok-SENTINEL-7c1f-do-not-log';
const SECRET = 'whs-SENTINEL-b42e-do-not-log';
const t = useTestDatabase();
let fake: FakeGitHub;
const children: Child[] = [];

beforeAll(async () => {
  fake = await startFakeGitHub();
});

afterAll(async () => {
  await killAll(children);
  await fake?.close();
});

describe('secrets', () => {
  it('the token and the webhook secret appear in no log line and no table', {
    timeout: 60_000,
  }, async () => {
    const world = seedPushes(fake, 3, 900);
    fake.fail({ path: `/users/pusher-900`, status: 500 });
    fake.fail({ path: `/repos/org-901/repo-901`, reset: true });
    await addPublicSource(t);
    const env = {
      DATABASE_URL: t.url,
      GITHUB_MODE: 'live',
      GITHUB_API_URL: fake.url,
      GITHUB_TOKEN: TOKEN,
      WEBHOOK_SECRET: SECRET,
      TICK_SECONDS: '1',
      LOG_LEVEL: 'trace',
      HTTP_PORT: '0',
    };
    const { worker, web, url } = await startWorkerAndWeb(env, children);
    // Poll + enrichment (with a 500 and a reset on the way).
    await untilAttempted(t.db, world.actorIds.length + world.repositoryIds.length, 30_000);

    // A webhook delivery, and one with a bad signature.
    const body = JSON.stringify(pushPayload());
    const post = async (signature: string) =>
      fetch(`${url}/webhooks/github`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'x-github-event': 'push',
          'x-github-delivery': `secrets-${signature.length}-${Math.random()}`,
          'x-hub-signature-256': signature,
        },
        body,
      });
    expect((await post(await sign(SECRET, body))).status).toBe(202);
    expect((await post(await sign('wrong-secret', body))).status).toBe(401);

    // A 401 on the token, last (it blocks the credential).
    const { source } = await addSource(t.db, sourceSpec('repo', 'secret/feed'), 'live');
    fake.fail({
      path: '/repos/secret/feed/events',
      status: 401,
      body: '{"message":"Bad credentials"}',
    });
    await waitFor(
      async () => {
        const r = await sql<{ n: number }>`
          SELECT count(*)::int AS n FROM ingestion_runs
          WHERE source_id = ${source.id} AND status = 'failed'`.execute(t.db);
        return r.rows[0]!.n === 1;
      },
      { timeoutMs: 20_000, what: 'the 401 run to fail' },
    );

    worker.process.kill('SIGTERM');
    web.process.kill('SIGTERM');
    expect(await worker.exited).toEqual({ code: 0, signal: null });
    expect(await web.exited).toEqual({ code: 0, signal: null });

    // The secrets were really in use: GitHub got the token, the signature was accepted.
    expect(fake.requests.every((r) => r.headers.authorization === `token ${TOKEN}`)).toBe(true);
    // ...and the runs really went through the paths under test, at trace level.
    const logs = childOutput(worker) + childOutput(web);
    for (const event of [
      'github.request',
      'ingestion.run_failed',
      'enrichment.failed',
      'webhook.received',
      'webhook.rejected',
    ])
      expect(logs, event).toContain(`"${event}"`);

    for (const c of [worker, web]) {
      expect(childOutput(c)).not.toContain('SENTINEL');
    }
    expect(await allRowsAsText(t.db)).not.toContain('SENTINEL');
  });
});
