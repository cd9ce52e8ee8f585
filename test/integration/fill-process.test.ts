import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { childFill } from '../../src/backfill/fill-process.ts';
import { loadConfig } from '../../src/platform/config/config.ts';
import { AppError } from '../../src/platform/errors.ts';
import { hourOf } from '../../src/store/archive-hours.ts';
import { addSource } from '../../src/store/sources.ts';
import type { Deps } from '../../src/work/deps.ts';
import { type ArchiveServer, startArchiveServer } from '../support/archive-server.ts';
import { useTestDatabase } from '../support/db.ts';
import { pushEvent } from '../support/github-factories.ts';

const minuteAgo = () => new Date(Date.now() - 60_000);

/**
 * The worker's fill runner (ADR 0061) as the backfill job calls it: it starts a child only
 * when a gap is due, gets the child's results over IPC, and turns an error in the child
 * into an error of the job — not a death. (Deaths: test/recovery/fill-crash.test.ts.)
 */

const t = useTestDatabase();
let archive: ArchiveServer;
const savedArchiveUrl = process.env.GHARCHIVE_URL;

beforeAll(async () => {
  archive = await startArchiveServer();
  // The child reads its configuration from the environment it inherits, as bin/worker's does.
  process.env.GHARCHIVE_URL = archive.url;
});
afterAll(async () => {
  if (savedArchiveUrl === undefined) delete process.env.GHARCHIVE_URL;
  else process.env.GHARCHIVE_URL = savedArchiveUrl;
  await archive.close();
});

/**
 * childFill reads only the database and the mirrors (its probe for a due gap or mirror hour);
 * the child builds its own app.
 */
const deps = () =>
  ({ db: t.db, config: loadConfig({ GHARCHIVE_URL: archive.url }) }) as unknown as Deps;

const pass = () => ({
  jobId: 'job-child',
  deadline: Date.now() + 60_000,
  signal: new AbortController().signal,
});

describe('childFill', () => {
  it('starts no process when nothing is due', async () => {
    // A child given a database it cannot reach would fail the run: resolving proves none started.
    expect(await childFill('postgres://postgres@127.0.0.1:1/nowhere')(deps(), pass())).toEqual({
      results: [],
      died: null,
    });
  });

  it('fills a due gap in a child and hands back its results', async () => {
    const repo = { id: 6_920_001, name: 'child-owner/child' };
    const { source } = await addSource(t.db, { kind: 'repo', target: repo.name }, 'live');
    const to = hourOf(new Date(Date.now() - 3 * 86_400_000)).start;
    const from = new Date(to.getTime() - 20 * 60_000);
    await t.db
      .insertInto('gaps')
      // Due a minute ago: the column's default, the database's now(), can be microseconds
      // past the millisecond clock that asks which gaps are due.
      .values({ source_id: source.id, from_at: from, to_at: to, next_attempt_at: minuteAgo() })
      .execute();
    for (let h = -2; h <= 3; h++)
      archive.setHour(hourOf(new Date(to.getTime() + h * 3_600_000)).name, []);
    archive.setHour(hourOf(from).name, [
      pushEvent({ id: 84_000_000_001, repo, created_at: new Date(from.getTime() + 60_000) }),
    ]);
    const run = await childFill(t.url)(deps(), pass());
    expect(run.died).toBeNull();
    expect(run.results).toEqual([
      expect.objectContaining({ outcome: 'filled', eventsRecovered: 1 }),
    ]);
    // Dates survive the trip (advanced serialization).
    expect(run.results[0]!.toAt).toEqual(to);
  });

  it('starts a child for an hour of a filled gap that a mirror lacked, once it is due', async () => {
    const repo = { id: 6_920_003, name: 'child-owner/late' };
    const { source } = await addSource(t.db, { kind: 'repo', target: repo.name }, 'live');
    const hour = hourOf(new Date(Date.now() - 5 * 3_600_000));
    const gap = await t.db
      .insertInto('gaps')
      .values({
        source_id: source.id,
        from_at: new Date(hour.start.getTime() + 10 * 60_000),
        to_at: new Date(hour.start.getTime() + 20 * 60_000),
        next_attempt_at: minuteAgo(),
        state: 'filled',
        filled_at: minuteAgo(),
      })
      .returning('id')
      .executeTakeFirstOrThrow();
    // The mirror said it had no such hour two hours ago: due to be asked again.
    await t.db
      .insertInto('backfill_files')
      .values({
        file: hour.name,
        scope: `gap:${gap.id}`,
        source_id: source.id,
        gap_id: gap.id,
        state: 'missing',
        mirror: archive.url,
        hour: hour.start,
        attempts: 1,
        updated_at: new Date(Date.now() - 2 * 3_600_000),
      })
      .execute();
    archive.setHour(hour.name, [
      pushEvent({
        id: 84_000_000_101,
        repo,
        created_at: new Date(hour.start.getTime() + 15 * 60_000),
      }),
    ]);
    const run = await childFill(t.url)(deps(), pass());
    expect(run.died).toBeNull();
    expect(run.results).toEqual([
      expect.objectContaining({ outcome: 'mirror_retried', eventsRecovered: 1 }),
    ]);
  });

  it('turns an error in the child into an error of the job, naming it', async () => {
    const repo = { id: 6_920_002, name: 'child-owner/broken' };
    const { source } = await addSource(t.db, { kind: 'repo', target: repo.name }, 'live');
    const to = hourOf(new Date(Date.now() - 4 * 86_400_000)).start;
    await t.db
      .insertInto('gaps')
      .values({
        source_id: source.id,
        from_at: new Date(to.getTime() - 60_000),
        to_at: to,
        next_attempt_at: minuteAgo(),
      })
      .execute();
    // A database the child cannot reach (the parent's probe used its own pool).
    const failed = childFill('postgres://postgres@127.0.0.1:1/nowhere')(deps(), pass());
    await expect(failed).rejects.toBeInstanceOf(AppError);
    await expect(failed).rejects.toThrow(/127\.0\.0\.1:1|ECONNREFUSED|connect/i);
  });
});
