import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { gzipSync } from 'node:zlib';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { localFileSource } from '../../src/backfill/archive.ts';
import { importFile } from '../../src/backfill/import.ts';
import type { ImportTarget } from '../../src/backfill/import-types.ts';
import { pruneLedgers } from '../../src/jobs/prune.ts';
import { REJECTED_SAMPLE } from '../../src/store/rejected-events.ts';
import { useTestDatabase } from '../support/db.ts';
import { memoryLogger } from '../support/github-client.ts';
import { type GitHubEvent, otherEvent, pushEvent } from '../support/github-factories.ts';

/**
 * Hostile archive files (8 and the `{}` lines): invalid UTF-8 in a key
 * field sets the push aside instead of storing U+FFFD (so two pushes never collapse into
 * one), invalid UTF-8 in free text is stored sanitised; JSON that is not an event is not
 * counted as one; a file of thousands of bad lines keeps a sample raw and counts the rest;
 * rejected_events is pruned by RETENTION_DAYS.
 */

const t = useTestDatabase();
let dir: string;
beforeAll(() => {
  dir = mkdtempSync(path.join(tmpdir(), 'gpi-backfill-hostile-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const ALL: ImportTarget = { scope: 'all', sourceId: null, gapId: null };
const deps = () => ({ pool: t.pool, logger: memoryLogger('silent').logger, workerId: 'test:1' });

let seq = 0;
function writeLines(lines: (Buffer | string)[]): string {
  const file = path.join(dir, `hostile-${++seq}.json.gz`);
  const nl = Buffer.from('\n');
  writeFileSync(
    file,
    gzipSync(Buffer.concat(lines.flatMap((l) => [typeof l === 'string' ? Buffer.from(l) : l, nl]))),
  );
  return file;
}

/** The event's JSON with the bytes of `marker` (inside a string) replaced by `bytes`. */
function withBytes(ev: GitHubEvent, marker: string, bytes: number[]): Buffer {
  const text = JSON.stringify(ev);
  const at = text.indexOf(marker);
  expect(at).toBeGreaterThan(0);
  return Buffer.concat([
    Buffer.from(text.slice(0, at)),
    Buffer.from(bytes),
    Buffer.from(text.slice(at + marker.length)),
  ]);
}

let idSeq = 72_000_000_000;
const push = (o: Parameters<typeof pushEvent>[0] = {}) => pushEvent({ id: idSeq++, ...o });

async function rejected() {
  const r = await sql<{ event_id: string | null; reason: string; message: string }>`
    SELECT event_id, reason, message FROM rejected_events ORDER BY id`.execute(t.db);
  return r.rows;
}

describe('hostile archive lines', () => {
  it('invalid UTF-8 in a key field sets the push aside; in free text it is stored sanitised', async () => {
    await sql`TRUNCATE rejected_events`.execute(t.db);
    const repo = { id: 4242, name: 'own/utf8' };
    const valid = push({ repo, payload: { ref: 'refs/heads/main', before: 'b'.repeat(40) } });
    // Two pushes of the same repository and shas whose refs differ only in invalid bytes:
    // decoded lossily both would be "refs/heads/ma\uFFFDin" and collapse into one row.
    const bad = [0xff, 0xfe].map((byte) =>
      withBytes(
        push({
          repo,
          payload: { ref: 'refs/heads/maXXin', before: 'c'.repeat(40), head: 'd'.repeat(40) },
        }),
        'XX',
        [byte],
      ),
    );
    const loginBad = withBytes(push({ actor: { id: 77, login: 'loginXX' } }), 'XX', [0xc0, 0xaf]);
    const textBad = push({ payload: { commits: [{ message: 'fixYY' }] } });
    const file = writeLines([
      JSON.stringify(valid),
      ...bad,
      loginBad,
      withBytes(textBad, 'YY', [0xed, 0xa0, 0x80]),
    ]);
    const r = await importFile(deps(), localFileSource(file), ALL);
    expect(r.outcome).toBe('completed');
    expect(r.counts).toMatchObject({ pushes: 2, created: 2, malformed: 3 });

    const stored = await sql<{
      id: string;
      ref: string;
      payload: { commits?: { message: string }[] };
    }>`
      SELECT id::text, ref, payload FROM push_events WHERE id = ANY(${[valid.id, textBad.id]}::bigint[])
      ORDER BY id`.execute(t.db);
    expect(stored.rows.map((x) => x.ref)).toEqual(['refs/heads/main', 'refs/heads/main']);
    // Free text: each invalid byte made visible as U+FFFD, never dropped silently.
    expect(stored.rows[1]!.payload.commits![0]!.message).toBe('fix\ufffd\ufffd\ufffd');
    const aside = await rejected();
    expect(aside.map((a) => a.reason)).toEqual(['invalid_text', 'invalid_text', 'invalid_text']);
    expect(aside[0]!.message).toMatch(
      /payload\.ref contains a lone UTF-16 surrogate \(or bytes that are not UTF-8\)/,
    );
    expect(aside[2]!.message).toMatch(/actor\.login contains/);
    // Two distinct events, two rows: nothing collapsed.
    expect(new Set(aside.map((a) => a.event_id)).size).toBe(3);
  });

  it('JSON that is not an event ({}, objects without type or id) is rejected, not counted as an event', async () => {
    await sql`TRUNCATE rejected_events`.execute(t.db);
    const good = push();
    const file = writeLines([
      '{}',
      '{"a":1}',
      '{ }',
      '{"type":"PushEvent"}',
      '{"id":"5","note":"PushEvent"}',
      JSON.stringify(otherEvent('WatchEvent', { id: idSeq++ })),
      JSON.stringify(good),
      '[1,2]',
      '7',
    ]);
    const r = await importFile(deps(), localFileSource(file), ALL);
    expect(r.counts).toMatchObject({ events: 2, pushes: 1, created: 1, malformed: 7 });
    const reasons = (await rejected()).map((a) => a.reason).sort();
    // `{"type":"PushEvent"}` claims to be a push: the rules judge it (its id is missing).
    expect(reasons).toEqual([
      'malformed',
      'malformed',
      'malformed',
      'not_an_event',
      'not_an_event',
      'not_an_event',
      'not_an_event',
    ]);
  });

  it('a file of thousands of bad lines keeps the first REJECTED_SAMPLE raw and counts every one', async () => {
    await sql`TRUNCATE rejected_events`.execute(t.db);
    const bad = REJECTED_SAMPLE * 2 + 500;
    const pushes = [push(), push(), push()];
    const lines = [
      JSON.stringify(pushes[0]),
      ...Array.from({ length: bad }, (_, i) => `garbage line ${i}`),
      JSON.stringify(pushes[1]),
      '{"broken": ',
      JSON.stringify(pushes[2]),
    ];
    const file = writeLines(lines);
    const r = await importFile(deps(), localFileSource(file), ALL, { chunkRows: 1 });
    expect(r).toMatchObject({
      outcome: 'completed',
      counts: { pushes: 3, created: 3, malformed: bad + 1 },
      quarantined: REJECTED_SAMPLE,
    });
    const rows = await sql<{ n: string }>`SELECT count(*)::text AS n FROM rejected_events`.execute(
      t.db,
    );
    expect(rows.rows[0]!.n).toBe(String(REJECTED_SAMPLE));
    const cp = await sql<{ malformed: string }>`
      SELECT malformed::text FROM backfill_files WHERE file = ${file}`.execute(t.db);
    expect(cp.rows[0]!.malformed).toBe(String(bad + 1));

    // Read again: the sample is the same lines (seen again), still no more rows.
    const again = await importFile(deps(), localFileSource(file), ALL, { force: true });
    expect(again.counts.malformed).toBe(bad + 1);
    const after = await sql<{ n: string; seen: string }>`
      SELECT count(*)::text AS n, min(seen_count)::text AS seen FROM rejected_events`.execute(t.db);
    expect(after.rows[0]).toEqual({ n: String(REJECTED_SAMPLE), seen: '2' });
  });

  it('rejected_events not seen for RETENTION_DAYS are pruned; the metric tally keeps their count', async () => {
    await sql`TRUNCATE rejected_events`.execute(t.db);
    await sql`DELETE FROM metric_tallies WHERE metric = 'gpi_events_rejected_total'`.execute(t.db);
    const now = new Date();
    const old = new Date(now.getTime() - 40 * 86_400_000);
    const row = (key: string, lastSeen: Date) => ({
      event_key: key,
      reason: 'malformed',
      message: 'm',
      raw: '{}',
      raw_exact: true,
      first_seen_at: old,
      last_seen_at: lastSeen,
    });
    await t.db
      .insertInto('rejected_events')
      .values([row('a', old), row('b', old), row('c', old), row('seen-lately', now)])
      .execute();
    const report = await pruneLedgers(t.db, { retentionDays: 30, now, batchSize: 2 });
    expect(report.deleted.rejected_events).toBe(3);
    const left = await sql<{ event_key: string }>`SELECT event_key FROM rejected_events`.execute(
      t.db,
    );
    expect(left.rows).toEqual([{ event_key: 'seen-lately' }]);
    const tally = await sql<{ n: string }>`
      SELECT n::text FROM metric_tallies WHERE metric = 'gpi_events_rejected_total'`.execute(t.db);
    expect(tally.rows).toEqual([{ n: '3' }]);
  });
});
