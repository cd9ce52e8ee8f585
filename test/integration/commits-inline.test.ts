import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import type { PgBoss } from 'pg-boss';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { localFileSource } from '../../src/backfill/archive.ts';
import { importFile } from '../../src/backfill/import.ts';
import { createBoss } from '../../src/jobs/boss.ts';
import { hintDispatcher } from '../../src/jobs/dispatch.ts';
import { QUEUES } from '../../src/jobs/queue-names.ts';
import { createLogger } from '../../src/platform/log.ts';
import { storePage } from '../../src/poll/page-store.ts';
import { storeCommits } from '../../src/store/commits.ts';
import { mapEventsPage } from '../../src/store/mapping.ts';
import { addSource } from '../../src/store/sources.ts';
import { gzipLines } from '../support/archive-server.ts';
import { useTestDatabase } from '../support/db.ts';
import { memoryLogger } from '../support/github-client.ts';
import { type GitHubEvent, pushEvent, sha } from '../support/github-factories.ts';
import { deliver, pushPayload, startTestWeb, type TestWeb } from '../support/web.ts';

// Commits that arrive with their push (ADR 0070): a webhook delivery, a GHES-shaped polled
// event, a pre-2025-10 archive line. Each is stored with its commits in the push's own
// transaction, no request, and every push gets the commits_state the targets say.

const t = useTestDatabase();
let web: TestWeb;
let boss: PgBoss;
let dir: string;

const hashOf = (email: string) =>
  `sha256:${createHash('sha256').update(email.trim().toLowerCase()).digest('hex')}`;

beforeAll(async () => {
  boss = createBoss(
    t.url,
    (await import('../../src/platform/config/config.ts')).loadConfig({}),
    createLogger('silent'),
    {
      role: 'test-hints',
      max: 2,
      supervise: false,
    },
  );
  await boss.start();
  // The queue commits-fetch defines with its handler: here only to receive hints.
  if (!(await boss.getQueue(QUEUES.fetchCommits))) {
    await boss.createQueue(QUEUES.fetchCommits, { policy: 'stately', retryLimit: 0 });
  }
  web = await startTestWeb(t, { boss });
  dir = mkdtempSync(path.join(tmpdir(), 'gpi-commits-'));
});
afterAll(async () => {
  await web?.close();
  await boss?.stop({ graceful: false });
  if (dir) rmSync(dir, { recursive: true, force: true });
});
beforeEach(async () => {
  await sql`TRUNCATE push_events, stored_commits, webhook_deliveries, actors, repositories, event_sources CASCADE`.execute(
    t.db,
  );
  await sql`DELETE FROM pgboss.job WHERE name = ${QUEUES.fetchCommits}`.execute(t.db);
  web.logs.length = 0;
});

async function pushOf(repositoryId: number | string, ref = 'refs/heads/main') {
  const r = await sql<{
    commits_state: string;
    commit_count: number | null;
    due: boolean;
  }>`
    SELECT commits_state, commit_count, commits_next_attempt_at IS NOT NULL AS due
    FROM push_events WHERE repository_id = ${String(repositoryId)} AND ref = ${ref}`.execute(t.db);
  expect(r.rows).toHaveLength(1);
  return r.rows[0]!;
}

async function commitsOf(repositoryId: number | string, ref = 'refs/heads/main') {
  const r = await sql<{
    position: number;
    sha: string;
    distinct: boolean | null;
    author_name: string | null;
    author_email: string | null;
    message: string | null;
  }>`
    SELECT pc.position, pc.sha, pc."distinct", c.author_name, c.author_email, c.message
    FROM push_commits pc JOIN commits c USING (repository_id, sha)
    WHERE pc.repository_id = ${String(repositoryId)} AND pc.ref = ${ref}
    ORDER BY pc.position`.execute(t.db);
  return r.rows;
}

