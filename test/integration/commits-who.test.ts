import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { type ByteSource, localFileSource } from '../../src/backfill/archive.ts';
import { importFile } from '../../src/backfill/import.ts';
import type { ImportTarget } from '../../src/backfill/import-types.ts';
import type { GitHubClient } from '../../src/budget/client-types.ts';
import { fetchCycle } from '../../src/commits/cycle.ts';
import { pollSource } from '../../src/poll/poll-source.ts';
import { addSource, setSourceCommits } from '../../src/store/sources.ts';
import { gzipLines } from '../support/archive-server.ts';
import { useTestDatabase } from '../support/db.ts';
import { type FakeGitHub, startFakeGitHub } from '../support/fake-github.ts';
import { clientFactory, memoryLogger, testConfig } from '../support/github-client.ts';
import { type GitHubEvent, pushEvent } from '../support/github-factories.ts';
import { spendRows } from '../support/ledger-factories.ts';
import { deliver, pushPayload, startTestWeb, type TestWeb } from '../support/web.ts';

// Who gets commits (ADR 0112): a push of any origin — a poll, a webhook
// delivery, bin/backfill, a gap fill, another instance's archive — is pending (due now) when
// an enabled source with commits on covers it; the public source covers every public push.
// Covered only by sources whose commits are off, it is skipped; covered, but stored by a
// process without a credential, it is skipped with a next attempt: it waits for one
// (ADR 0186). Each origin runs its real store path against Postgres.

const t = useTestDatabase();
const clients = clientFactory(t);
let fake: FakeGitHub;
let web: TestWeb;
let anonymousWeb: TestWeb;
let dir: string;

const COVERED = 'covered-owner/covered';

beforeAll(async () => {
  fake = await startFakeGitHub();
  web = await startTestWeb(t);
  anonymousWeb = await startTestWeb(t, { mode: 'live' });
  dir = mkdtempSync(path.join(tmpdir(), 'gpi-commits-who-'));
});
afterAll(async () => {
  await web?.close();
  await anonymousWeb?.close();
  await fake?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});
beforeEach(async () => {
  fake.reset();
  await sql`TRUNCATE push_events, stored_commits, webhook_deliveries, actors, repositories,
    event_sources, backfill_files CASCADE`.execute(t.db);
});
afterEach(async () => {
  await clients.closeAll();
});

/**
 * The sources of a case. Every case has a public source (it is the one polled); `public`
 * turns its commits on. `repo` adds a repo source for COVERED with commits on or off, and an
 * org source for its owner, off, so an off source covering the push is there too.
 */
async function sources(o: { public: boolean; repo?: 'on' | 'off' }): Promise<number> {
  const pub = (await addSource(t.db, { kind: 'public' }, 'live')).source;
  if (!o.public) await setSourceCommits(t.db, Number(pub.id), false);
  if (o.repo) {
    const repo = (await addSource(t.db, { kind: 'repo', target: COVERED }, 'live')).source;
    if (o.repo === 'off') await setSourceCommits(t.db, Number(repo.id), false);
    const org = (await addSource(t.db, { kind: 'org', target: 'covered-owner' }, 'live')).source;
    await setSourceCommits(t.db, Number(org.id), false);
  }
  return Number(pub.id);
}

interface Stored {
  commits_state: string;
  due: boolean;
}

async function stateOf(repositoryId: number | string): Promise<Stored> {
  const r = await sql<Stored & { origin: string }>`
    SELECT commits_state, commits_next_attempt_at IS NOT NULL AS due, origin
    FROM push_events WHERE repository_id = ${String(repositoryId)}`.execute(t.db);
  expect(r.rows).toHaveLength(1);
  const { commits_state, due } = r.rows[0]!;
  return { commits_state, due };
}

const PENDING: Stored = { commits_state: 'pending', due: true };
const SKIPPED: Stored = { commits_state: 'skipped', due: false };
/** Covered, stored by a process without a credential: skipped with a next attempt, waiting for one. */
const AWAITING: Stored = { commits_state: 'skipped', due: true };

/** A post-2025-10 push (no commits in it): to COVERED, or to a stranger's repository. */
function event(o: { covered: boolean; private?: boolean }): GitHubEvent {
  return pushEvent({
    ...(o.covered ? { repo: { name: COVERED } } : {}),
    ...(o.private ? { public: false } : {}),
  });
}
const repoIdOf = (ev: GitHubEvent) => (ev.repo as { id: number }).id;

// --- the origins, each by its real path ----------------------------------------------------

async function byPoll(
  publicId: number,
  evs: GitHubEvent[],
  anonymous: boolean,
  client?: GitHubClient,
) {
  fake.addEvents('public', evs);
  const token = anonymous ? null : undefined;
  const config = testConfig(t, { apiUrl: fake.url, token });
  const github = client ?? clients.make({ apiUrl: fake.url, token });
  const run = await pollSource(
    {
      config,
      db: t.db,
      pool: t.pool,
      github,
      logger: memoryLogger('silent').logger,
      workerId: 'test-host:1',
    },
    publicId,
    { force: true },
  );
  expect(run).toMatchObject({ outcome: 'completed', eventsCreated: evs.length });
}

