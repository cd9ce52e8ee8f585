import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NO_CREDENTIAL_IN_USE } from '../../src/commits/deployment.ts';
import { commitsBacklogStatement, commitsStateCounts } from '../../src/status/commits.ts';
import { useTestDatabase } from '../support/db.ts';
import { explain, indexReads, seqScans } from '../support/plans.ts';
import { parsePrometheusText, sampleValue } from '../support/prometheus.ts';
import { startTestWeb, type TestWeb } from '../support/web.ts';

// Commits made visible: pushes by commits_state, the fetch backlog (pending
// and due), the fetch rate (commits requests in the last hour) and commits stored, the same
// numbers in GET /status, bin/status (text and --json), the HTML page and /metrics.

const t = useTestDatabase();
let web: TestWeb;
const BIN = path.resolve(import.meta.dirname, '../../bin/status');
const run = promisify(execFile);

// 3 pending (2 due, 1 later), 4 complete, 1 partial, 2 none, 5 skipped, 1 gone, 1 failed,
// 2 unverified (a mirror's commits: 1 covered and due, 1 that no source covers, never due).
const SEEDED: [state: string, n: number, when?: 'later' | 'never'][] = [
  ['pending', 2],
  ['pending', 1, 'later'],
  ['complete', 4],
  ['partial', 1],
  ['none', 2],
  ['skipped', 5],
  ['gone', 1],
  ['failed', 1],
  ['unverified', 1],
  ['unverified', 1, 'never'],
];

beforeAll(async () => {
  let seq = 0;
  for (const [state, n, when] of SEEDED) {
    const fetched = (state === 'pending' || state === 'unverified') && when !== 'never';
    for (let i = 0; i < n; i++) {
      seq++;
      await sql`
        INSERT INTO push_events (actor_id, repository_id, ref, head, before, created_at, payload,
          commits_state, commits_next_attempt_at)
        VALUES (1, ${seq}, 'refs/heads/main', ${`h${seq}`}, ${`b${seq}`}, now(), '{}', ${state},
          CASE WHEN ${fetched} THEN now() + ${when === 'later' ? '1 hour' : '-1 minute'}::interval END)`.execute(
        t.db,
      );
    }
  }
  await sql`
    INSERT INTO commits (repository_id, sha) SELECT 1, 'c' || g FROM generate_series(1, 7) g`.execute(
    t.db,
  );
  // Three commits requests in the last hour, one older, one enrich request. The oldest of
  // the three is half an hour old, not 59 minutes: the window is read against each reader's
  // own now (the web's, bin/status's), minutes after this seeding on a loaded machine, and
  // a request a minute from the window's edge fell out of it.
  await sql`
    INSERT INTO github_requests (credential, purpose, path, reserved_at) VALUES
      ('fixture', 'commits', '/repos/a/b/compare/x...y', now() - interval '1 minute'),
      ('fixture', 'commits', '/repos/a/b/compare/x...y', now() - interval '10 minutes'),
      ('fixture', 'commits', '/repos/a/b/compare/x...y', now() - interval '30 minutes'),
      ('fixture', 'commits', '/repos/a/b/compare/x...y', now() - interval '2 hours'),
      ('fixture', 'enrich', '/users/x', now() - interval '1 minute')`.execute(t.db);
  web = await startTestWeb(t);
});
afterAll(async () => {
  await web?.close();
});

const BY_STATE = {
  pending: 3,
  complete: 4,
  partial: 1,
  none: 2,
  skipped: 5,
  gone: 1,
  failed: 1,
  unverified: 2,
};