async function hints(): Promise<number> {
  const r = await sql<{ n: number }>`
    SELECT count(*)::int AS n FROM pgboss.job WHERE name = ${QUEUES.fetchCommits}`.execute(t.db);
  return r.rows[0]!.n;
}

async function source(kind: 'repo' | 'org' | 'user' | 'public', target?: string) {
  const spec = kind === 'public' ? { kind } : { kind, target: target! };
  return (await addSource(t.db, spec as Parameters<typeof addSource>[1], 'fixture')).source;
}

async function hook(p: ReturnType<typeof pushPayload>, deliveryId = `d-${p.after}`) {
  const res = await deliver(web.url, { deliveryId, body: JSON.stringify(p) });
  expect(res.status).toBe(202);
}

describe('webhook deliveries carry their commits', () => {
  it('stores every commit of a delivery, oldest first, with hashed addresses and no hint', async () => {
    const p = pushPayload({ commits: 3 });
    await hook(p);
    expect(await pushOf(p.repository.id)).toEqual({
      commits_state: 'complete',
      commit_count: 3,
      due: false,
    });
    const rows = await commitsOf(p.repository.id);
    // GitHub's array is oldest first: the head commit (`after`) is its last entry.
    expect(rows.map((r) => r.sha)).toEqual(p.commits.map((c) => c.id));
    expect(rows.at(-1)!.sha).toBe(p.after);
    expect(rows[0]).toEqual({
      position: 0,
      sha: p.commits[0]!.id,
      distinct: true,
      author_name: 'Octo Cat',
      author_email: hashOf('octocat@example.com'),
      message: 'commit 0',
    });
    expect(await hints()).toBe(0);
  });

  it('a delivery of 2,048 commits (GitHub cut it) is partial when nobody targets it', async () => {
    const p = pushPayload({ commits: 2048 });
    await hook(p);
    expect(await pushOf(p.repository.id)).toEqual({
      commits_state: 'partial',
      commit_count: null,
      due: false,
    });
    expect(await commitsOf(p.repository.id)).toHaveLength(2048);
  });

  it('a delivery of 2,048 commits to a targeted repository is pending, due now, and hinted', async () => {
    const p = pushPayload({ commits: 2048, fullName: 'Target-Owner/Big' });
    await source('repo', 'target-owner/big');
    await hook(p);
    expect(await pushOf(p.repository.id)).toEqual({
      commits_state: 'pending',
      commit_count: null,
      due: true,
    });
    // The fetcher stores the whole list; no inline rows for it to reconcile.
    expect(await commitsOf(p.repository.id)).toEqual([]);
    expect(await hints()).toBe(1);
    const line = web.logs.map((l) => JSON.parse(l)).find((l) => l.event === 'commits.dispatched');
    expect(line).toMatchObject({ new_pending: 1, status: 'sent', queue: 'fetch-commits' });
  });

  it('a targeted delivery that carries all its commits is complete: no request, no hint', async () => {
    const p = pushPayload({ commits: 2047, fullName: 'target-owner/all' });
    await source('org', 'Target-Owner');
    await hook(p);
    expect((await pushOf(p.repository.id)).commits_state).toBe('complete');
    expect(await commitsOf(p.repository.id)).toHaveLength(2047);
    expect(await hints()).toBe(0);
  });

  it('one commit pushed to two branches is one commits row and two push_commits rows', async () => {
    const a = pushPayload({ commits: 2, ref: 'refs/heads/main' });
    const b = {
      ...a,
      ref: 'refs/heads/copy',
      repository: { ...a.repository },
    };
    await hook(a, 'd-branch-a');
    await hook(b, 'd-branch-b');
    const c = await sql<{ sha: string; n: number }>`
      SELECT sha, (SELECT count(*)::int FROM push_commits pc WHERE pc.sha = c.sha) AS n
      FROM commits c WHERE repository_id = ${String(a.repository.id)} ORDER BY sha`.execute(t.db);
    expect(c.rows).toEqual(
      a.commits.map((x) => ({ sha: x.id, n: 2 })).sort((x, y) => x.sha.localeCompare(y.sha)),
    );
    expect((await commitsOf(a.repository.id, 'refs/heads/copy')).map((r) => r.sha)).toEqual(
      a.commits.map((x) => x.id),
    );
  });

  it('a deleted ref and a tag are none with commit_count 0, even when targeted', async () => {
    await source('org', 'gone-owner');
    const deleted = pushPayload({ commits: 0, after: '0'.repeat(40), fullName: 'gone-owner/x' });
    const tag = pushPayload({ commits: 1, ref: 'refs/tags/v1.0', fullName: 'gone-owner/y' });
    await hook(deleted, 'd-deleted');
    await hook(tag, 'd-tag');
    expect(await pushOf(deleted.repository.id)).toEqual({
      commits_state: 'none',
      commit_count: 0,
      due: false,
    });
    expect(await pushOf(tag.repository.id, 'refs/tags/v1.0')).toEqual({
      commits_state: 'none',
      commit_count: 0,
      due: false,
    });
    expect(await hints()).toBe(0);
  });
});

