import { sql } from 'kysely';
import { beforeAll, describe, expect, it } from 'vitest';
import { runOn } from '../../src/export/hour-query.ts';
import { LockSpace } from '../../src/platform/db/locks.ts';
import { hourOf } from '../../src/store/archive-hours.ts';
import { openReasonsBetween } from '../../src/store/open-hours.ts';
import { fileLockKey, importHolds } from '../../src/store/open-imports.ts';
import { addSource } from '../../src/store/sources.ts';
import { useTestDatabase } from '../support/db.ts';

/**
 * Which hours an unfinished import holds open (ADR 0185), from backfill_files alone: the
 * hours its checkpoint says it writes into (writes_from … writes_to), `importing` while its
 * file lock is held, `incomplete` once it stopped part-way with nothing completed since —
 * except a gap's, which its gap keeps open instead. And the other reasons an hour is open:
 * an open gap over it, the minutes after its end.
 */

const t = useTestDatabase();
const H = 3_600_000;
const base = hourOf(new Date('2026-11-10T00:00:00Z')).start.getTime();
const at = (hours: number) => new Date(base + hours * H);
/** The last millisecond before hour `hours` starts. */
const lastBefore = (hours: number) => new Date(base + hours * H - 1);

interface Row {
  file: string;
  scope?: string;
  mirror?: string;
  state: 'running' | 'completed' | 'failed' | 'open' | 'missing';
  lines?: number;
  gapId?: number | null;
  from: Date | null;
  to: Date | null;
}

async function checkpoint(r: Row): Promise<void> {
  await sql`INSERT INTO backfill_files (file, scope, mirror, state, lines_done, gap_id, writes_from, writes_to)
    VALUES (${r.file}, ${r.scope ?? 'all'}, ${r.mirror ?? 'https://m.example'}, ${r.state},
      ${r.lines ?? 0}, ${r.gapId ?? null}, ${r.from}, ${r.to})`.execute(t.db);
}

async function holds(from: Date, to: Date) {
  const m = await importHolds(runOn(t.db), from, to);
  return Object.fromEntries(
    [...m].sort((a, b) => a[0] - b[0]).map(([k, v]) => [(k - base) / H, v]),
  );
}

let gapId: number;

beforeAll(async () => {
  const { source } = await addSource(t.db, { kind: 'public' }, 'live');
  const gap = await t.db
    .insertInto('gaps')
    .values({ source_id: source.id, from_at: at(30), to_at: at(30.5), next_attempt_at: new Date() })
    .returning('id')
    .executeTakeFirstOrThrow();
  gapId = Number(gap.id);
});

describe('the hours an import holds open', () => {
  it('importing while its lock is held, incomplete once it died, nothing once another copy completed', async () => {
    // An archive hour's import announces that hour and the one before it.
    await checkpoint({ file: 'h2', state: 'running', lines: 10, from: at(1), to: lastBefore(3) });
    const lock = await t.pool.connect();
    try {
      await lock.query('SELECT pg_advisory_lock($1, $2)', [
        LockSpace.backfillFile,
        fileLockKey('h2', 'all', 'https://m.example'),
      ]);
      expect(await holds(at(0), at(6))).toEqual({ 1: 'importing', 2: 'importing' });
    } finally {
      await lock.query('SELECT pg_advisory_unlock_all()');
      lock.release();
    }
    // Its process died (its lock went with its session): the rest of the file is not here.
    expect(await holds(at(0), at(6))).toEqual({ 1: 'incomplete', 2: 'incomplete' });
    // The same file completed from another mirror since: nothing is missing.
    await checkpoint({
      file: 'h2',
      mirror: 'https://other.example',
      state: 'completed',
      lines: 20,
      from: at(1),
      to: lastBefore(3),
    });
    expect(await holds(at(0), at(6))).toEqual({});
  });

  it('a failed or open import with lines read is incomplete; one that read nothing is not', async () => {
    await checkpoint({ file: 'h11', state: 'failed', lines: 5, from: at(10), to: lastBefore(12) });
    await checkpoint({ file: 'h13', state: 'open', lines: 7, from: at(12), to: lastBefore(14) });
    await checkpoint({ file: 'h15', state: 'failed', lines: 0, from: at(14), to: lastBefore(16) });
    await checkpoint({ file: 'h17', state: 'missing', lines: 0, from: at(16), to: lastBefore(18) });
    expect(await holds(at(9), at(19))).toEqual({
      10: 'incomplete',
      11: 'incomplete',
      12: 'incomplete',
      13: 'incomplete',
    });
  });

  it("a local file's import holds the hours its chunks wrote into; a gap's leaves them to its gap", async () => {
    await checkpoint({
      file: '/srv/some.json.gz',
      mirror: '',
      state: 'failed',
      lines: 100,
      from: at(20.25),
      to: at(22.5),
    });
    await checkpoint({
      file: 'h31',
      scope: `gap:${gapId}`,
      state: 'failed',
      lines: 100,
      gapId,
      from: at(30),
      to: at(30.5),
    });
    expect(await holds(at(19), at(33))).toEqual({
      20: 'incomplete',
      21: 'incomplete',
      22: 'incomplete',
    });
    const reasons = await openReasonsBetween(runOn(t.db), at(29), at(33), at(40));
    expect(Object.fromEntries([...reasons].map(([k, v]) => [(k - base) / H, v]))).toEqual({
      30: ['gap'],
    });
  });

  it('an hour is settling for the minutes after its end, and only then', async () => {
    const now = new Date(at(50).getTime() + 10 * 60_000);
    const reasons = await openReasonsBetween(runOn(t.db), at(47), at(50), now);
    expect(Object.fromEntries([...reasons].map(([k, v]) => [(k - base) / H, v]))).toEqual({
      49: ['settling'],
    });
    const later = new Date(at(50).getTime() + 16 * 60_000);
    expect((await openReasonsBetween(runOn(t.db), at(47), at(50), later)).size).toBe(0);
  });
});
