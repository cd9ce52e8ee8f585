import { createHash } from 'node:crypto';
import { sql } from 'kysely';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { fetchCycle } from '../../src/commits/cycle.ts';
import { fetchOnce } from '../../src/commits/fetch-rest.ts';
import {
  chain,
  commitFetchers,
  freshCommitWorld,
  insertPushes,
  insertRepository,
  newSha,
  pushShas,
  pushState,
  ZERO,
} from '../support/commit-world.ts';
import { useTestDatabase } from '../support/db.ts';
import { memoryLogger } from '../support/github-client.ts';
import { movedMainWorld } from '../support/moved-main.ts';
import { useFakeGitHub } from '../support/use-fake-github.ts';

/** The commits fetcher against the fake GitHub's compare endpoint (ADR 0071). */

const t = useTestDatabase();
const fake = useFakeGitHub();
const { fetcher, close } = commitFetchers(t, fake, {
  env: { ENRICH_MAX_ATTEMPTS: '3' },
  responseTimeoutMs: 400,
  workerId: 'test-fetcher',
});

beforeEach(async () => {
  await freshCommitWorld(t.db, fake);
});
afterEach(close);

const compares = () => fake.requests.filter((r) => r.path.includes('/compare/'));

async function count(table: 'commits' | 'push_commits'): Promise<number> {
  const r = await sql<{ n: string }>`SELECT count(*) AS n FROM ${sql.table(table)}`.execute(t.db);
  return Number(r.rows[0]!.n);
}