/** A GHES-shaped (or pre-2025-10) PushEvent: size plus the commits the event lists. */
function ghesPush(o: {
  size: number;
  listed?: number;
  repo?: string;
  login?: string;
  createdAt?: string;
}): GitHubEvent {
  const listed = o.listed ?? o.size;
  const commits = Array.from({ length: listed }, (_, i) => ({
    sha: sha(),
    author: { name: `Dev ${i}`, email: ` Dev${i}@Example.com ` },
    message: `change ${i}`,
    distinct: i % 2 === 0,
    url: `https://api.github.com/repos/x/y/commits/${i}`,
  }));
  return pushEvent({
    ...(o.repo ? { repo: { name: o.repo } } : {}),
    ...(o.login ? { actor: { login: o.login } } : {}),
    ...(o.createdAt ? { created_at: o.createdAt } : {}),
    payload: { size: o.size, distinct_size: o.size, commits, head: commits.at(-1)?.sha ?? sha() },
  });
}

async function poll(events: GitHubEvent[]) {
  const page = mapEventsPage(JSON.parse(JSON.stringify(events)), '/events');
  expect(page.rejected).toEqual([]);
  const { stored } = await storePage(t.db, page, { sourceId: null, runId: null }, async () => null);
  return stored;
}

const repoIdOf = (ev: GitHubEvent) => (ev.repo as { id: number }).id;

