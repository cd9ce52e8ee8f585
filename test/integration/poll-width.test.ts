import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createGitHubClient } from '../../src/budget/client.ts';
import { GITHUB_API_VERSION } from '../../src/github/transport.ts';
import { createLogger } from '../../src/platform/log.ts';
import { pollDueSources, pollsInFlight } from '../../src/poll/poll-due.ts';
import { useTestDatabase } from '../support/db.ts';
import { type FakeGitHub, startFakeGitHub } from '../support/fake-github.ts';
import { randomToken, testConfig } from '../support/github-client.ts';

/**
 * ADR 0140: a round polls as wide as its plan (two polls a credential), with one poll a
 * credential at a gate: the others wait for their ticket holding nothing, so every request
 * is held by its own poll (ADR 0082) — none goes through a gate's own connection — and a 304
 * still costs two commits. Measured with this file's database alone (its own sessions).
 */

const t = useTestDatabase();
const SOURCES = 60;
let fake: FakeGitHub;

beforeAll(async () => {
  fake = await startFakeGitHub({ latencyMs: 5, endpointRatePerMinute: 900 });
});
afterAll(async () => {
  await fake?.close();
});

async function commits(): Promise<number> {
  await sql`SELECT pg_stat_force_next_flush()`.execute(t.db);
  const r = await sql<{ n: string }>`
    SELECT xact_commit AS n FROM pg_stat_database WHERE datname = current_database()`.execute(t.db);
  return Number(r.rows[0]!.n);
}

/** Sessions of this database under an application name (the gate's own connections: gpi-gate). */
async function sessions(name: string): Promise<number> {
  const r = await sql<{ n: string }>`
    SELECT count(*) AS n FROM pg_stat_activity
    WHERE datname = current_database() AND application_name = ${name}`.execute(t.db);
  return Number(r.rows[0]!.n);
}

describe('a round as wide as its plan', () => {
  it('3 tokens, 60 sources, all 304: six polls at once, every request held, two commits a 304', async () => {
    const tokens = [randomToken(), randomToken(), randomToken()];
    const probe = await fetch(`${fake.url}/repos/width/probe/events?per_page=100&page=1`, {
      headers: { authorization: `token ${tokens[0]}`, 'x-github-api-version': GITHUB_API_VERSION },
    });
    await probe.arrayBuffer();
    const etag = probe.headers.get('etag');
    fake.reset();
    await sql`
      INSERT INTO event_sources (kind, target, mode, commits_enabled, etag, next_poll_at)
      SELECT 'repo', 'width/repo-' || g, 'live', false, ${etag}, now() - interval '1 minute'
      FROM generate_series(1, ${SOURCES}::int) g`.execute(t.db);
    const config = testConfig(t, {
      apiUrl: fake.url,
      token: null,
      env: { GITHUB_TOKENS: tokens.join(',') },
    });
    const logger = createLogger('silent');
    const pool = t.newPool(20);
    const { createDb } = await import('../../src/platform/db/pool.ts');
    const db = createDb(pool);
    const github = createGitHubClient({ config, db, databaseUrl: t.url, logger });
    const deps = { config, db, pool, github, logger, workerId: 'test:width' };
    try {
      expect(pollsInFlight(deps)).toBe(6);
      const sessionsBefore = pool.totalCount;
      const before = await commits();
      const summaries = await pollDueSources(deps);
      // A new session commits its setup once (src/platform/db/pool.ts SESSION_SETUP): not a poll's.
      const opened = pool.totalCount - sessionsBefore;
      // What this measuring commits itself (the flush and the read), with nothing between.
      const idle = (await commits()) - (await commits());
      const spent = (await commits()) - before + idle;
      expect(summaries.map((s) => s.outcome)).toEqual(Array(SOURCES).fill('not_modified'));
      // No request went through a gate's own connection: every one rode in its poll's session.
      expect(await sessions('gpi-gate')).toBe(0);
      // Two a 304, plus the round's due read and this test's own two reads, and the setup of
      // each session the round opened.
      expect(opened).toBeLessThanOrEqual(7);
      expect(spent).toBeLessThanOrEqual(2 * SOURCES + 3 + opened);
      expect(fake.secondaryLimitHits).toBe(0);
      for (const n of Object.values(fake.maxInFlightByCredential)) expect(n).toBe(1);
    } finally {
      await github.close();
      await db.destroy();
    }
  });
});