describe('commits status', () => {
  it('GET /status reports pushes by state, the due backlog, the fetch rate and commits stored', async () => {
    const res = await fetch(`${web.url}/status`);
    const report = (await res.json()) as { commits: unknown };
    expect(report.commits).toEqual({
      byState: BY_STATE,
      // The pending pushes due, and the unverified one a source covers.
      pendingDue: 3,
      // The default origin of a stored push is poll: the whole backlog came from polls.
      pendingByOrigin: { poll: 3, webhook: 0, archive: 0 },
      requestsLastHour: 3,
      // no GraphQL here (graphql-pushes-per-point.test.ts has a batch's real rows)
      graphql: { pushes: 0, points: 0, pushesPerPoint: null },
      stored: 7,
      storedEstimated: false,
      // The deployment used a credential ('fixture', the ledger above) but no source asks.
      off: 'no enabled source has commits on (bin/sources commits ID on)',
      awaitingCredential: 0,
    });
  });

  it('bin/status prints them, and --json is the same report', async () => {
    const env = {
      ...process.env,
      DATABASE_URL: t.url,
      GITHUB_MODE: 'fixture',
      LOG_LEVEL: 'silent',
    };
    const { stdout } = await run(process.execPath, [BIN], { env });
    expect(stdout).toMatch(/^Commits$/m);
    expect(stdout).toMatch(
      /^\s+pending\s+complete\s+partial\s+none\s+skipped\s+gone\s+failed\s+unverified$/m,
    );
    expect(stdout).toMatch(/^\s+3\s+4\s+1\s+2\s+5\s+1\s+1\s+2$/m);
    expect(stdout).toContain(
      '3 pushes due for fetching, 3 commits requests in the last hour, 7 commits stored',
    );
    const json = JSON.parse((await run(process.execPath, [BIN, '--json'], { env })).stdout);
    expect(json.commits).toMatchObject({ byState: BY_STATE, pendingDue: 3, requestsLastHour: 3 });
  });

  it("bin/status says in one line why commits are off, from the deployment's credentials: none used, then no source asking", async () => {
    const base = { ...process.env, DATABASE_URL: t.url, LOG_LEVEL: 'silent' };
    // The shell's own configuration does not matter: anonymous or with a token, the same.
    const anonymous = { ...base, GITHUB_MODE: 'live', GITHUB_TOKEN: '', GITHUB_TOKENS: '' };
    const withToken = { ...base, GITHUB_MODE: 'live', GITHUB_TOKEN: 'ghp_shell0000000000000' };
    await sql`INSERT INTO event_sources (kind, target, mode, commits_enabled)
      VALUES ('public', NULL, 'live', true)`.execute(t.db);
    // What the ledger says: no credential used in the last hour (the fixture's moved back;
    // the per-minute counters follow by trigger).
    await sql`UPDATE github_requests SET reserved_at = reserved_at - interval '3 hours'`.execute(
      t.db,
    );
    try {
      const why = `commits are off: ${NO_CREDENTIAL_IN_USE}`;
      for (const env of [anonymous, withToken]) {
        const text = (await run(process.execPath, [BIN], { env })).stdout;
        expect(text.split('\n').filter((l) => l.includes('commits are off'))).toEqual([`  ${why}`]);
      }
      const json = JSON.parse(
        (await run(process.execPath, [BIN, '--json'], { env: anonymous })).stdout,
      );
      expect(json.commits.off).toBe(NO_CREDENTIAL_IN_USE);
      // A credential some process used, and a source whose commits are on: no such line, in
      // an anonymous shell too.
      await sql`UPDATE github_requests SET reserved_at = reserved_at + interval '3 hours'`.execute(
        t.db,
      );
      const on = (await run(process.execPath, [BIN], { env: anonymous })).stdout;
      expect(on).toMatch(/^Commits$/m);
      expect(on).not.toContain('commits are off');
      await sql`UPDATE event_sources SET commits_enabled = false`.execute(t.db);
      expect((await run(process.execPath, [BIN], { env: anonymous })).stdout).toContain(
        '  commits are off: no enabled source has commits on (bin/sources commits ID on)',
      );
    } finally {
      await sql`DELETE FROM event_sources`.execute(t.db);
    }
    // Four runs of bin/status, seconds each on a loaded machine.
  }, 150_000);

  it('the HTML page has a commits card', async () => {
    const html = await (await fetch(`${web.url}/`)).text();
    const card = html.match(/<div class="card" id="commits-card"><h2>Commits<\/h2>.*?<\/dl>/s)?.[0];
    expect(card).toBeDefined();
    expect(card).toContain('<div class="big">7 stored</div>');
    expect(card).toContain('<dt>due for fetching</dt><dd>3</dd>');
    expect(card).toContain('<dt>pending pushes</dt><dd>3</dd>');
    expect(card).toContain('<dt>unverified pushes</dt><dd>2</dd>');
    expect(card).toContain('<dt>requests (1h)</dt><dd>3</dd>');
    expect(card).toContain('<dt>skipped pushes</dt><dd>5</dd>');
  });

  it('/metrics has the same numbers', async () => {
    const m = parsePrometheusText(await (await fetch(`${web.url}/metrics`)).text());
    for (const [state, n] of Object.entries(BY_STATE)) {
      expect(sampleValue(m, 'gpi_push_commits_state', { state })).toBe(n);
    }
    expect(sampleValue(m, 'gpi_commits_pending_due')).toBe(3);
    expect(sampleValue(m, 'gpi_commits_requests_last_hour')).toBe(3);
    expect(sampleValue(m, 'gpi_commits_stored')).toBe(7);
  });
});

describe('commits status plans', () => {
  it('counts by state from the tallies, the due backlog and the fetch rate from their indexes', async () => {
    // Enough rows that a sequential scan would be the planner's choice without the indexes,
    // committed durably and vacuumed so the pages are all-visible (as in hot-path-plans).
    await t.db.transaction().execute(async (trx) => {
      await sql`SET LOCAL synchronous_commit = on`.execute(trx);
      await sql`
        INSERT INTO push_events (actor_id, repository_id, ref, head, before, created_at, payload,
          commits_state, commits_next_attempt_at)
        SELECT 1, 1000000 + g, 'refs/heads/main', 'h' || g, 'b' || g, now(), '{}',
          CASE WHEN g % 100 = 0 THEN 'pending' ELSE 'skipped' END,
          CASE WHEN g % 100 = 0 THEN now() END
        FROM generate_series(1, 60000) g`.execute(trx);
      await sql`
        INSERT INTO github_requests (credential, purpose, path, reserved_at)
        SELECT 'fixture', CASE WHEN g % 10 = 0 THEN 'commits' ELSE 'poll' END, '/x',
          now() - g * interval '1 second'
        FROM generate_series(1, 60000) g`.execute(trx);
    });
    await sql`VACUUM (ANALYZE) push_events`.execute(t.db);
    await sql`VACUUM (ANALYZE) github_requests`.execute(t.db);
    // By state: the push tallies (ADR 0203), never push_events, whatever it holds.
    const states = await explain(t.db, commitsStateCounts());
    const read = states.nodes.map((n) => n['Relation Name']).filter((r) => r !== undefined);
    expect(read, states.shown).toContain('push_tallies');
    expect(read, states.shown).not.toContain('push_events');
    const backlog = await explain(t.db, commitsBacklogStatement(new Date()));
    expect(
      indexReads(backlog, 'push_events_commits_due', ['Index Scan', 'Index Only Scan']),
      backlog.shown,
    ).not.toEqual([]);
    expect(indexReads(backlog, 'github_requests_commits'), backlog.shown).not.toEqual([]);
    expect(seqScans(backlog), backlog.shown).toEqual([]);
  });
});