describe('polled events', () => {
  it('stores a GHES-shaped event whole (complete), a cut one partial, a bare one skipped', async () => {
    const whole = ghesPush({ size: 2 });
    const cut = ghesPush({ size: 25, listed: 20 });
    const bare = pushEvent();
    const stored = await poll([whole, cut, bare]);
    expect(stored).toMatchObject({ created: 3, commitsPending: 0 });
    expect(await pushOf(repoIdOf(whole))).toEqual({
      commits_state: 'complete',
      commit_count: 2,
      due: false,
    });
    const rows = await commitsOf(repoIdOf(whole));
    const given = (whole.payload as { commits: { sha: string }[] }).commits;
    expect(rows.map((r) => [r.position, r.sha, r.distinct])).toEqual([
      [0, given[0]!.sha, true],
      [1, given[1]!.sha, false],
    ]);
    expect(rows[0]!.author_email).toBe(hashOf('dev0@example.com'));
    expect(await pushOf(repoIdOf(cut))).toEqual({
      commits_state: 'partial',
      commit_count: 25,
      due: false,
    });
    expect(await commitsOf(repoIdOf(cut))).toHaveLength(20);
    expect(await pushOf(repoIdOf(bare))).toEqual({
      commits_state: 'skipped',
      commit_count: null,
      due: false,
    });
  });

  it('leaves pending the pushes a repo, org or user source targets, and only those', async () => {
    await source('repo', 'Acme/Rockets');
    await source('org', 'widgets');
    await source('user', 'Mona');
    const off = await source('repo', 'acme/off');
    await sql`UPDATE event_sources SET commits_enabled = false WHERE id = ${off.id}`.execute(t.db);
    const { forgetCommitsTargets } = await import('../../src/store/commits-targets.ts');
    forgetCommitsTargets(t.db);
    const byRepo = pushEvent({ repo: { name: 'acme/rockets' } });
    const byOrg = pushEvent({ repo: { name: 'Widgets/anything' } });
    const byUser = pushEvent({ actor: { login: 'mona' } });
    const cut = ghesPush({ size: 30, listed: 20, repo: 'acme/rockets' });
    const switchedOff = pushEvent({ repo: { name: 'acme/off' } });
    const stranger = pushEvent();
    const stored = await poll([byRepo, byOrg, byUser, cut, switchedOff, stranger]);
    expect(stored.commitsPending).toBe(4);
    for (const ev of [byRepo, byOrg, byUser]) {
      expect(await pushOf(repoIdOf(ev))).toEqual({
        commits_state: 'pending',
        commit_count: null,
        due: true,
      });
    }
    expect(await pushOf(repoIdOf(cut))).toEqual({
      commits_state: 'pending',
      commit_count: 30,
      due: true,
    });
    expect(await commitsOf(repoIdOf(cut))).toEqual([]);
    expect((await pushOf(repoIdOf(switchedOff))).commits_state).toBe('skipped');
    expect((await pushOf(repoIdOf(stranger))).commits_state).toBe('skipped');
  });

  it("docs/commits.md's psql recipes run and answer from the stored commits", async () => {
    const doc = readFileSync(path.resolve(import.meta.dirname, '../../docs/commits.md'), 'utf8');
    const recipes = [...doc.matchAll(/```sql\n([\s\S]*?)```/g)].map((m) => m[1]!);
    expect(recipes).toHaveLength(5);
    // Pushed now: the top-authors recipe reads the last 7 days, and the factory's default
    // time is fixed, so it would fall out of that window as the calendar moves on.
    const ev = ghesPush({
      size: 3,
      repo: 'recipe-owner/recipe',
      createdAt: new Date().toISOString().replace(/\.\d{3}Z$/, 'Z'),
    });
    await poll([ev]);
    await sql`INSERT INTO push_events (actor_id, repository_id, ref, head, before, created_at,
      payload, commits_state, commits_next_attempt_at)
      VALUES (1, 424242, 'refs/heads/x', 'h', 'b', now(), '{}', 'pending', now()),
        (1, 434343, 'refs/heads/y', 'h', 'b', now(), '{}', 'skipped', now())`.execute(t.db);
    const [ofPush, topAuthors, waiting, awaiting, byState] = recipes.map((text) =>
      text.replace('45000000001', ev.id).replace("'octocat/Hello-World'", "'recipe-owner/recipe'"),
    );
    const rows = async (text: string) =>
      (await sql<Record<string, unknown>>`${sql.raw(text.replace(/;\s*$/, ''))}`.execute(t.db))
        .rows;
    expect((await rows(ofPush!)).map((r) => r.position)).toEqual([0, 1, 2]);
    const top = await rows(topAuthors!);
    expect(top).toHaveLength(3);
    expect(top.every((r) => Number(r.commits) === 1)).toBe(true);
    expect((await rows(waiting!)).map((r) => r.repository_id)).toEqual(['424242']);
    // Waiting for a credential: skipped, with a next attempt.
    expect((await rows(awaiting!)).map((r) => r.repository_id)).toEqual(['434343']);
    expect(await rows(byState!)).toEqual(
      expect.arrayContaining([{ commits_state: 'complete', count: '1' }]),
    );
  });

  it("a poll run that stored pending pushes sends one fetch-commits hint after it (the worker's afterRun)", async () => {
    const { logger, lines } = memoryLogger('info');
    const afterRun = hintDispatcher(boss, logger);
    const summary = {
      runId: 7,
      sourceId: 1,
      source: 'repo a/b',
      outcome: 'completed' as const,
      eventsSeen: 2,
      eventsCreated: 2,
      eventsRejected: 0,
      pagesFetched: 1,
      requestsSpent: 1,
      gap: false,
      newPending: { actor: 0, repository: 0 },
      nextPollAt: new Date(),
      error: null,
    };
    await afterRun({ ...summary, commitsPending: 0 });
    expect(await hints()).toBe(0);
    await afterRun({ ...summary, commitsPending: 2 });
    await afterRun({ ...summary, runId: 8, commitsPending: 1 });
    // Stately: one queued, the second hint is "already queued".
    expect(await hints()).toBe(1);
    const sent = lines.map((l) => JSON.parse(l)).filter((l) => l.event === 'commits.dispatched');
    expect(sent.map((l) => [l.run_id, l.new_pending, l.status])).toEqual([
      [7, 2, 'sent'],
      [8, 1, 'already_queued'],
    ]);
  });

  it('a public source targets every public push while its commits are on (ADR 0112)', async () => {
    const pub = await source('public');
    expect(pub.commits_enabled).toBe(true);
    const ev = pushEvent();
    await poll([ev]);
    expect(await pushOf(repoIdOf(ev))).toEqual({
      commits_state: 'pending',
      commit_count: null,
      due: true,
    });
    const { setSourceCommits } = await import('../../src/store/sources.ts');
    await setSourceCommits(t.db, Number(pub.id), false);
    const later = pushEvent();
    await poll([later]);
    expect((await pushOf(repoIdOf(later))).commits_state).toBe('skipped');
  });
});

