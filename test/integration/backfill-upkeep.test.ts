import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { localFileSource } from '../../src/backfill/archive.ts';
import { importFile } from '../../src/backfill/import.ts';
import type { ImportTarget } from '../../src/backfill/import-types.ts';
import { ensurePushMonths } from '../../src/store/push-months.ts';
import { monthsBetween, upkeepAfterBulkWrite } from '../../src/store/push-upkeep.ts';
import { gzipLines, hourOfEvents } from '../support/archive-server.ts';
import { useTestDatabase } from '../support/db.ts';
import { memoryLogger } from '../support/github-client.ts';
import type { GitHubEvent } from '../support/github-factories.ts';

/**
 * After an archive file, bin/backfill leaves the months it wrote summarized (no BRIN page
 * range a time-window read would have to read whole) and analysed (the planner's row count
 * is what the partition holds), and says so in `backfill.upkeep`.
 */

const t = useTestDatabase();
let dir: string;
beforeAll(() => {
  dir = mkdtempSync(path.join(tmpdir(), 'gpi-upkeep-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const ALL: ImportTarget = { scope: 'all', sourceId: null, gapId: null };

/** BRIN ranges of `relation` nobody has summarized yet (summarizing them as it counts). */
async function unsummarized(relation: string): Promise<number> {
  const r = await sql<{ n: number }>`
    SELECT coalesce(sum(brin_summarize_new_values(i.indexrelid)), 0)::int AS n
    FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid
    JOIN pg_am am ON am.oid = ic.relam AND am.amname = 'brin'
    WHERE i.indrelid = to_regclass(${relation})`.execute(t.db);
  return r.rows[0]!.n;
}

async function plannerRows(relation: string): Promise<number> {
  const r = await sql<{ n: number }>`
    SELECT reltuples::float8 AS n FROM pg_class WHERE oid = to_regclass(${relation})`.execute(t.db);
  return r.rows[0]!.n;
}

async function count(relation: string): Promise<number> {
  const r = await sql<{ n: number }>`SELECT count(*)::int AS n FROM ${sql.table(relation)}`.execute(
    t.db,
  );
  return r.rows[0]!.n;
}

/** The push with one inline commit of its own, as GH Archive's lines before 2025-10 carry. */
function withCommit(e: GitHubEvent): GitHubEvent {
  const sha = createHash('sha1').update(String(e.id)).digest('hex');
  const payload = e.payload as Record<string, unknown>;
  return {
    ...e,
    payload: {
      ...payload,
      size: 1,
      distinct_size: 1,
      head: sha,
      commits: [
        {
          sha,
          author: { email: 'dev@example.com', name: 'Dev' },
          message: `change ${e.id}`,
          distinct: true,
          url: `https://api.github.com/repos/o/r/commits/${sha}`,
        },
      ],
    },
  };
}

describe('upkeep after an archive file', () => {
  it('summarizes the month partitions the file wrote and stored_commits, and analyses those that changed enough', async () => {
    // Two months in one file: an hour's end and the next month's first minutes, from before
    // 2025-10, so each push's inline commit is stored. September's 6,000 pushes fill more
    // than one BRIN page range (128 pages) of its partition: ranges only the upkeep
    // summarizes (Postgres never summarizes the last, partial one).
    const evs = [
      ...hourOfEvents(new Date('2024-09-30T23:00:00Z'), 12_000, { firstId: 97_000_000_000 }),
      ...hourOfEvents(new Date('2024-10-01T00:00:00Z'), 40, { firstId: 97_000_100_000 }),
    ].map((e) => (e.type === 'PushEvent' ? withCommit(e) : e));
    const file = path.join(dir, '2024-09-30-23.json.gz');
    writeFileSync(file, gzipLines(evs.map((e) => JSON.stringify(e))));
    const { logger, lines } = memoryLogger('debug');

    const result = await importFile(
      { pool: t.pool, db: t.db, logger, workerId: 'test-host:1' },
      localFileSource(file),
      ALL,
    );
    expect(result.outcome).toBe('completed');
    expect(result.counts.created).toBe(6_020);

    for (const partition of ['push_events_2024_09', 'push_events_2024_10', 'stored_commits']) {
      const rows = await count(partition);
      expect(rows, partition).toBeGreaterThan(0);
      expect(await plannerRows(partition), `${partition}: analysed`).toBe(rows);
      expect(await unsummarized(partition), `${partition}: summarized`).toBe(0);
    }
    const logged = lines.map((l) => JSON.parse(l)).find((l) => l.event === 'backfill.upkeep');
    expect(logged).toMatchObject({
      relations: ['push_events_2024_09', 'push_events_2024_10', 'stored_commits'],
      analysed: ['push_events_2024_09', 'push_events_2024_10', 'stored_commits'],
      skipped: [],
    });

    // A second file of 50 pushes into the analysed September: summarized again, but a
    // change of less than a tenth of its rows is not worth a new sample.
    const more = hourOfEvents(new Date('2024-09-30T22:00:00Z'), 100, {
      firstId: 97_000_200_000,
    }).map((e) => (e.type === 'PushEvent' ? withCommit(e) : e));
    const second = path.join(dir, '2024-09-30-22.json.gz');
    writeFileSync(second, gzipLines(more.map((e) => JSON.stringify(e))));
    lines.length = 0;
    const again = await importFile(
      { pool: t.pool, db: t.db, logger, workerId: 'test-host:1' },
      localFileSource(second),
      ALL,
    );
    expect(again.counts.created).toBe(50);
    const next = lines.map((l) => JSON.parse(l)).find((l) => l.event === 'backfill.upkeep');
    expect(next).toMatchObject({
      relations: ['push_events_2024_09', 'stored_commits'],
      analysed: [],
    });
    expect(await plannerRows('push_events_2024_09')).toBe(6_000);
    // created_at's and ingested_at's full ranges of September at least.
    expect(logged.brin_ranges).toBeGreaterThanOrEqual(2);
  });

  it('skips a month that has no partition, and one another session is analysing', async () => {
    const months = monthsBetween(
      new Date('2024-10-15T00:00:00Z'),
      new Date('2024-12-02T00:00:00Z'),
    );
    expect(months.map((m) => m.name)).toEqual(['2024-10', '2024-11', '2024-12']);
    await ensurePushMonths(t.db, [months[0]!.start]);
    const holder = await t.pool.connect();
    const client = await t.pool.connect();
    try {
      // SHARE UPDATE EXCLUSIVE, as a running ANALYZE or VACUUM holds it.
      await holder.query('BEGIN');
      await holder.query('LOCK TABLE push_events_2024_10 IN SHARE UPDATE EXCLUSIVE MODE');
      const u = await upkeepAfterBulkWrite(client, months);
      expect(u.failed).toEqual([]);
      expect(u.skipped).toEqual([
        'push_events_2024_10',
        'push_events_2024_11',
        'push_events_2024_12',
      ]);
      expect(u.relations).toEqual(['stored_commits']);
    } finally {
      await holder.query('ROLLBACK');
      holder.release();
      client.release();
    }
  });

  it('goes on past a relation that fails, and stops between relations when told', async () => {
    const months = monthsBetween(
      new Date('2025-01-15T00:00:00Z'),
      new Date('2025-02-02T00:00:00Z'),
    );
    await ensurePushMonths(
      t.db,
      months.map((m) => m.start),
    );
    const client = await t.pool.connect();
    try {
      // January's summary fails for a reason that is not a lock held elsewhere.
      const failing = new Proxy(client, {
        get(target, key, receiver) {
          if (key !== 'query') return Reflect.get(target, key, receiver);
          return (text: unknown, values?: unknown[]) =>
            typeof text === 'string' &&
            text.includes('brin_summarize_new_values') &&
            values?.[0] === 'push_events_2025_01'
              ? target.query('SELECT 1/0')
              : target.query(text as string, values);
        },
      });
      const u = await upkeepAfterBulkWrite(failing, months);
      expect(u.failed.map((f) => [f.relation, (f.error as { code?: string }).code])).toEqual([
        ['push_events_2025_01', '22012'],
      ]);
      expect(u.relations).toEqual(['push_events_2025_02', 'stored_commits']);
      // The failed relation's transaction was rolled back: the session is usable.
      expect((await client.query('SELECT 1 AS one')).rows[0].one).toBe(1);

      const stop = new AbortController();
      stop.abort();
      const stopped = await upkeepAfterBulkWrite(client, months, stop.signal);
      expect(stopped.relations).toEqual([]);
      expect(stopped.notReached).toEqual([
        'push_events_2025_01',
        'push_events_2025_02',
        'stored_commits',
      ]);
    } finally {
      client.release();
    }
  });
});
