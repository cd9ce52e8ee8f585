import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fixedClock } from '../../src/platform/clock.ts';
import { installViews } from '../../src/status/views.ts';
import { useTestDatabase } from '../support/db.ts';
import { parsePrometheusText, sampleValue } from '../support/prometheus.ts';
import { seedActivity } from '../support/status-factories.ts';
import { startTestWeb, type TestWeb } from '../support/web.ts';

const t = useTestDatabase();
let web: TestWeb;
let sourceIds: number[];
/**
 * /readyz here is asked what its checks find, so its deadline is only a hang guard: the
 * default 2 s is a deadline a loaded test machine reaches (then every answer is "no answer
 * within 2000 ms"). That the deadline holds is test/integration/web-readiness.test.ts's.
 */
const readinessTimeoutMs = 60_000;
/**
 * The instant the activity is seeded "ago" from, and the server's now: the page's "1h ago"
 * and the metrics' timestamps are read against it, not against the test's now, which a
 * loaded machine puts a minute or more after the seeding (the page said "1h01m ago").
 */
const seededAt = new Date();

beforeAll(async () => {
  ({ sourceIds } = await seedActivity(t.db, { now: seededAt }));
  web = await startTestWeb(t, { readinessTimeoutMs, clock: fixedClock(seededAt) });
});
afterAll(async () => {
  await web?.close();
});

async function get(path: string, base = web.url) {
  const res = await fetch(`${base}${path}`);
  return { status: res.status, type: res.headers.get('content-type'), text: await res.text() };
}

describe('GET /healthz and /readyz', () => {
  it('healthz answers 200 while the process is up', async () => {
    expect(await get('/healthz')).toMatchObject({ status: 200, text: '{"ok":true}' });
  });

  it('readyz answers 200 on a migrated database with pg-boss installed', async () => {
    const res = await get('/readyz');
    expect(res.status).toBe(200);
    expect(JSON.parse(res.text)).toEqual({ ready: true });
  });

  it('readyz answers 503 naming the missing pg-boss schema', async () => {
    const other = await startTestWeb(t, {
      env: { PGBOSS_SCHEMA: 'not_installed' },
      readinessTimeoutMs,
    });
    try {
      const res = await get('/readyz', other.url);
      expect(res.status).toBe(503);
      expect(JSON.parse(res.text)).toEqual({
        ready: false,
        reason: 'pg-boss schema "not_installed" is not installed (run bin/setup)',
      });
    } finally {
      await other.close();
    }
  });

  it('readyz answers 503 naming a pending migration', async () => {
    const name = '2026-11-29T0920_webhooks';
    const saved = await sql<{ name: string; timestamp: string }>`
      DELETE FROM kysely_migration WHERE name = ${name} RETURNING name, timestamp`.execute(t.db);
    try {
      const res = await get('/readyz');
      expect(res.status).toBe(503);
      expect(JSON.parse(res.text).reason).toBe(`pending migrations: ${name} (run bin/setup)`);
    } finally {
      const row = saved.rows[0]!;
      await sql`INSERT INTO kysely_migration (name, timestamp) VALUES (${row.name}, ${row.timestamp})`.execute(
        t.db,
      );
    }
    expect((await get('/readyz')).status).toBe(200);
  });
});

describe('GET /status', () => {
  it('reports sources, backlog, budget, queues and the last reconcile as JSON', async () => {
    const res = await get('/status');
    expect(res.status).toBe(200);
    expect(res.type).toMatch(/^application\/json/);
    const s = JSON.parse(res.text);

    expect(s.sources.map((x: { id: number }) => x.id)).toEqual(sourceIds);
    const [pub, repo, org] = s.sources;
    expect(pub).toMatchObject({
      kind: 'public',
      target: null,
      enabled: true,
      gapsLast24h: 1,
      runsLast24h: 12,
    });
    expect(pub.lastRun).toMatchObject({ status: 'completed' });
    expect(repo).toMatchObject({
      kind: 'repo',
      target: 'octocat/Hello-World',
      pollIntervalSeconds: 300,
    });
    expect(repo.lastRun.status).toBe('not_modified');
    expect(org).toMatchObject({
      consecutiveFailures: 2,
      lastError: 'GitHub answered 502 on /orgs/github/events',
    });
    expect(typeof org.nextPollAt).toBe('string');

    expect(s.enrichment.actor).toMatchObject({ pending: 8, enriched: 16, failed: 8, gone: 8 });
    expect(s.enrichment.repository).toMatchObject({ pending: 20, enriched: 10 });
    expect(s.activity.pushes).toEqual({
      total: 540,
      poll: 468,
      webhook: 52,
      archive: 20,
      last24h: 540,
      pushedLast24h: 540,
    });
    expect(s.activity.gapsLast24h).toBe(1);
    expect(s.gaps).toMatchObject({
      byState: { open: 1, filled: 1, unavailable: 1 },
      eventsRecovered: 20,
      oldestOpen: { sourceId: pub.id, lastError: null },
      lastBackfill: { file: '2026-11-29-3', state: 'completed', pushesCreated: 20 },
    });
    expect(Date.parse(s.gaps.nextFillAt)).toBeGreaterThan(seededAt.getTime());

    expect(s.budget).toMatchObject({
      credential: 'fixture',
      quota: 60,
      remaining: expect.any(Number),
    });
    expect(s.budget.spent.poll + s.budget.spent.enrich).toBeGreaterThan(0);

    const queues = Object.fromEntries(s.queues.map((q: { name: string }) => [q.name, q]));
    expect(Object.keys(queues)).toEqual(
      expect.arrayContaining([
        'poll-sources',
        'enrich-actor',
        'enrich-repository',
        'reconcile',
        'maintenance',
        'backfill',
      ]),
    );
    expect(queues['enrich-actor'].jobs.created).toBe(1);
    expect(queues['enrich-actor'].oldestWaitingSeconds).toBeGreaterThanOrEqual(60);
    expect(queues['poll-sources'].jobs.completed).toBe(1);
    expect(s.lastReconcile).toMatchObject({ state: 'completed', output: { classes: [] } });
    expect(s.webhooksEnabled).toBe(true);
  });
});