describe('archive lines', () => {
  function file(lines: GitHubEvent[]): string {
    const f = path.join(dir, `hour-${Math.random().toString(16).slice(2)}.json.gz`);
    writeFileSync(f, gzipLines(lines));
    return f;
  }
  const deps = () => ({
    pool: t.pool,
    db: t.db,
    logger: memoryLogger('silent').logger,
    workerId: 'test-host:1',
  });

  it('stores a pre-2025-10 line with all its commits complete, one with size > 20 partial or pending', async () => {
    await source('repo', 'archive-owner/watched');
    // Lines of an hour when GitHub's events still carried commits (ADR 0184: a later one's
    // would be a mirror's claim, unverified).
    const createdAt = '2015-01-01T15:00:00Z';
    const whole = ghesPush({ size: 3, createdAt });
    const cut = ghesPush({ size: 42, listed: 20, createdAt });
    const watched = ghesPush({ size: 42, listed: 20, repo: 'archive-owner/watched', createdAt });
    const modern = pushEvent();
    const f = file([whole, cut, watched, modern]);
    const r = await importFile(
      deps(),
      localFileSource(f),
      { scope: 'all', sourceId: null, gapId: null },
      { chunkRows: 2 },
    );
    expect(r.outcome).toBe('completed');
    expect(r.commitsPending).toBe(1);
    expect(await pushOf(repoIdOf(whole))).toEqual({
      commits_state: 'complete',
      commit_count: 3,
      due: false,
    });
    expect((await commitsOf(repoIdOf(whole))).map((c) => c.sha)).toEqual(
      (whole.payload as { commits: { sha: string }[] }).commits.map((c) => c.sha),
    );
    expect(await pushOf(repoIdOf(cut))).toEqual({
      commits_state: 'partial',
      commit_count: 42,
      due: false,
    });
    expect(await commitsOf(repoIdOf(cut))).toHaveLength(20);
    expect(await pushOf(repoIdOf(watched))).toEqual({
      commits_state: 'pending',
      commit_count: 42,
      due: true,
    });
    expect((await pushOf(repoIdOf(modern))).commits_state).toBe('skipped');

    // Read again (forced): nothing is stored twice.
    const totals = async () =>
      (
        await sql<{ c: number; pc: number }>`
          SELECT (SELECT count(*)::int FROM commits) AS c,
                 (SELECT count(*)::int FROM push_commits) AS pc`.execute(t.db)
      ).rows[0];
    expect(await totals()).toEqual({ c: 23, pc: 23 });
    const again = await importFile(
      deps(),
      localFileSource(f),
      { scope: 'all', sourceId: null, gapId: null },
      { force: true },
    );
    expect(again.outcome).toBe('completed');
    expect(await totals()).toEqual({ c: 23, pc: 23 });
  });
});