describe('fetching a push', () => {
  it('stores a complete push: its commits in order, emails hashed, authors as actors', async () => {
    const { logger, lines } = memoryLogger('info');
    const deps = fetcher({ logger });
    await insertRepository(t.db, 10, 'octo/one');
    const [root, ...rest] = chain(fake, 'octo/one', 4);
    await insertPushes(t.db, [{ repositoryId: 10, before: root!, head: rest[2]! }]);

    const r = await fetchOnce(deps);
    expect(r).toMatchObject({ outcome: 'complete', commitCount: 3, stored: 3, requests: 1 });
    expect(await pushState(t.db, rest[2]!)).toMatchObject({
      commits_state: 'complete',
      commit_count: 3,
      commits_claimed_until: null,
    });
    expect(await pushShas(t.db, rest[2]!)).toEqual(
      rest.map((sha, position) => ({ position, sha })),
    );
    const c = await sql<{
      author_email: string;
      author_id: string;
      message: string;
      parents: string[];
    }>`
      SELECT author_email, author_id::text, message, parents FROM commits WHERE sha = ${rest[0]!}`.execute(
      t.db,
    );
    // sha256 of the trimmed, lower-cased address: never the address itself
    const hashed = `sha256:${createHash('sha256').update('dev1@example.com').digest('hex')}`;
    expect(c.rows[0]).toEqual({
      author_email: hashed,
      author_id: '7001',
      message: `change 1\n\nbody of ${rest[0]}`,
      parents: [root],
    });
    expect(c.rows[0]!.author_email).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(c.rows[0]!.author_email).not.toContain('xample');
    const actors = await sql<{ id: string }>`SELECT id::text FROM actors ORDER BY id`.execute(t.db);
    expect(actors.rows.map((a) => a.id)).toEqual(['7001', '7002', '7003']);
    expect(compares()).toHaveLength(1);
    expect(compares()[0]!.path).toBe(`/repos/octo/one/compare/${root}...${rest[2]}`);
    const ledger = await sql<{ purpose: string }>`SELECT purpose FROM github_requests`.execute(
      t.db,
    );
    expect(ledger.rows).toEqual([{ purpose: 'commits' }]);
    const logged = lines.map((l) => JSON.parse(l)).find((l) => l.event === 'commits.fetched');
    expect(logged).toMatchObject({
      repo: 'octo/one',
      repository_id: '10',
      ref: 'refs/heads/main',
      before: root,
      head: rest[2],
      count: 3,
      state: 'complete',
    });
    expect(logged.request_id).toEqual(expect.any(Number));
    expect(await fetchOnce(deps)).toMatchObject({ outcome: 'idle', requests: 0 });
  });

  it('a push over the cap is partial with its true count: the newest 250, one request', async () => {
    const deps = fetcher();
    await insertRepository(t.db, 11, 'octo/big');
    const shas = chain(fake, 'octo/big', 301);
    await insertPushes(t.db, [{ repositoryId: 11, before: shas[0]!, head: shas[300]! }]);

    expect(await fetchOnce(deps)).toMatchObject({
      outcome: 'partial',
      commitCount: 300,
      stored: 250,
      requests: 1,
    });
    expect(await pushState(t.db, shas[300]!)).toMatchObject({
      commits_state: 'partial',
      commit_count: 300,
    });
    const rows = await pushShas(t.db, shas[300]!);
    expect(rows).toHaveLength(250);
    // positions are the commits' places in the push: the oldest 50 are the ones missing
    expect(rows[0]).toEqual({ position: 50, sha: shas[51] });
    expect(rows.at(-1)).toEqual({ position: 299, sha: shas[300] });
    expect(compares()[0]!.query).toEqual({});
  });

  it('COMMITS_MAX_PER_PUSH below 250 keeps the newest that many', async () => {
    const deps = fetcher({ env: { COMMITS_MAX_PER_PUSH: '10' } });
    await insertRepository(t.db, 12, 'octo/cap');
    const shas = chain(fake, 'octo/cap', 31);
    await insertPushes(t.db, [{ repositoryId: 12, before: shas[0]!, head: shas[30]! }]);
    expect(await fetchOnce(deps)).toMatchObject({
      outcome: 'partial',
      commitCount: 30,
      stored: 10,
    });
    const rows = await pushShas(t.db, shas[30]!);
    expect(rows.map((r) => r.position)).toEqual([20, 21, 22, 23, 24, 25, 26, 27, 28, 29]);
  });

  it('a cap above 250 pages chronologically, 100 a page, one reservation each', async () => {
    const deps = fetcher({ env: { COMMITS_MAX_PER_PUSH: '1000' } });
    await insertRepository(t.db, 13, 'octo/paged');
    const shas = chain(fake, 'octo/paged', 231);
    await insertPushes(t.db, [{ repositoryId: 13, before: shas[0]!, head: shas[230]! }]);
    expect(await fetchOnce(deps)).toMatchObject({
      outcome: 'complete',
      commitCount: 230,
      stored: 230,
      requests: 3,
    });
    expect(compares().map((r) => r.query)).toEqual([
      { per_page: '100', page: '1' },
      { per_page: '100', page: '2' },
      { per_page: '100', page: '3' },
    ]);
    expect(await pushShas(t.db, shas[230]!)).toEqual(
      shas.slice(1).map((sha, position) => ({ position, sha })),
    );
    const ledger = await sql<{ n: string }>`
      SELECT count(*) AS n FROM github_requests WHERE purpose = 'commits'`.execute(t.db);
    expect(Number(ledger.rows[0]!.n)).toBe(3);
  });

  it('404 makes the push gone, and it is never asked again', async () => {
    const deps = fetcher();
    await insertRepository(t.db, 14, 'octo/gone');
    const [root] = chain(fake, 'octo/gone', 1);
    await insertPushes(t.db, [{ repositoryId: 14, before: root!, head: newSha() }]);
    expect(await fetchOnce(deps)).toMatchObject({ outcome: 'gone', status: 404, requests: 1 });
    deps.clock.advance(7 * 86400_000);
    expect(await fetchOnce(deps)).toMatchObject({ outcome: 'idle' });
    expect(compares()).toHaveLength(1);
    const r = await sql<{ commits_state: string }>`SELECT commits_state FROM push_events`.execute(
      t.db,
    );
    expect(r.rows).toEqual([{ commits_state: 'gone' }]);
  });

  it('5xx climbs the retry ladder and ends failed after the last attempt', async () => {
    const { logger, lines } = memoryLogger('info');
    const deps = fetcher({ logger });
    await insertRepository(t.db, 15, 'octo/flaky');
    const shas = chain(fake, 'octo/flaky', 3);
    await insertPushes(t.db, [{ repositoryId: 15, before: shas[0]!, head: shas[2]! }]);
    fake.fail({ path: /\/compare\//, status: 502, times: Number.POSITIVE_INFINITY });

    const first = await fetchOnce(deps);
    expect(first).toMatchObject({ outcome: 'retry', status: 502 });
    expect(await fetchOnce(deps)).toMatchObject({ outcome: 'idle' }); // backing off
    deps.clock.set(new Date(first.retryAt!.getTime() + 1000));
    const second = await fetchOnce(deps);
    expect(second).toMatchObject({ outcome: 'retry' });
    deps.clock.set(new Date(second.retryAt!.getTime() + 1000));
    expect(await fetchOnce(deps)).toMatchObject({ outcome: 'failed' });
    deps.clock.advance(86400_000);
    expect(await fetchOnce(deps)).toMatchObject({ outcome: 'idle' });
    expect(compares()).toHaveLength(3);
    expect(await pushState(t.db, shas[2]!)).toMatchObject({
      commits_state: 'failed',
      commits_attempts: 3,
    });
    const failed = lines.map((l) => JSON.parse(l)).filter((l) => l.event === 'commits.failed');
    expect(failed.map((l) => l.will_retry)).toEqual([true, true, false]);
    expect(await count('push_commits')).toBe(0);
  });

  it('a 200 with an unusable body logs its real status, not null', async () => {
    const { logger, lines } = memoryLogger('info');
    const deps = fetcher({ logger });
    await insertRepository(t.db, 16, 'octo/garbled');
    const shas = chain(fake, 'octo/garbled', 3);
    await insertPushes(t.db, [{ repositoryId: 16, before: shas[0]!, head: shas[2]! }]);
    // JSON, but not a comparison; then not JSON at all.
    fake.fail({ path: /\/compare\//, status: 200, body: '{"status":"ahead"}' });
    fake.fail({ path: /\/compare\//, status: 200, body: '<html>oops</html>' });
    const first = await fetchOnce(deps);
    expect(first).toMatchObject({ outcome: 'retry', status: 200 });
    deps.clock.set(new Date(first.retryAt!.getTime() + 1000));
    expect(await fetchOnce(deps)).toMatchObject({ outcome: 'retry', status: 200 });
    const failed = lines.map((l) => JSON.parse(l)).filter((l) => l.event === 'commits.failed');
    expect(failed.map((l) => l.status)).toEqual([200, 200]);
  });

  it('a deleted ref or a tag sends no request', async () => {
    const deps = fetcher();
    await insertRepository(t.db, 16, 'octo/refs');
    const shas = chain(fake, 'octo/refs', 2);
    await insertPushes(t.db, [
      // as store time leaves them
      { repositoryId: 16, ref: 'refs/heads/old', before: shas[1]!, head: ZERO, state: 'none' },
      // and, defensively, as a stray pending row would be
      { repositoryId: 16, ref: 'refs/heads/gone', before: shas[1]!, head: ZERO },
      { repositoryId: 16, ref: 'refs/tags/v1', before: ZERO, head: shas[1]! },
    ]);
    const s = await fetchCycle(deps);
    expect(s.outcomes).toMatchObject({ none: 2, complete: 0 });
    expect(s.requests).toBe(0);
    expect(fake.requests).toHaveLength(0);
    const r = await sql<{ commits_state: string; commit_count: number | null }>`
      SELECT commits_state, commit_count FROM push_events ORDER BY ref`.execute(t.db);
    expect(r.rows).toEqual([
      { commits_state: 'none', commit_count: 0 },
      { commits_state: 'none', commit_count: null },
      { commits_state: 'none', commit_count: 0 },
    ]);
  });
});

describe('ranges', () => {
  it('a chain of pushes on one branch: each push holds its own range, in order', async () => {
    const deps = fetcher();
    await insertRepository(t.db, 20, 'octo/chain');
    const shas = chain(fake, 'octo/chain', 8);
    await insertPushes(t.db, [
      { repositoryId: 20, before: shas[0]!, head: shas[2]! },
      { repositoryId: 20, before: shas[2]!, head: shas[3]! },
      { repositoryId: 20, before: shas[3]!, head: shas[7]! },
    ]);
    const s = await fetchCycle(deps);
    expect(s.outcomes.complete).toBe(3);
    expect(await pushShas(t.db, shas[2]!)).toEqual([
      { position: 0, sha: shas[1] },
      { position: 1, sha: shas[2] },
    ]);
    expect(await pushShas(t.db, shas[3]!)).toEqual([{ position: 0, sha: shas[3] }]);
    expect((await pushShas(t.db, shas[7]!)).map((r) => r.sha)).toEqual(shas.slice(4));
    expect(await count('commits')).toBe(7);
  });

  it('a new branch is compared against the default branch', async () => {
    const deps = fetcher();
    await insertRepository(t.db, 21, 'octo/branchy', { defaultBranch: 'trunk' });
    const trunk = chain(fake, 'octo/branchy', 3, null, { branch: 'trunk' });
    const topic = chain(fake, 'octo/branchy', 2, trunk[2]!);
    await insertPushes(t.db, [
      { repositoryId: 21, ref: 'refs/heads/topic', before: ZERO, head: topic[1]! },
    ]);
    // No record of trunk's tip when the branch was pushed: its tip now is the base, and the
    // answer is only what the branch has beyond trunk today — partial, count unknown.
    expect(await fetchOnce(deps)).toMatchObject({ outcome: 'partial', stored: 2 });
    expect(await pushState(t.db, topic[1]!, 'refs/heads/topic')).toMatchObject({
      commits_state: 'partial',
      commit_count: null,
    });
    expect(compares()[0]!.path).toBe(`/repos/octo/branchy/compare/trunk...${topic[1]}`);
    expect((await pushShas(t.db, topic[1]!, 'refs/heads/topic')).map((r) => r.sha)).toEqual(topic);
  });

  it('a new branch merged before the fetch: against the tip at push time (stored pushes prove it), never complete with 0', async () => {
    const deps = fetcher();
    await insertRepository(t.db, 31, 'octo/merged', { defaultBranch: 'main' });
    const main = chain(fake, 'octo/merged', 3, null, { branch: 'main' });
    const topic = chain(fake, 'octo/merged', 2, main[2]!);
    const merge = newSha();
    fake.addCommits('octo/merged', [{ sha: merge, parents: [main[2]!, topic[1]!] }]);
    fake.setBranch('octo/merged', 'main', merge);
    const at = (s: number) => new Date(Date.now() - s * 1000);
    await insertPushes(t.db, [
      { repositoryId: 31, ref: 'refs/heads/topic', before: ZERO, head: topic[1]!, dueAt: at(60) },
    ]);
    // without a record of main at push time: main now holds the branch (behind) → partial, 0 rows
    expect(await fetchOnce(deps)).toMatchObject({ outcome: 'partial', stored: 0 });
    expect(await pushState(t.db, topic[1]!, 'refs/heads/topic')).toMatchObject({
      commits_state: 'partial',
      commit_count: null,
    });
    // with the pushes to main before and after it stored, main's tip then is proven: exact
    await sql`DELETE FROM push_events`.execute(t.db);
    await insertPushes(t.db, [
      { repositoryId: 31, before: main[1]!, head: main[2]!, state: 'skipped', dueAt: at(120) },
      { repositoryId: 31, ref: 'refs/heads/topic', before: ZERO, head: topic[1]!, dueAt: at(60) },
      { repositoryId: 31, before: main[2]!, head: merge, state: 'skipped', dueAt: at(30) },
    ]);
    expect(await fetchOnce(deps)).toMatchObject({ outcome: 'complete', commitCount: 2 });
    expect(compares().at(-1)!.path).toBe(`/repos/octo/merged/compare/${main[2]}...${topic[1]}`);
    expect((await pushShas(t.db, topic[1]!, 'refs/heads/topic')).map((r) => r.sha)).toEqual(topic);
  });

  for (const after of ['nothing', 'rewritten'] as const) {
    it(`a new branch pushed after main moved past its last stored push (main ${after === 'nothing' ? 'kept' : 'rewritten'} after): only the branch's commits, never main's`, async () => {
      const deps = fetcher();
      const w = await movedMainWorld(t.db, fake, { id: 34, fullName: 'octo/moved', after });
      const r = await fetchOnce(deps);
      expect(r).toMatchObject({ outcome: 'partial', stored: 4 });
      expect(r.commitCount).toBeUndefined();
      expect(await pushState(t.db, w.head, w.ref)).toMatchObject({
        commits_state: 'partial',
        commit_count: null,
      });
      const shas = (await pushShas(t.db, w.head, w.ref)).map((x) => x.sha);
      expect(shas).toEqual(w.topic);
      for (const sha of [...w.stored, ...w.moved]) expect(shas).not.toContain(sha);
      // against main's tip now, then against each tip the stored pushes show around the push
      const bases = compares().map((c) => c.path.split('/compare/')[1]!.split('...')[0]);
      expect(bases).toEqual(
        after === 'nothing' ? ['main', w.stored[2]] : ['main', w.stored[2], w.moved[1]],
      );
    });
  }

  it('a 404 against the default branch refreshes the repository profile and retries once', async () => {
    const deps = fetcher();
    await insertRepository(t.db, 32, 'octo/renamed', { defaultBranch: 'master' });
    const main = chain(fake, 'octo/renamed', 2, null, { branch: 'main' });
    const topic = chain(fake, 'octo/renamed', 1, main[1]!);
    await insertPushes(t.db, [
      { repositoryId: 32, ref: 'refs/heads/topic', before: ZERO, head: topic[0]! },
    ]);
    const first = await fetchOnce(deps);
    expect(first).toMatchObject({ outcome: 'waiting', status: 404 });
    expect(await pushState(t.db, topic[0]!, 'refs/heads/topic')).toMatchObject({
      commits_state: 'pending',
    });
    const repo = await sql<{ state: string; due: boolean }>`
      SELECT enrichment_state AS state, next_attempt_at <= ${deps.clock.now()} AS due
      FROM repositories WHERE id = 32`.execute(t.db);
    expect(repo.rows[0]).toEqual({ state: 'pending', due: true });
    // the profile says main now: the retry compares against it
    await sql`UPDATE repositories SET default_branch = 'main', enrichment_state = 'enriched' WHERE id = 32`.execute(
      t.db,
    );
    deps.clock.set(first.retryAt!);
    expect(await fetchOnce(deps)).toMatchObject({ outcome: 'partial', stored: 1 });
    // a second 404 (the profile did not change it) is gone
    await insertRepository(t.db, 33, 'octo/nomaster', { defaultBranch: 'master' });
    chain(fake, 'octo/nomaster', 1, null, { branch: 'main' });
    const t2 = chain(fake, 'octo/nomaster', 1, null);
    await insertPushes(t.db, [
      { repositoryId: 33, ref: 'refs/heads/x', before: ZERO, head: t2[0]! },
    ]);
    const w = await fetchOnce(deps);
    expect(w).toMatchObject({ outcome: 'waiting' });
    deps.clock.set(w.retryAt!);
    expect(await fetchOnce(deps)).toMatchObject({ outcome: 'gone' });
  });

  it('a new branch waits for the repository profile when the default branch is unknown', async () => {
    const deps = fetcher();
    await insertRepository(t.db, 22, 'octo/unprofiled', { defaultBranch: null, state: 'pending' });
    const main = chain(fake, 'octo/unprofiled', 2, null, { branch: 'main' });
    const topic = chain(fake, 'octo/unprofiled', 1, main[1]!);
    await insertPushes(t.db, [
      { repositoryId: 22, ref: 'refs/heads/topic', before: ZERO, head: topic[0]! },
    ]);
    const r = await fetchOnce(deps);
    expect(r).toMatchObject({ outcome: 'waiting', requests: 0 });
    expect(fake.requests).toHaveLength(0);
    // the repository's enrichment is due now (it was an hour away), so its profile comes first
    const repo = await sql<{ due: boolean }>`
      SELECT next_attempt_at <= ${deps.clock.now()} AS due FROM repositories WHERE id = 22`.execute(
      t.db,
    );
    expect(repo.rows[0]!.due).toBe(true);
    expect(await fetchOnce(deps)).toMatchObject({ outcome: 'idle' });
    // ... enrichment stores the profile; the push is tried again after its wait
    await sql`UPDATE repositories SET default_branch = 'main', enrichment_state = 'enriched'
      WHERE id = 22`.execute(t.db);
    deps.clock.set(r.retryAt!);
    // against main's tip now (no record of it at push time): partial, count unknown
    expect(await fetchOnce(deps)).toMatchObject({ outcome: 'partial', stored: 1 });
    expect(await pushState(t.db, topic[0]!, 'refs/heads/topic')).toMatchObject({
      commits_attempts: 1,
    });
  });

  it('the same commit pushed to two branches is one commits row and two push_commits rows', async () => {
    const deps = fetcher();
    await insertRepository(t.db, 23, 'octo/twice');
    const shas = chain(fake, 'octo/twice', 4);
    await insertPushes(t.db, [
      { repositoryId: 23, ref: 'refs/heads/a', before: shas[0]!, head: shas[3]! },
      { repositoryId: 23, ref: 'refs/heads/b', before: shas[0]!, head: shas[3]! },
    ]);
    expect((await fetchCycle(deps)).outcomes.complete).toBe(2);
    expect(await count('commits')).toBe(3);
    expect(await count('push_commits')).toBe(6);
  });
});

describe('fairness across repositories', () => {
  it('a repository pushing 10,000 times does not starve the others', async () => {
    const deps = fetcher();
    await insertRepository(t.db, 30, 'flood/repo');
    const flood = chain(fake, 'flood/repo', 2);
    const old = new Date(Date.now() - 3600_000);
    // The flood came first: every one of its pushes is older than the others'.
    await sql`
      INSERT INTO push_events (actor_id, repository_id, ref, before, head, created_at, payload,
        commits_state, commits_next_attempt_at)
      SELECT 1, 30, 'refs/heads/f' || i, ${flood[0]!}, ${flood[1]!}, ${old}::timestamptz,
        '{}', 'pending', ${old}::timestamptz + make_interval(secs => i / 1000.0)
      FROM generate_series(1, 10000) AS i`.execute(t.db);
    const others = [31, 32, 33];
    const heads: string[] = [];
    for (const id of others) {
      await insertRepository(t.db, id, `small/r${id}`);
      const s = chain(fake, `small/r${id}`, 2);
      heads.push(s[1]!);
      await insertPushes(t.db, [{ repositoryId: id, before: s[0]!, head: s[1]! }]);
    }
    const served: string[] = [];
    for (let i = 0; i < 8; i++) {
      const r = await fetchOnce(deps);
      expect(r.outcome).toBe('complete');
      served.push(r.push!.repositoryId);
    }
    // Every small repository within the first four turns; then the flood has the budget.
    expect(new Set(served.slice(0, 4))).toEqual(new Set(['30', '31', '32', '33']));
    for (const h of heads) expect((await pushState(t.db, h)).commits_state).toBe('complete');
  });
});