/** A delivery of 2,048 commits: GitHub's cap, so not all of them; its count is unknown. */
async function byWebhook(o: { covered: boolean; private?: boolean }, anonymous: boolean) {
  const p = pushPayload({ commits: 2048, ...(o.covered ? { fullName: COVERED } : {}) });
  const body = { ...p, repository: { ...p.repository, private: o.private === true } };
  const res = await deliver((anonymous ? anonymousWeb : web).url, {
    deliveryId: `d-${p.after}`,
    body: JSON.stringify(body),
  });
  expect(res.status).toBe(202);
  return p.repository.id;
}

type ArchiveOrigin = 'backfill' | 'gap fill' | "another instance's archive";
let fileSeq = 0;

async function byArchive(
  origin: ArchiveOrigin,
  publicId: number,
  evs: GitHubEvent[],
  anonymous: boolean,
) {
  const file = path.join(dir, `hour-${++fileSeq}.json.gz`);
  writeFileSync(file, gzipLines(evs));
  const local = localFileSource(file);
  // Another instance serves its store as a GH Archive (ADR 0130): a mirror of its own.
  const source: ByteSource =
    origin === "another instance's archive"
      ? {
          ...local,
          key: `2026-11-20-${fileSeq}`,
          label: `http://other.example/2026-11-20-${fileSeq}.json.gz`,
          mirror: 'http://other.example',
          hour: null,
        }
      : local;
  // A gap fill reads the hour for a gap of the polled source (src/backfill/fill.ts).
  const gap =
    origin === 'gap fill'
      ? await t.db
          .insertInto('gaps')
          .values({
            source_id: String(publicId),
            from_at: new Date(Date.now() - 3_600_000),
            to_at: new Date(),
            next_attempt_at: new Date(),
          })
          .returning('id')
          .executeTakeFirstOrThrow()
      : null;
  const target: ImportTarget = gap
    ? { scope: `gap:${gap.id}`, sourceId: publicId, gapId: Number(gap.id) }
    : { scope: 'all', sourceId: null, gapId: null };
  const token = anonymous ? null : undefined;
  const r = await importFile(
    {
      pool: t.pool,
      db: t.db,
      config: testConfig(t, { apiUrl: fake.url, token }),
      logger: memoryLogger('silent').logger,
      workerId: 'test-host:1',
    },
    source,
    target,
  );
  expect(r.outcome).toBe('completed');
  expect(r.counts.created).toBe(evs.length);
  return r;
}

// --- the matrix -----------------------------------------------------------------------------

describe('a polled push', () => {
  it('is pending when the public source has commits on, unless its repository is private', async () => {
    const id = await sources({ public: true });
    const [stranger, hidden] = [
      event({ covered: false }),
      event({ covered: false, private: true }),
    ];
    await byPoll(id, [stranger, hidden], false);
    expect(await stateOf(repoIdOf(stranger))).toEqual(PENDING);
    expect(await stateOf(repoIdOf(hidden))).toEqual(SKIPPED);
  });

  it('is pending when a repo source with commits on covers it, private or not', async () => {
    const id = await sources({ public: false, repo: 'on' });
    const [hidden, stranger] = [event({ covered: true, private: true }), event({ covered: false })];
    await byPoll(id, [hidden, stranger], false);
    expect(await stateOf(repoIdOf(hidden))).toEqual(PENDING);
    expect(await stateOf(repoIdOf(stranger))).toEqual(SKIPPED);
  });

  it('is skipped when only sources with commits off cover it', async () => {
    const id = await sources({ public: false, repo: 'off' });
    const covered = event({ covered: true });
    await byPoll(id, [covered], false);
    expect(await stateOf(repoIdOf(covered))).toEqual(SKIPPED);
  });

  it('is skipped, waiting for a credential, by a process without one; not covered, plainly skipped', async () => {
    const id = await sources({ public: false, repo: 'on' });
    const [covered, stranger] = [event({ covered: true }), event({ covered: false })];
    await byPoll(id, [covered, stranger], true);
    expect(await stateOf(repoIdOf(covered))).toEqual(AWAITING);
    expect(await stateOf(repoIdOf(stranger))).toEqual(SKIPPED);
  });
});

describe('a webhook push that does not carry all its commits', () => {
  it('is pending when the public source has commits on, unless its repository is private', async () => {
    await sources({ public: true });
    expect(await stateOf(await byWebhook({ covered: false }, false))).toEqual(PENDING);
    // Not covered: what it carried is kept (partial), nothing is fetched.
    expect(await stateOf(await byWebhook({ covered: false, private: true }, false))).toEqual({
      commits_state: 'partial',
      due: false,
    });
  });

  it('is pending when a repo source with commits on covers it', async () => {
    await sources({ public: false, repo: 'on' });
    expect(await stateOf(await byWebhook({ covered: true, private: true }, false))).toEqual(
      PENDING,
    );
  });

  it('is not fetched when only sources with commits off cover it', async () => {
    await sources({ public: false, repo: 'off' });
    expect((await stateOf(await byWebhook({ covered: true }, false))).commits_state).toBe(
      'partial',
    );
  });

  it('is not fetched by a process without a credential: what it carried is kept', async () => {
    await sources({ public: true, repo: 'on' });
    expect(await stateOf(await byWebhook({ covered: true }, true))).toEqual({
      commits_state: 'partial',
      due: false,
    });
  });
});

