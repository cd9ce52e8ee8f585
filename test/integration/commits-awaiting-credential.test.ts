import { sql } from 'kysely';
import type { PgBoss } from 'pg-boss';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { releaseAwaitingPushes } from '../../src/commits/awaiting.ts';
import { NO_CREDENTIAL_IN_USE } from '../../src/commits/deployment.ts';
import { createBoss } from '../../src/jobs/boss.ts';
import { handleFetchCommits } from '../../src/jobs/handlers.ts';
import { reconcile } from '../../src/jobs/reconciler.ts';
import { sayIfNoCredential } from '../../src/jobs/worker-service.ts';
import { pollSource } from '../../src/poll/poll-source.ts';
import { readStatus } from '../../src/status/model.ts';
import { addSource, setSourceCommits } from '../../src/store/sources.ts';
import { captureLogger } from '../recovery/helpers.ts';
import { liveDeps, type TestDeps } from '../recovery/world.ts';
import { runBin } from '../support/cli.ts';
import { chain, insertRepository, pushShas } from '../support/commit-world.ts';
import { useTestDatabase } from '../support/db.ts';
import { type FakeGitHub, startFakeGitHub } from '../support/fake-github.ts';
import { pushEvent, userProfile } from '../support/github-factories.ts';
import { startTestWeb } from '../support/web.ts';

/**
 * Commits without a credential, as a deployment meets it (ADR 0186): a process without one
 * stores the pushes its sources cover `skipped`, waiting for one; every surface says so from
 * what the database knows of the deployment's credentials, not from the asking process's
 * environment; once a worker with a credential is there, the waiting pushes are made due,
 * newest first and only while nothing else is due, and fetched like any other.
 */

const t = useTestDatabase();
const log = captureLogger('info');
const REPO = { id: 50, name: 'wait/repo' };
const TOKEN = 'ghp_awaitingcredential0000000';
let fake: FakeGitHub;
let anonymous: TestDeps;
let token: TestDeps;
let boss: PgBoss;

beforeAll(async () => {
  fake = await startFakeGitHub();
  anonymous = liveDeps(t, fake, log.logger, { GITHUB_TOKEN: '', GITHUB_TOKENS: '' });
  token = liveDeps(t, fake, log.logger, { GITHUB_TOKEN: TOKEN });
  boss = createBoss(t.url, token.config, log.logger, { supervise: false, max: 2 });
  await boss.start();
});
afterAll(async () => {
  await boss?.stop({ graceful: false });
  await anonymous?.close();
  await token?.close();
  await fake?.close();
});
beforeEach(async () => {
  fake.reset();
  await sql`TRUNCATE pgboss.job, push_events, stored_commits, commit_fetch_turns,
    repositories, actors, github_requests, github_rate_limits, event_sources CASCADE`.execute(t.db);
  log.lines.length = 0;
});

/** Three pushes to REPO, a minute apart (oldest first), polled by `deps` from the public feed. */
async function pollThree(deps: TestDeps): Promise<{ heads: string[]; sourceId: number }> {
  await insertRepository(t.db, REPO.id, REPO.name);
  const shas = chain(fake, REPO.name, 4);
  const at = Date.now() - 10 * 60_000;
  const events = [0, 1, 2].map((i) =>
    pushEvent({
      repo: REPO,
      created_at: new Date(at + i * 60_000),
      payload: { ref: 'refs/heads/main', before: shas[i]!, head: shas[i + 1]! },
    }),
  );
  fake.addEvents('public', events);
  const source = (await addSource(t.db, { kind: 'public' }, 'live')).source;
  const run = await pollSource(deps, Number(source.id), { force: true });
  expect(run).toMatchObject({ outcome: 'completed', eventsCreated: 3 });
  return { heads: shas.slice(1), sourceId: Number(source.id) };
}

async function stateOf(head: string): Promise<string> {
  const r = await sql<{ s: string }>`
    SELECT commits_state || CASE WHEN commits_state = 'skipped'
      AND commits_next_attempt_at IS NOT NULL THEN ' (waiting)' ELSE '' END AS s
    FROM push_events WHERE head = ${head}`.execute(t.db);
  return r.rows[0]!.s;
}

/** A request on the token: the database now knows a credential the deployment uses. */
async function tokenAnswers(): Promise<void> {
  fake.setUser(userProfile({ id: 9, login: 'someone' }));
  await token.github.request({ purpose: 'enrich', path: '/users/someone' });
}

