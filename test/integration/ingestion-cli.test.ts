import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { main } from '../../src/cli/ingest.ts';
import { UsageError } from '../../src/platform/errors.ts';
import type { RunSummary } from '../../src/poll/run-summary.ts';
import { addSource } from '../../src/store/sources.ts';
import { captureMain, runBin } from '../support/cli.ts';
import { useTestDatabase } from '../support/db.ts';
import { type FakeGitHub, startFakeGitHub } from '../support/fake-github.ts';
import { randomToken } from '../support/github-client.ts';
import { otherEvent, pushEvent } from '../support/github-factories.ts';

const t = useTestDatabase();
let fake: FakeGitHub;

beforeAll(async () => {
  fake = await startFakeGitHub();
  vi.stubEnv('DATABASE_URL', t.url);
  vi.stubEnv('GITHUB_API_URL', fake.url);
  vi.stubEnv('GITHUB_TOKEN', randomToken());
  vi.stubEnv('GITHUB_MODE', 'live');
  vi.stubEnv('LOG_LEVEL', 'silent');
});
afterAll(async () => {
  vi.unstubAllEnvs();
  await fake.close();
});

function run(argv: string[]) {
  return captureMain(main, argv);
}

function spawnBin(name: string, argv: string[]) {
  return runBin(name, argv, {
    DATABASE_URL: t.url,
    GITHUB_API_URL: fake.url,
    GITHUB_MODE: 'live',
    LOG_LEVEL: 'silent',
  });
}

describe('bin/ingest', () => {
  it('polls due sources and prints one line per source; exit 1 when a run failed', async () => {
    const { source: ok } = await addSource(t.db, { kind: 'org', target: 'cli-ok' }, 'live');
    const { source: broken } = await addSource(
      t.db,
      { kind: 'user', target: 'cli-broken' },
      'live',
    );
    fake.addEvents('org:cli-ok', [pushEvent(), pushEvent(), otherEvent('WatchEvent')]);
    fake.fail({ path: '/users/cli-broken/events', status: 503 });

    const first = await run([]);
    expect(first.code).toBe(1);
    const lines = first.out.trimEnd().split('\n');
    expect(lines).toHaveLength(2);
    expect(lines[0]).toMatch(
      new RegExp(
        `^source ${ok.id} org cli-ok: completed: 3 events seen, 2 created, 1 page, 1 request spent; next poll \\S+Z$`,
      ),
    );
    expect(lines[1]).toMatch(
      new RegExp(
        `^source ${broken.id} user cli-broken: failed \\(GITHUB_UNAVAILABLE: .*\\): 0 events seen`,
      ),
    );

    // Nothing is due any more.
    expect(await run([])).toEqual({
      code: 0,
      out: 'no live sources due (use --force to poll them now)\n',
      err: '',
    });

    const json = await run(['--source', String(ok.id), '--force', '--json']);
    expect(json.code).toBe(0);
    const summaries = JSON.parse(json.out) as RunSummary[];
    expect(summaries).toEqual([
      expect.objectContaining({
        sourceId: Number(ok.id),
        outcome: 'not_modified',
        requestsSpent: 0,
        eventsCreated: 0,
      }),
    ]);
  });

  it('with no enabled source of its mode, says what the other sources are, not --force', async () => {
    const before = await t.db.selectFrom('event_sources').select(['id', 'enabled']).execute();
    await t.db.updateTable('event_sources').set({ enabled: false }).execute();
    await addSource(t.db, { kind: 'repo', target: 'fix/only' }, 'fixture');
    try {
      const r = await run([]);
      expect(r.code).toBe(0);
      expect(r.out).toMatch(
        /^no enabled live sources; \d+ disabled live sources? \(bin\/sources enable ID\); 1 fixture source \(polled with GITHUB_MODE=fixture\)\n$/,
      );
      expect(r.out).not.toContain('--force');
    } finally {
      await t.db.deleteFrom('event_sources').where('mode', '=', 'fixture').execute();
      for (const s of before) {
        await t.db
          .updateTable('event_sources')
          .set({ enabled: s.enabled })
          .where('id', '=', s.id)
          .execute();
      }
    }
  });

  it('says which source is unknown (exit 1) and refuses bad arguments with usage', async () => {
    expect(await run(['--source', '987654'])).toEqual({
      code: 1,
      out: '',
      err: 'ingest: no source with id 987654 (see bin/sources list)\n',
    });
    await expect(main(['--source', 'abc'])).rejects.toThrow(UsageError);
    await expect(main(['--verbose'])).rejects.toThrow(UsageError);
    await expect(main(['extra'])).rejects.toThrow(UsageError);
  });

  it('as real executables: bin/sources add public, then bin/ingest stores exactly the pushes served, once', async () => {
    await t.db.updateTable('event_sources').set({ enabled: false }).execute();
    const served = [pushEvent(), otherEvent('CreateEvent'), pushEvent(), pushEvent()];
    fake.addEvents('public', served);

    const added = await spawnBin('sources', ['add', 'public']);
    expect(added.code).toBe(0);
    const sourceId = /^added source (\d+): public/.exec(added.out)?.[1];
    expect(sourceId).toBeDefined();
    const first = await spawnBin('ingest', []);
    expect(first).toMatchObject({ code: 0, err: '' });
    expect(first.out).toMatch(
      /^source \d+ public: completed: 4 events seen, 3 created, 1 page, 1 request spent/,
    );
    const stored = await t.db
      .selectFrom('push_events')
      .select('id')
      .where('source_id', '=', sourceId!)
      .execute();
    const servedPushIds = served.filter((e) => e.type === 'PushEvent').map((e) => e.id);
    expect(stored.map((r) => r.id).sort()).toEqual([...servedPushIds].sort());
    // Post-commit hints for a live worker: one enrichment cycle per class.
    const hints = await sql<{ name: string; n: string }>`
      SELECT name, count(*) AS n FROM pgboss.job
      WHERE name IN ('enrich-actor', 'enrich-repository') GROUP BY name ORDER BY name`.execute(
      t.db,
    );
    expect(hints.rows).toEqual([
      { name: 'enrich-actor', n: '1' },
      { name: 'enrich-repository', n: '1' },
    ]);

    const counted = fake.countedRequests;
    const second = await spawnBin('ingest', ['--force']);
    expect(second.out).toMatch(
      /^source \d+ public: not_modified: 0 events seen, 0 created, 0 pages, 0 requests spent/,
    );
    expect(fake.countedRequests).toBe(counted);
  });
});