const ARCHIVE_ORIGINS: ArchiveOrigin[] = ['backfill', 'gap fill', "another instance's archive"];

describe.each(ARCHIVE_ORIGINS)('a push read by %s', (origin) => {
  it('is pending, due now, when the public source has commits on', async () => {
    const id = await sources({ public: true });
    const evs = [event({ covered: false }), event({ covered: true })];
    const r = await byArchive(origin, id, evs, false);
    expect(r.commitsPending).toBe(2);
    for (const ev of evs) expect(await stateOf(repoIdOf(ev))).toEqual(PENDING);
  });

  it('is pending when a repo source with commits on covers it, and only then', async () => {
    const id = await sources({ public: false, repo: 'on' });
    const [covered, stranger] = [event({ covered: true }), event({ covered: false })];
    const r = await byArchive(origin, id, [covered, stranger], false);
    expect(r.commitsPending).toBe(1);
    expect(await stateOf(repoIdOf(covered))).toEqual(PENDING);
    expect(await stateOf(repoIdOf(stranger))).toEqual(SKIPPED);
  });

  it('is skipped when only sources with commits off cover it', async () => {
    const id = await sources({ public: false, repo: 'off' });
    const covered = event({ covered: true });
    expect((await byArchive(origin, id, [covered], false)).commitsPending).toBe(0);
    expect(await stateOf(repoIdOf(covered))).toEqual(SKIPPED);
  });

  it('is skipped, waiting for a credential, by a process without one', async () => {
    const id = await sources({ public: false, repo: 'on' });
    const [covered, stranger] = [event({ covered: true }), event({ covered: false })];
    expect((await byArchive(origin, id, [covered, stranger], true)).commitsPending).toBe(0);
    expect(await stateOf(repoIdOf(covered))).toEqual(AWAITING);
    expect(await stateOf(repoIdOf(stranger))).toEqual(SKIPPED);
  });
});

describe('the public backlog and the polls', () => {
  it('a poll still runs when commits have spent the background allowance, the backlog waiting', async () => {
    const id = await sources({ public: true });
    const github = clients.make({ apiUrl: fake.url });
    const backlog = Array.from({ length: 20 }, () => event({ covered: false }));
    await byPoll(id, backlog, false, github);
    const pending = async () =>
      Number(
        (
          await sql<{ n: string }>`
            SELECT count(*) AS n FROM push_events WHERE commits_state = 'pending'`.execute(t.db)
        ).rows[0]!.n,
      );
    expect(await pending()).toBe(20);
    // Commits have spent all but two requests of the background allowance this hour.
    const { allowance } = await github.budget();
    // Now, after the poll: inside the window GitHub's first answer to this token opened.
    await spendRows(t.db, github.credential, 'commits', allowance.enrich - 2, { ageSeconds: 0 });
    // REST compare: the transport that spends the REST window polls share (GraphQL batches
    // spend a window of their own, which polls never read: github-graphql.test.ts).
    const config = testConfig(t, { apiUrl: fake.url, env: { COMMITS_TRANSPORT: 'rest' } });
    const cycle = await fetchCycle({
      config,
      db: t.db,
      github,
      logger: memoryLogger('silent').logger,
      workerId: 'test-fetcher',
    });
    expect(cycle.requests).toBeLessThanOrEqual(2);
    expect(cycle.stoppedBy).not.toBe('idle');
    expect(await pending()).toBeGreaterThanOrEqual(18);
    // The poll's own allowance is whole: it polls, and what it stores is covered too.
    const more = [event({ covered: false }), event({ covered: false })];
    await byPoll(id, more, false, github);
    for (const ev of more) expect(await stateOf(repoIdOf(ev))).toEqual(PENDING);
    const after = await github.budget();
    expect(after.spent.poll).toBeGreaterThanOrEqual(2);
    expect(after.spent.commits).toBeLessThanOrEqual(allowance.enrich);
  });
});

describe('sources', () => {
  it('start with commits on, the public source included', async () => {
    await addSource(t.db, { kind: 'public' }, 'live');
    await addSource(t.db, { kind: 'user', target: 'mona' }, 'live');
    const r = await sql<{ kind: string; commits_enabled: boolean }>`
      SELECT kind, commits_enabled FROM event_sources ORDER BY kind`.execute(t.db);
    expect(r.rows).toEqual([
      { kind: 'public', commits_enabled: true },
      { kind: 'user', commits_enabled: true },
    ]);
  });
});
