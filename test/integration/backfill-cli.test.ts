import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addSource } from '../../src/store/sources.ts';
import { type ArchiveServer, gzipLines, startArchiveServer } from '../support/archive-server.ts';
import { runBin } from '../support/cli.ts';
import { useTestDatabase } from '../support/db.ts';
import { pushEvent } from '../support/github-factories.ts';

/** bin/backfill, the real executable, as an operator runs it (no TTY). */

const t = useTestDatabase();
let archive: ArchiveServer;
let dir: string;

beforeAll(async () => {
  archive = await startArchiveServer();
  dir = mkdtempSync(path.join(tmpdir(), 'gpi-backfill-cli-'));
});
afterAll(async () => {
  await archive.close();
  rmSync(dir, { recursive: true, force: true });
});

const backfill = (argv: string[]) =>
  runBin('backfill', argv, { DATABASE_URL: t.url, GHARCHIVE_URL: archive.url, LOG_LEVEL: 'warn' });

let id = 83_000_000_000;
const pushes = (n: number, o: Parameters<typeof pushEvent>[0] = {}) =>
  Array.from({ length: n }, () => pushEvent({ id: id++, ...o }));

describe('bin/backfill', () => {
  it('says how many rejected lines were kept raw and how many only counted', async () => {
    const file = path.join(dir, 'many-bad.json.gz');
    const garbage = Array.from({ length: 1_005 }, (_, i) => `not json ${i}`);
    writeFileSync(file, gzipLines([...pushes(1), ...garbage, '{}']));
    const r = await backfill([file]);
    expect(r.code).toBe(0);
    expect(r.out).toMatch(
      /: completed: 1 events, 1 pushes, 1 stored, 1,006 malformed lines set aside \(1,000 kept in rejected_events, 6 counted only\) in /,
    );
    const json = JSON.parse((await backfill([file, '--json', '--force'])).out);
    expect(json.results[0]).toMatchObject({ counts: { malformed: 1_006 }, quarantined: 1_000 });
  });

  it('imports a file and an hour, one line each, and exits 1 naming a missing hour', async () => {
    const file = path.join(dir, 'local.json.gz');
    writeFileSync(file, gzipLines(pushes(3)));
    archive.setHour('2026-11-17-4', pushes(2, { created_at: '2026-11-17T04:10:00Z' }));
    const r = await backfill([file, '2026-11-17-4', '2026-11-17-5']);
    expect(r.code).toBe(1);
    const lines = r.out.trim().split('\n');
    expect(lines[0]).toMatch(/^\/.*local\.json\.gz: completed: 3 events, 3 pushes, 3 stored in /);
    expect(lines[1]).toMatch(/^2026-11-17-4: completed: 2 events, 2 pushes, 2 stored in /);
    expect(lines[2]).toMatch(
      /^2026-11-17-5: failed: ARCHIVE_HOUR_MISSING: http:\/\/127\.0\.0\.1:\d+\/2026-11-17-5\.json\.gz is not on the archive \(404\)/,
    );
    // Running it again would not help: it says what would.
    expect(lines[2]).toMatch(
      /; this mirror has no file for the hour .*try another mirror \(--mirror URL or --mirror all\), or later$/,
    );
    expect(lines[2]).not.toContain('run the same command again');
    expect(lines[3]).toBe(
      'backfill: 3 files: 2 imported, 0 already imported, 1 not completed; 5 pushes stored',
    );
    // The log (stderr) names the failure too; stdout stays the command's own output.
    expect(r.err).toMatch(/"event":"backfill.file_failed"/);

    const again = await backfill([file, '--json']);
    expect(again.code).toBe(0);
    const json = JSON.parse(again.out);
    expect(json.summary).toEqual({
      files: 1,
      completed: 0,
      alreadyImported: 1,
      failed: 0,
      pushesStored: 0,
    });
    expect(json.results[0]).toMatchObject({ outcome: 'already_imported', totals: { created: 3 } });
  });

  it('a zero-padded hour is that hour, read by its GH Archive name', async () => {
    archive.setHour('2026-11-17-6', pushes(2, { created_at: '2026-11-17T06:10:00Z' }));
    const r = await backfill(['2026-11-17-06']);
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/^2026-11-17-6: completed: 2 events, 2 pushes, 2 stored in /m);
  });

  it('a mirror nobody answers at says what to check, then to run it again', async () => {
    const r = await runBin('backfill', ['2026-11-17-7'], {
      DATABASE_URL: t.url,
      GHARCHIVE_URL: 'http://127.0.0.1:9',
      LOG_LEVEL: 'warn',
    });
    expect(r.code).toBe(1);
    expect(r.out).toMatch(
      /^2026-11-17-7: failed: ARCHIVE_UNAVAILABLE: http:\/\/127\.0\.0\.1:9\/2026-11-17-7\.json\.gz: connect ECONNREFUSED 127\.0\.0\.1:9; nothing answers there: check the mirror's URL in GHARCHIVE_URL \(or --mirror\) and that it is up: .*; once the mirror answers, run the same command again to resume from its checkpoint$/m,
    );
  });

  it("a mirror's HTML 200 is reported as what it is, not a truncated file to run again", async () => {
    const page =
      '<!DOCTYPE html>\n<html><head><title>Sign in \u202e\u001b[31m</title></head><body>…</body></html>';
    archive.setFile('2026-11-17-9', Buffer.from(page.repeat(50)), 'text/html; charset=utf-8');
    archive.setFile('2026-11-17-10', Buffer.from('{"error":"quota"}'), 'application/json');
    const r = await backfill(['2026-11-17-9', '2026-11-17-10']);
    expect(r.code).toBe(1);
    const [html, json] = r.out.trim().split('\n');
    expect(html).toMatch(
      /^2026-11-17-9: failed: ARCHIVE_NOT_GZIP: http:\/\/127\.0\.0\.1:\d+\/2026-11-17-9\.json\.gz is not a GH Archive hour file: the mirror answered 200 with an HTML page "<!DOCTYPE html>\\n<html><head><title>Sign in \\u202e\\u001b\[31m<\/title>/,
    );
    expect(html).toMatch(
      /\(content-type "text\/html; charset=utf-8"\), not gzip; check the mirror's URL/,
    );
    expect(html).toMatch(/running it again reads the same page: check the mirror in GHARCHIVE_URL/);
    expect(html).not.toMatch(/ARCHIVE_TRUNCATED|resume/);
    // Never the page raw: no escape sequence or bidi override reaches the terminal.
    expect(r.out).not.toContain('\u001b');
    expect(r.out).not.toContain('\u202e');
    expect(json).toMatch(
      /^2026-11-17-10: failed: ARCHIVE_NOT_GZIP: .* with JSON "\{\\"error\\":\\"quota\\"\}" \(an hour file is gzipped NDJSON\)/,
    );
    // Recorded as failed, with the same words.
    const rows = await sql<{ state: string; error: string }>`
      SELECT state, error FROM backfill_files WHERE file = '2026-11-17-9'`.execute(t.db);
    expect(rows.rows).toEqual([
      {
        state: 'failed',
        error: expect.stringMatching(/is not a GH Archive hour file: .*an HTML page/),
      },
    ]);
  });

  it('--source keeps its scope and attributes the rows to the source', async () => {
    const { source } = await addSource(t.db, { kind: 'user', target: 'Scoped-User' }, 'live');
    const mine = pushes(2, { actor: { id: 4_400_001, login: 'scoped-user' } });
    const file = path.join(dir, 'scoped.json');
    writeFileSync(file, [...mine, ...pushes(5)].map((e) => JSON.stringify(e)).join('\n'));
    const r = await backfill([file, '--source', String(source.id)]);
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/7 events, 7 pushes, 2 kept, 2 stored/);
    const rows = await sql<{ id: string; source_id: string }>`
      SELECT id::text AS id, source_id::text FROM push_events WHERE actor_id = 4400001 ORDER BY id`.execute(
      t.db,
    );
    expect(rows.rows).toEqual(mine.map((e) => ({ id: e.id, source_id: String(source.id) })));
  });

  it('refuses bad arguments with exit 2, naming what was wrong', async () => {
    for (const [argv, says] of [
      [[], /give at least one FILE or HOUR, or --gaps/],
      [['no-such-file.json.gz'], /"no-such-file\.json\.gz" is neither a file nor an hour/],
      [['2026-11-17-24'], /"2026-11-17-24" is not a real hour/],
      [['--gaps', '2026-11-17-4'], /--gaps takes no files/],
      [['--source', 'x', '2026-11-17-4'], /--source must be a positive integer/],
      [['--nope'], /Unknown option '--nope'/],
    ] as const) {
      const r = await backfill([...argv]);
      expect(r.code, argv.join(' ')).toBe(2);
      expect(r.err, argv.join(' ')).toMatch(says);
      expect(r.out).toBe('');
    }
    const help = await backfill(['--help']);
    expect(help.code).toBe(0);
    expect(help.out).toMatch(/^Usage:\n {2}bin\/backfill FILE\|HOUR\.\.\./);
  });

  it('refuses hours in the future, fetching nothing; warns on hours before GH Archive', async () => {
    const requested = archive.requests.length;
    for (const [argv, says] of [
      [
        ['9999-01-01-1'],
        /^backfill: hour 9999-01-01-1 is in the future \(it starts 9999-01-01T01:00:00\.000Z\); nothing fetched$/m,
      ],
      [['2026-11-17-4', '2099-06-01-0'], /^backfill: hour 2099-06-01-0 is in the future/m],
    ] as const) {
      const r = await backfill([...argv]);
      expect(r.code, argv.join(' ')).toBe(2);
      expect(r.err, argv.join(' ')).toMatch(says);
      expect(r.out).toBe('');
    }
    expect(archive.requests.length).toBe(requested);

    archive.setHour('2011-01-01-0', pushes(1, { created_at: '2011-01-01T00:10:00Z' }));
    const old = await backfill(['2011-01-01-0']);
    expect(old.code).toBe(0);
    expect(old.err).toContain(
      "backfill: warning: hour 2011-01-01-0 is before GH Archive's first hour (2011-02-12-0)",
    );
    expect(old.out).toMatch(/^2011-01-01-0: completed: 1 events, 1 pushes, 1 stored in /);
  });

  it('refuses a file that killed its importer twice, until --force', async () => {
    const file = path.join(dir, 'killer.json');
    writeFileSync(file, JSON.stringify(pushEvent({ id: id++ })));
    // As two SIGKILLed imports leave it (test/recovery/backfill.test.ts kills one for real).
    await sql`
      INSERT INTO backfill_files (file, scope, state, lines_done, deaths, attempts, error)
      VALUES (${file}, 'all', 'failed', 0, 2, 2, 'interrupted: the process importing it died')`.execute(
      t.db,
    );
    const refused = await backfill([file]);
    expect(refused.code).toBe(1);
    expect(refused.out).toMatch(
      /killer\.json: failed: BACKFILL_KILLED_IMPORTER: .*killed its importer 2 times \(last at line 0\); not read again: --force reads it again: 0 events/,
    );
    expect(refused.out).not.toMatch(/run the same command again/);
    const forced = await backfill([file, '--force']);
    expect(forced.code).toBe(0);
    expect(forced.out).toMatch(/killer\.json: completed: 1 events, 1 pushes, 1 stored/);
  });

  it('--source with an unknown id exits 1', async () => {
    const file = path.join(dir, 'any.json');
    writeFileSync(file, JSON.stringify(pushEvent({ id: id++ })));
    const r = await backfill([file, '--source', '9999']);
    expect(r.code).toBe(1);
    expect(r.err).toMatch(/no source with id 9999/);
  });

  it('--gaps fills what it can and says why the rest waits', async () => {
    const { source } = await addSource(t.db, { kind: 'public' }, 'live');
    await t.db
      .insertInto('gaps')
      .values([
        {
          source_id: source.id,
          from_at: new Date('2026-11-16T08:10:00Z'),
          to_at: new Date('2026-11-16T08:20:00Z'),
          // In backoff: --gaps tries it anyway (an operator asked).
          next_attempt_at: new Date(Date.now() + 3_600_000),
        },
        {
          source_id: source.id,
          from_at: new Date(Date.now() - 600_000),
          to_at: new Date(Date.now() - 300_000),
        },
      ])
      .execute();
    const dropped = pushes(4, { created_at: '2026-11-16T08:15:00Z' });
    archive.setHour('2026-11-16-8', dropped);
    for (const h of ['2026-11-16-7', '2026-11-16-9', '2026-11-16-10']) archive.setHour(h, []);
    const r = await backfill(['--gaps']);
    expect(r.code).toBe(0);
    const lines = r.out.trim().split('\n');
    expect(lines[0]).toMatch(
      /^gap \d+ \(source \d+ public, 2026-11-16T08:10:00Z … 2026-11-16T08:20:00Z\): filled, 4 pushes recovered from 4 archive hours$/,
    );
    expect(lines[1]).toMatch(/: waiting for the archive to publish its hours \(after .*\)$/);
    const json = JSON.parse((await backfill(['--gaps', '--json'])).out);
    expect(json.gaps.map((g: { outcome: string }) => g.outcome)).toEqual(['waiting']);
  });
});