describe('a deployment without a credential', () => {
  it('stores covered pushes waiting; every surface says commits are off, whoever asks', async () => {
    const { heads } = await pollThree(anonymous);
    for (const h of heads) expect(await stateOf(h)).toBe('skipped (waiting)');

    // Asked by a process that has a token: the deployment's answer all the same.
    const report = await readStatus(token);
    expect(report.commits).toMatchObject({ off: NO_CREDENTIAL_IN_USE, awaitingCredential: 3 });
    const env = { DATABASE_URL: t.url, LOG_LEVEL: 'silent', GITHUB_MODE: 'live' };
    const status = await runBin('status', [], { ...env, GITHUB_TOKEN: TOKEN });
    expect(status.out).toContain(`  commits are off: ${NO_CREDENTIAL_IN_USE}\n`);
    expect(status.out).toContain(
      '  3 pushes wait for a credential: a worker with one fetches them, newest first, when nothing else is due\n',
    );
    // The page, from a bin/web in fixture mode (a credential of its own): a warning in the
    // header, the reason and the waiting pushes on the commits card.
    const web = await startTestWeb(t);
    try {
      const html = await (await fetch(`${web.url}/`)).text();
      expect(html).toMatch(/id="health">[^<]*commits off: no GitHub credential/);
      expect(html).toContain(`<p class="off">commits are off: ${NO_CREDENTIAL_IN_USE}</p>`);
      expect(html).toContain('<dt>waiting for a credential</dt><dd>3</dd>');
    } finally {
      await web.close();
    }
    const list = await runBin('sources', ['list'], { ...env, GITHUB_TOKEN: TOKEN });
    expect(list.out).toMatch(/^1\s+public\s+-\s+live\s+yes\s+on, no credential\s+/m);

    // An anonymous worker never makes them due: it could not fetch them.
    const r = await reconcile({ ...anonymous, boss, github: anonymous.github });
    expect(r.commits.action).toBe('nothing_due');
    for (const h of heads) expect(await stateOf(h)).toBe('skipped (waiting)');

    // Once a credential answers, a shell without one hears the deployment's answer.
    await tokenAnswers();
    const after = await runBin('status', ['--json'], { ...env, GITHUB_TOKEN: '' });
    expect(JSON.parse(after.out).commits).toMatchObject({ off: null, awaitingCredential: 3 });
    // The next column is read against bin/sources' own now: the poll scheduled the next one
    // an interval after it ran, and on a loaded machine the test got within two minutes of
    // it ("in 118s"). An hour ahead, it says minutes however long the test took.
    await sql`UPDATE event_sources SET next_poll_at = now() + interval '1 hour'`.execute(t.db);
    const listed = await runBin('sources', ['list'], { ...env, GITHUB_TOKEN: '' });
    expect(listed.out).toMatch(/^1\s+public\s+-\s+live\s+yes\s+on\s+in \d+m\s+/m);
  }, 120_000);

  it('a worker with a credential fetches them: newest first, only while nothing else is due', async () => {
    const { heads } = await pollThree(anonymous);
    // A batch of two: the two newest are made due, the oldest waits.
    expect(await releaseAwaitingPushes(t.db, new Date(), 2)).toEqual({ released: 2, dropped: 0 });
    expect(await Promise.all(heads.map(stateOf))).toEqual([
      'skipped (waiting)',
      'pending',
      'pending',
    ]);
    // Something is due: the reconciler sends a cycle and makes nothing more due.
    const first = await reconcile({ ...token, boss, github: token.github });
    expect(first.commits).toMatchObject({ due: true, action: 'dispatched' });
    expect(await stateOf(heads[0]!)).toBe('skipped (waiting)');
    const ctx = { deps: token, boss };
    expect(await handleFetchCommits(ctx, { id: 'job-a' })).toMatchObject({ processed: 2 });
    expect(await stateOf(heads[1]!)).toBe('complete');
    expect(await stateOf(heads[2]!)).toBe('complete');
    // Nothing due now: the reconciler makes the last one due and sends its cycle.
    await sql`DELETE FROM pgboss.job WHERE name = 'fetch-commits'`.execute(t.db);
    const second = await reconcile({ ...token, boss, github: token.github });
    expect(second.commits).toMatchObject({ due: true, action: 'dispatched' });
    expect(log.events('commits.released')).toEqual([
      expect.objectContaining({ released: 1, dropped: 0 }),
    ]);
    expect(await handleFetchCommits(ctx, { id: 'job-b' })).toMatchObject({ processed: 1 });
    for (const h of heads) expect(await stateOf(h)).toBe('complete');
    expect(await pushShas(t.db, heads[0]!)).toHaveLength(1);
  });

  it('a waiting push no source covers any more is plainly skipped, never fetched', async () => {
    const { heads, sourceId } = await pollThree(anonymous);
    await setSourceCommits(t.db, sourceId, false);
    expect(await releaseAwaitingPushes(t.db, new Date())).toEqual({ released: 0, dropped: 3 });
    for (const h of heads) expect(await stateOf(h)).toBe('skipped');
  });

  it('bin/commits with a credential makes them due when nothing else is, up to its limit', async () => {
    const { heads } = await pollThree(anonymous);
    const r = await runBin('commits', ['--limit', '2', '--json'], {
      DATABASE_URL: t.url,
      GITHUB_API_URL: fake.url,
      GITHUB_MODE: 'live',
      GITHUB_TOKEN: TOKEN,
      LOG_LEVEL: 'warn',
    });
    expect(r.code).toBe(0);
    expect(JSON.parse(r.out)).toMatchObject({ released: 2, fetched: 2 });
    expect(await Promise.all(heads.map(stateOf))).toEqual([
      'skipped (waiting)',
      'complete',
      'complete',
    ]);
  });

  it('bin/worker without a credential says so at start: a warning when none is used anywhere', async () => {
    // What WorkerService.start() says once the worker runs.
    const warned = async (deps: TestDeps): Promise<unknown[]> => {
      log.lines.length = 0;
      await sayIfNoCredential(deps, log.logger);
      return log.events('worker.no_credential');
    };
    expect(await warned(anonymous)).toEqual([
      expect.objectContaining({ level: 'warn', elsewhere: false }),
    ]);
    // Another process of the deployment has one: a note, not a warning.
    await tokenAnswers();
    expect(await warned(anonymous)).toEqual([
      expect.objectContaining({ level: 'info', elsewhere: true }),
    ]);
    // With a credential of its own: nothing to say.
    expect(await warned(token)).toEqual([]);
  }, 120_000);
});
