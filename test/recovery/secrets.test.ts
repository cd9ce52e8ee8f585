import { sign } from '@octokit/webhooks-methods';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sourceSpec } from '../../src/platform/config/source-spec.ts';
import { gapHours, hourOf } from '../../src/store/archive-hours.ts';
import { addSource } from '../../src/store/sources.ts';
import { type ArchiveServer, startArchiveServer } from '../support/archive-server.ts';
import { runBin } from '../support/cli.ts';
import { useTestDatabase } from '../support/db.ts';
import { type FakeGitHub, startFakeGitHub } from '../support/fake-github.ts';
import { pushEvent } from '../support/github-factories.ts';
import { pushPayload } from '../support/web.ts';
import { waitFor } from './helpers.ts';
import {
  allRowsAsText,
  childOutput,
  exitText,
  sentinelRole,
  startWorkerAndWeb,
  untilAttempted,
} from './secret-checks.ts';
import { addPublicSource, type Child, killAll, seedPushes } from './world.ts';

/**
 * Secrets never leave the process: bin/worker and bin/web run with a sentinel
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
  // Bounds, not timing claims: under a loaded machine every process start takes its time.
  it('the token and the webhook secret appear in no log line and no table', {
    timeout: 240_000,
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
    await untilAttempted(t.db, world.actorIds.length + world.repositoryIds.length, 120_000);

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
      { timeoutMs: 90_000, what: 'the 401 run to fail' },
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

/**
 * No URL's userinfo in any line, the red team's way: GHARCHIVE_URL (two
 * mirrors behind basic auth), GITHUB_API_URL and DATABASE_URL all carry a sentinel user and
 * password, which are really used (the archives refuse a request without them, the database
 * checks the password). The real commands run — bin/setup, bin/backfill (hours present,
 * missing, failing; --mirror all; --json; --gaps), bin/status (text, --json, --coverage),
 * bin/sources list, bin/web's /status, /, /metrics and /readyz, bin/worker (a poll, a failed
 * poll, a mirror asked again for an hour it lacked), a configuration error quoting a URL —
 * and the sentinel is in none of their output, log lines or any row of any table.
 */
const URL_SENTINEL = 'URLSENTINEL';
const HOUR = 3_600_000;