describe('GET /', () => {
  it('renders the sources, backlog, budget and three inline SVG charts with no external assets', async () => {
    const res = await get('/');
    expect(res.status).toBe(200);
    expect(res.type).toMatch(/^text\/html/);
    const html = res.text;
    expect(html).toContain('octocat/Hello-World');
    expect(html).toContain('GitHub answered 502 on /orgs/github/events');
    expect(html).toContain('Request budget');
    expect(html).toContain('actor backlog');
    expect(html).toMatch(/<h2>Gaps<\/h2><div class="big">1 open<\/div>/);
    expect(html).toContain('<dt>pushes recovered</dt><dd>20</dd>');
    expect(html).toContain(
      '<dt>last backfill</dt><dd class="phrases"><span>2026-11-29-3</span> <span>completed</span> <span>1h ago</span></dd>',
    );
    expect(html.match(/<svg /g)).toHaveLength(3);
    expect(html).toContain('Events ingested per minute');
    expect(html).toContain('Requests spent per minute');
    // Nothing is fetched from elsewhere: no scripts, stylesheets or images by URL.
    expect(html).not.toMatch(/<script|src=|url\(/i);
    for (const [, href] of html.matchAll(/<link [^>]*href="([^"]*)"/g))
      expect(href).toMatch(/^data:/);
  });

  it('escapes what it prints from the database', async () => {
    await t.db
      .insertInto('event_sources')
      .values({
        kind: 'user',
        target: 'x<script>alert(1)</script>',
        mode: 'fixture',
        enabled: false,
        commits_enabled: true,
      })
      .execute();
    const html = (await get('/')).text;
    expect(html).toContain('x&lt;script&gt;alert(1)&lt;/script&gt;');
    expect(html).not.toContain('<script>');
    await t.db.deleteFrom('event_sources').where('kind', '=', 'user').execute();
  });
});

describe('GET /metrics', () => {
  it('is valid Prometheus text with the listed series and their real values', async () => {
    const res = await get('/metrics');
    expect(res.status).toBe(200);
    expect(res.type).toMatch(/^text\/plain; version=0\.0\.4/);
    const m = parsePrometheusText(res.text);

    expect(m.get('gpi_push_events_ingested_total')?.type).toBe('counter');
    expect(sampleValue(m, 'gpi_push_events_ingested_total', { origin: 'poll' })).toBe(468);
    expect(sampleValue(m, 'gpi_push_events_ingested_total', { origin: 'webhook' })).toBe(52);
    expect(sampleValue(m, 'gpi_push_events_ingested_total', { origin: 'archive' })).toBe(20);
    expect(sampleValue(m, 'gpi_gap_records', { state: 'open' })).toBe(1);
    expect(sampleValue(m, 'gpi_gap_records', { state: 'unavailable' })).toBe(1);
    expect(sampleValue(m, 'gpi_gap_events_recovered_total')).toBe(20);
    expect(sampleValue(m, 'gpi_backfill_files', { state: 'completed' })).toBe(1);
    expect(sampleValue(m, 'gpi_backfill_pushes_stored_total')).toBe(20);
    expect(sampleValue(m, 'gpi_backfill_last_activity_timestamp_seconds')).toBeCloseTo(
      seededAt.getTime() / 1000 - 3600,
      3,
    );
    expect(sampleValue(m, 'gpi_ingestion_runs_total', { outcome: 'completed' })).toBe(12);
    expect(sampleValue(m, 'gpi_ingestion_runs_total', { outcome: 'failed' })).toBe(1);
    expect(sampleValue(m, 'gpi_ingestion_runs_total', { outcome: 'interrupted' })).toBe(0);
    expect(sampleValue(m, 'gpi_gaps_total')).toBe(1);
    expect(
      sampleValue(m, 'gpi_github_requests_total', { purpose: 'poll', status: '304' }),
    ).toBeGreaterThan(0);
    expect(sampleValue(m, 'gpi_github_requests_total', { purpose: 'poll', status: '403' })).toBe(1);
    expect(sampleValue(m, 'gpi_github_requests_total', { purpose: 'poll', status: 'error' })).toBe(
      1,
    );
    expect(sampleValue(m, 'gpi_github_rate_limit_remaining', { credential: 'fixture' })).toBe(37);
    expect(sampleValue(m, 'gpi_enrichment_backlog', { class: 'actor', state: 'gone' })).toBe(8);
    expect(
      sampleValue(m, 'gpi_enrichment_backlog', { class: 'repository', state: 'pending' }),
    ).toBe(20);
    expect(
      sampleValue(m, 'gpi_enrichment_attempts_total', { class: 'actor', outcome: 'gone' }),
    ).toBe(1);
    expect(sampleValue(m, 'gpi_queue_jobs', { queue: 'enrich-actor', state: 'created' })).toBe(1);
    expect(sampleValue(m, 'gpi_queue_jobs', { queue: 'maintenance', state: 'active' })).toBe(0);
    expect(m.get('gpi_job_duration_seconds')?.type).toBe('histogram');
    expect(sampleValue(m, 'gpi_job_duration_seconds_count', { queue: 'reconcile' })).toBe(1);
    expect(
      sampleValue(m, 'gpi_job_duration_seconds_bucket', { queue: 'poll-sources', le: '5' }),
    ).toBe(0);
    expect(
      sampleValue(m, 'gpi_job_duration_seconds_bucket', { queue: 'poll-sources', le: '10' }),
    ).toBe(1);
    // The web process's own health comes along (prom-client's default metrics).
    expect(m.has('process_resident_memory_bytes')).toBe(true);
    for (const name of m.keys()) {
      if (name.startsWith('gpi_') && m.get(name)!.type === 'counter')
        expect(name).toMatch(/_total$/);
    }
  });

  it('counters do not go down when retention prunes the ledgers', async () => {
    const before = parsePrometheusText((await get('/metrics')).text);
    await sql`DELETE FROM ingestion_runs WHERE status = 'completed' AND gap_detected`.execute(t.db);
    await sql`DELETE FROM github_requests WHERE status = 403`.execute(t.db);
    await sql`DELETE FROM enrichment_attempts`.execute(t.db);
    const after = parsePrometheusText((await get('/metrics')).text);
    for (const [name, labels] of [
      ['gpi_ingestion_runs_total', { outcome: 'completed' }],
      ['gpi_gaps_total', {}],
      ['gpi_github_requests_total', { purpose: 'poll', status: '403' }],
      ['gpi_enrichment_attempts_total', { class: 'actor', outcome: 'enriched' }],
    ] as const) {
      expect(sampleValue(after, name, labels), name).toBe(sampleValue(before, name, labels));
    }
  });
});

describe('routing', () => {
  it('answers 404 for unknown paths and 405 with Allow for wrong methods', async () => {
    expect((await get('/nope')).status).toBe(404);
    const res = await fetch(`${web.url}/status`, { method: 'DELETE' });
    expect(res.status).toBe(405);
    expect(res.headers.get('allow')).toBe('GET');
    await res.text();
  });
});

describe('SQL views', () => {
  it('installViews creates ingest_overview, enrichment_backlog and queue_overview, idempotently', async () => {
    await installViews(t.db, 'pgboss');
    await installViews(t.db, 'pgboss');
    const ingest = await sql<{ kind: string; gaps_24h: string; last_status: string }>`
      SELECT kind, gaps_24h, last_status FROM ingest_overview ORDER BY source_id`.execute(t.db);
    expect(ingest.rows.map((r) => r.kind)).toEqual(['public', 'repo', 'org']);
    expect(ingest.rows[2]!.last_status).toBe('failed');
    const backlog = await sql<{ class: string; state: string; entities: string }>`
      SELECT class, state, entities FROM enrichment_backlog WHERE class = 'actor' AND state = 'gone'`.execute(
      t.db,
    );
    expect(Number(backlog.rows[0]!.entities)).toBe(8);
    const queues = await sql<{ queue: string; created: string; oldest_waiting: unknown }>`
      SELECT queue, created, oldest_waiting FROM queue_overview WHERE queue = 'enrich-actor'`.execute(
      t.db,
    );
    expect(Number(queues.rows[0]!.created)).toBe(1);
    expect(queues.rows[0]!.oldest_waiting).not.toBeNull();
  });
});