describe('bin/backfill with several mirrors', () => {
  let second: ArchiveServer;
  beforeAll(async () => {
    second = await startArchiveServer();
  });
  afterAll(async () => {
    await second.close();
  });
  const both = (argv: string[], env: Record<string, string> = {}) =>
    runBin('backfill', argv, {
      DATABASE_URL: t.url,
      GHARCHIVE_URL: `${archive.url},${second.url}`,
      LOG_LEVEL: 'warn',
      ...env,
    });

  it('--mirror all reads an hour from each, stores the union once, and a second run adds nothing', async () => {
    const at = { created_at: '2026-11-15T03:10:00Z' };
    const common = pushes(3, at);
    archive.setHour('2026-11-15-3', [...common, ...pushes(2, at)]);
    second.setHour('2026-11-15-3', [...common, ...pushes(4, at)]);
    const r = await both(['2026-11-15-3', '--mirror', 'all', '--json']);
    expect(r.code).toBe(0);
    const json = JSON.parse(r.out);
    expect(json.summary).toMatchObject({ files: 2, completed: 2, pushesStored: 9 });
    expect(json.results.map((x: { label: string }) => x.label)).toEqual([
      `${archive.url}/2026-11-15-3.json.gz`,
      `${second.url}/2026-11-15-3.json.gz`,
    ]);
    expect(json.results.map((x: { counts: { created: number } }) => x.counts.created)).toEqual([
      5, 4,
    ]);
    const again = await both(['2026-11-15-3', '--mirror', 'all']);
    expect(again.code).toBe(0);
    expect(again.out).toMatch(/2026-11-15-3\.json\.gz: already imported \(5 pushes stored then\)/);
    expect(again.out).toMatch(/2026-11-15-3\.json\.gz: already imported \(4 pushes stored then\)/);
    // One mirror by URL: its own checkpoint, so a mirror never read before is read.
    second.setHour('2026-11-15-4', pushes(2, { created_at: '2026-11-15T04:10:00Z' }));
    const one = await both(['2026-11-15-4', '--mirror', second.url]);
    expect(one.code).toBe(0);
    expect(one.out).toMatch(
      /^http:\/\/127\.0\.0\.1:\d+\/2026-11-15-4\.json\.gz: completed: .* 2 stored/,
    );
    // The default is the first mirror, which lacks that hour.
    const first = await both(['2026-11-15-4']);
    expect(first.code).toBe(1);
    expect(first.out).toMatch(/^2026-11-15-4: failed: ARCHIVE_HOUR_MISSING/);
  });

  it('--gaps --json says per mirror and hour what was read, missing and added', async () => {
    const { source } = await addSource(t.db, { kind: 'org', target: 'mirror-cli-org' }, 'live');
    await t.db
      .insertInto('gaps')
      .values({
        source_id: source.id,
        from_at: new Date('2026-11-14T08:10:00Z'),
        to_at: new Date('2026-11-14T08:20:00Z'),
      })
      .execute();
    const org = { id: 5_550_001, login: 'mirror-cli-org' };
    const dropped = pushes(3, { created_at: '2026-11-14T08:15:00Z', org });
    for (const h of ['2026-11-14-7', '2026-11-14-9', '2026-11-14-10']) {
      archive.setHour(h, []);
      second.setHour(h, []);
    }
    second.setHour('2026-11-14-8', dropped); // the first mirror lacks it
    const r = await both(['--gaps']);
    expect(r.code).toBe(0);
    const lines = r.out.trim().split('\n');
    expect(lines.find((l) => l.includes('mirror-cli-org'))).toMatch(
      /: filled, 3 pushes recovered from 4 archive hours$/,
    );
    expect(lines).toContain(`  ${archive.url}: 3 hours read, 1 missing, 0 failed; 0 pushes added`);
    expect(lines).toContain(`  ${second.url}: 4 hours read, 0 missing, 0 failed; 3 pushes added`);
    // Opened again by hand: --gaps --json re-reads only what is not imported, and says so.
    await t.db
      .updateTable('gaps')
      .set({ state: 'open' })
      .where('source_id', '=', source.id)
      .execute();
    const json = JSON.parse((await both(['--gaps', '--json'])).out);
    const late = json.gaps.find((g: { sourceId: number }) => g.sourceId === Number(source.id));
    expect(late.outcome).toBe('filled');
    expect(late.mirrors).toContainEqual(
      expect.objectContaining({
        mirror: archive.url,
        hour: '2026-11-14-8',
        state: 'missing',
        pushesAdded: 0,
      }),
    );
    expect(late.mirrors).toContainEqual(
      expect.objectContaining({
        mirror: second.url,
        hour: '2026-11-14-8',
        state: 'imported',
        pushesAdded: 3,
      }),
    );
  });

  it('exits 2 naming GHARCHIVE_URL and its bad entry, or a bad --mirror', async () => {
    const bad = await both(['2026-11-15-3'], {
      GHARCHIVE_URL: `${archive.url},ftp://x.example.org`,
    });
    expect(bad.code).toBe(2);
    expect(bad.err).toMatch(
      /GHARCHIVE_URL each mirror must be an http\(s\) URL or a file:\/\/ directory \(got "ftp:\/\/x\.example\.org"\)/,
    );
    const flag = await both(['2026-11-15-3', '--mirror', 'mirror.example.org']);
    expect(flag.code).toBe(2);
    expect(flag.err).toMatch(
      /--mirror must be all, an http\(s\) URL or a file:\/\/ directory \(got "mirror\.example\.org"\)/,
    );
    const gaps = await both(['--gaps', '--mirror', 'all']);
    expect(gaps.code).toBe(2);
    // Empty is refused, not read as unset (which would mean data.gharchive.org): one line.
    const empty = await both(['2026-11-15-3'], { GHARCHIVE_URL: '' });
    expect(empty.code).toBe(2);
    expect(empty.err.trim().split('\n')).toEqual([
      'backfill: configuration error: GHARCHIVE_URL must not be empty: unset it for https://data.gharchive.org, or list at least one mirror',
    ]);
  });
});