describe('secrets in URLs', () => {
  const archives: ArchiveServer[] = [];
  let role: Awaited<ReturnType<typeof sentinelRole>> | undefined;
  afterAll(async () => {
    await killAll(children);
    for (const a of archives) await a.close();
    await role?.drop();
  });

  // About fifteen process starts (59 s alone on 2 cores; over 180 s beside four other files).
  it("no mirror, API or database URL's user or password appears in any output or table", {
    timeout: 600_000,
  }, async () => {
    const [a, b] = [await startArchiveServer(), await startArchiveServer()];
    archives.push(a, b);
    a.requireBasicAuth(`mirror-a-${URL_SENTINEL}`, `pw-${URL_SENTINEL}-a`);
    b.requireBasicAuth(`mirror-b-${URL_SENTINEL}`, `pw-${URL_SENTINEL}-b`);
    const withAuth = (base: string, user: string, password: string) =>
      base.replace('http://', `http://${user}:${password}@`);
    const mirrors = [
      withAuth(a.url, `mirror-a-${URL_SENTINEL}`, `pw-${URL_SENTINEL}-a`),
      withAuth(b.url, `mirror-b-${URL_SENTINEL}`, `pw-${URL_SENTINEL}-b`),
    ];
    role = await sentinelRole(t.db, t.url, `db-${URL_SENTINEL}-pw`);
    const env = {
      DATABASE_URL: role.url,
      GHARCHIVE_URL: mirrors.join(','),
      GITHUB_MODE: 'live',
      GITHUB_API_URL: withAuth(fake.url, `api-${URL_SENTINEL}`, `pw-${URL_SENTINEL}-api`),
      TICK_SECONDS: '1',
      LOG_LEVEL: 'trace',
      LOG_FORMAT: 'json',
      HTTP_PORT: '0',
    };
    const outputs: string[] = [];
    const run = async (name: string, argv: string[], extra: Record<string, string> = {}) => {
      const r = await runBin(name, argv, { ...env, ...extra });
      outputs.push(exitText(`${name} ${argv.join(' ')}`, r));
      return r;
    };

    expect((await run('setup', [])).code).toBe(0);

    // bin/backfill: an hour both mirrors have, one missing, one failing (503), --json.
    let id = 91_000_000_000;
    const push = (at: string) => pushEvent({ id: id++, created_at: at });
    for (const m of [a, b]) m.setHour('2026-11-20-4', [push('2026-11-20T04:10:00Z')]);
    a.fail('2026-11-20-6', { status: 503 });
    a.setHour('2026-11-20-6', [push('2026-11-20T06:10:00Z')]);
    const hours = await run('backfill', ['2026-11-20-4', '2026-11-20-5', '2026-11-20-6']);
    expect(hours.code).toBe(1);
    expect(hours.out).toMatch(/2026-11-20-5: failed: ARCHIVE_HOUR_MISSING: http:\/\/127\.0\.0\.1:/);
    expect(hours.out).toMatch(
      /2026-11-20-6: failed: ARCHIVE_UNAVAILABLE: http:\/\/127\.0\.0\.1:\d+\/2026-11-20-6\.json\.gz: answered 503/,
    );
    const all = await run('backfill', ['2026-11-20-4', '--mirror', 'all', '--json']);
    expect(all.code).toBe(0);
    expect(JSON.parse(all.out).results.map((r: { label: string }) => r.label)).toEqual([
      `${a.url}/2026-11-20-4.json.gz`,
      `${b.url}/2026-11-20-4.json.gz`,
    ]);

    // A gap both mirrors are asked for: B lacks its push hour, so the worker asks B again.
    const repo = { id: 6_900_001, name: 'url-secret/repo' };
    const { source } = await addSource(t.db, { kind: 'repo', target: repo.name }, 'live');
    await t.db
      .updateTable('event_sources')
      .set({ next_poll_at: new Date(Date.now() + 24 * HOUR) })
      .where('id', '=', source.id)
      .execute();
    const start = hourOf(new Date(Date.now() - 6 * HOUR)).start.getTime();
    const gap = await t.db
      .insertInto('gaps')
      .values({
        source_id: source.id,
        from_at: new Date(start + 10 * 60_000),
        to_at: new Date(start + 40 * 60_000),
        next_attempt_at: new Date(start),
      })
      .returningAll()
      .executeTakeFirstOrThrow();
    const allHours = gapHours(gap).map((h) => h.name);
    const gapHour = hourOf(new Date(start)).name;
    const gapPushes = [0, 1].map(() =>
      pushEvent({ id: id++, repo, created_at: new Date(start + 20 * 60_000) }),
    );
    for (const h of allHours) {
      a.setHour(h, h === gapHour ? gapPushes.slice(0, 1) : []);
      if (h !== gapHour) b.setHour(h, []);
    }
    const fill = await run('backfill', ['--gaps']);
    expect(fill.code).toBe(0);
    expect(fill.out).toMatch(new RegExp(`gap ${gap.id} .*: filled`));
    const n = allHours.length;
    expect(fill.out).toContain(`  ${a.url}: ${n} hours read, 0 missing`);
    expect(fill.out).toContain(`  ${b.url}: ${n - 1} hours read, 1 missing`);
    // B publishes the hour with a push A lacked; its retry is due now.
    b.setHour(gapHour, gapPushes);
    await sql`UPDATE backfill_files SET updated_at = now() - interval '2 hours'
      WHERE gap_id = ${gap.id}`.execute(t.db);

    // bin/worker and bin/web: a poll through GITHUB_API_URL, a failing poll, the late mirror.
    seedPushes(fake, 2, 950);
    await addSource(t.db, sourceSpec('public'), 'live');
    await addSource(t.db, sourceSpec('org', 'url-secret-fails'), 'live');
    await t.db
      .updateTable('event_sources')
      .set({ next_poll_at: new Date() })
      .where('target', 'is distinct from', repo.name)
      .execute();
    fake.fail({ path: '/orgs/url-secret-fails/events', status: 500, times: Infinity });
    const since = new Date();
    const { worker, web, url } = await startWorkerAndWeb(env, children);
    await waitFor(
      async () => {
        const r = await sql<{ done: boolean; failed: boolean; late: boolean }>`
          SELECT EXISTS (SELECT 1 FROM ingestion_runs WHERE status = 'completed'
                         AND started_at > ${since}) AS done,
                 EXISTS (SELECT 1 FROM ingestion_runs r JOIN event_sources s ON s.id = r.source_id
                         WHERE s.target = 'url-secret-fails' AND r.status = 'failed') AS failed,
                 EXISTS (SELECT 1 FROM backfill_files WHERE gap_id = ${gap.id} AND file = ${gapHour}
                         AND mirror = ${b.url} AND state = 'completed') AS late`.execute(t.db);
        const row = r.rows[0]!;
        return row.done && row.failed && row.late ? row : null;
      },
      { timeoutMs: 240_000, what: 'a poll, a failed poll and the late mirror hour' },
    );
    const pages: string[] = [];
    for (const path of ['/status', '/', '/metrics', '/readyz', '/status?sources=500']) {
      const res = await fetch(`${url}${path}`);
      pages.push(`== GET ${path} ${res.status}\n${await res.text()}`);
    }
    expect(pages[3]).toMatch(/GET \/readyz 200/);

    for (const argv of [[], ['--json'], ['--coverage'], ['--coverage', '--json']]) {
      expect((await run('status', argv)).code).toBe(0);
    }
    expect((await run('sources', ['list', '--json'])).code).toBe(0);
    // A configuration error quotes the bad URL: without its userinfo.
    const bad = await run('status', [], {
      GITHUB_API_URL: `ftp://api-${URL_SENTINEL}:pw@127.0.0.1:9/`,
    });
    expect(bad.code).toBe(2);
    expect(bad.err).toMatch(
      /GITHUB_API_URL must be an http\(s\) URL \(got "ftp:\/\/127\.0\.0\.1:9\/"\)/,
    );

    worker.process.kill('SIGTERM');
    web.process.kill('SIGTERM');
    expect(await worker.exited).toEqual({ code: 0, signal: null });
    expect(await web.exited).toEqual({ code: 0, signal: null });

    // The userinfo was really in use: every archive request carried its mirror's password
    // (a request without it is refused), the late hour came from B, GitHub was asked.
    for (const m of [a, b]) {
      expect(m.requests.length).toBeGreaterThan(0);
      expect(m.requests.every((r) => r.status !== 401)).toBe(true);
    }
    expect(
      b.requests.filter((r) => r.path === `/${gapHour}.json.gz` && r.status === 200),
    ).toHaveLength(1);
    expect(fake.requests.some((r) => r.path.startsWith('/events'))).toBe(true);
    const logs = childOutput(worker) + childOutput(web);
    for (const event of ['gap.mirror_added', 'ingestion.run_failed', 'ingestion.run_completed'])
      expect(logs, event).toContain(`"${event}"`);

    // What the red team grepped: every output, every log line, every table.
    const everything = [
      ...outputs,
      ...pages,
      childOutput(worker),
      childOutput(web),
      worker.stdout.join(''),
      web.stdout.join(''),
      await allRowsAsText(t.db),
    ];
    for (const text of everything) {
      const at = text.indexOf(URL_SENTINEL);
      expect(at, text.slice(Math.max(0, at - 200), at + 100)).toBe(-1);
    }
    // ...and what is stored still names the mirror, without its secret.
    const stored = await sql<{ mirror: string; error: string | null }>`
      SELECT DISTINCT mirror, error FROM backfill_files WHERE error IS NOT NULL`.execute(t.db);
    expect(stored.rows.map((r) => r.mirror)).toContain(a.url);
    expect(stored.rows.some((r) => r.error?.includes(`${a.url}/2026-11-20-6.json.gz`))).toBe(true);
  });
});