describe('storeCommits', () => {
  const key = {
    repositoryId: '77',
    ref: 'refs/heads/main',
    before: 'b'.repeat(40),
    head: 'c'.repeat(40),
  };
  beforeEach(async () => {
    await sql`
      INSERT INTO push_events (actor_id, repository_id, ref, head, before, created_at, payload)
      VALUES (1, 77, ${key.ref}, ${key.head}, ${key.before}, now(), '{}')`.execute(t.db);
  });

  it.each([
    ['hash', hashOf('Mona@Example.COM')],
    ['keep', ' Mona@Example.COM '],
    ['drop', null],
  ] as const)('COMMIT_EMAILS=%s', async (emails, stored) => {
    await storeCommits(
      t.db,
      [
        {
          push: key,
          commits: [
            {
              sha: 'a'.repeat(40),
              authorEmail: ' Mona@Example.COM ',
              committerEmail: ' Mona@Example.COM ',
            },
          ],
        },
      ],
      { emails },
    );
    const r = await sql<{ author_email: string | null; committer_email: string | null }>`
      SELECT author_email, committer_email FROM commits`.execute(t.db);
    expect(r.rows).toEqual([{ author_email: stored, committer_email: stored }]);
  });

  it('fills what a richer answer adds, never rewrites what is held, and makes known authors actors', async () => {
    const sha1 = 'e'.repeat(40);
    const first = await storeCommits(
      t.db,
      [{ push: key, commits: [{ sha: sha1, authorName: 'Inline', message: 'first words' }] }],
      { emails: 'hash' },
    );
    expect(first).toEqual({ commits: 1, pushCommits: 1, newActors: 0 });
    const again = await storeCommits(
      t.db,
      [
        {
          push: key,
          commits: [
            {
              sha: sha1,
              authorName: 'Compare',
              message: 'other words',
              authorId: '583231',
              authorLogin: 'octocat',
              authoredAt: new Date('2026-11-30T10:00:00Z'),
              parents: ['f'.repeat(40)],
            },
          ],
        },
      ],
      { emails: 'hash' },
    );
    expect(again).toEqual({ commits: 0, pushCommits: 0, newActors: 1 });
    const c = await sql<Record<string, unknown>>`
      SELECT author_name, message, author_id::text, author_login, authored_at, parents FROM commits`.execute(
      t.db,
    );
    expect(c.rows).toEqual([
      {
        author_name: 'Inline',
        message: 'first words',
        author_id: '583231',
        author_login: 'octocat',
        authored_at: new Date('2026-11-30T10:00:00Z'),
        parents: ['f'.repeat(40)],
      },
    ]);
    const a = await sql<{ login: string; enrichment_state: string }>`
      SELECT login, enrichment_state FROM actors WHERE id = 583231`.execute(t.db);
    expect(a.rows).toEqual([{ login: 'octocat', enrichment_state: 'pending' }]);
  });

  it('writes no push_commits row for a push that is not stored', async () => {
    const r = await storeCommits(
      t.db,
      [{ push: { ...key, head: '9'.repeat(40) }, commits: [{ sha: '1'.repeat(40) }] }],
      { emails: 'hash' },
    );
    expect(r).toEqual({ commits: 1, pushCommits: 0, newActors: 0 });
  });
});
