import { createHash } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { gunzipSync } from 'node:zlib';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { main } from '../../src/cli/export.ts';
import { inHourSnapshot, writeHour } from '../../src/export/write.ts';
import { UsageError } from '../../src/platform/errors.ts';
import { type ArchiveHour, hourOf } from '../../src/store/archive-hours.ts';
import { emailFor } from '../../src/store/commits.ts';
import { captureMain, runBin } from '../support/cli.ts';
import { useTestDatabase } from '../support/db.ts';
import { buildExportWorld, type ExportWorld } from '../support/export-world.ts';

/**
 * bin/export and the hour file it writes (ADR 0130), against a store holding one
 * of every kind of push (test/support/export-world.ts): the lines, their order and keys,
 * what a pending, partial, tag, fetched or webhook-only push says, byte-identical twice.
 */

const t = useTestDatabase();
let w: ExportWorld;
const dirs: string[] = [];

beforeAll(async () => {
  w = await buildExportWorld(t);
});
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

async function exportBytes(hour: ArchiveHour) {
  const chunks: Buffer[] = [];
  const sink = new Writable({
    write(c: Buffer, _e, cb) {
      chunks.push(c);
      cb();
    },
  });
  const file = await inHourSnapshot(t.db, (run) => writeHour(run, hour, sink));
  return { bytes: Buffer.concat(chunks), file };
}

// biome-ignore lint/suspicious/noExplicitAny: a line as JSON.parse gives it back
type Line = Record<string, any>;

function linesOf(gz: Buffer): { text: string[]; events: Line[] } {
  const text = gunzipSync(gz).toString('utf8').split('\n');
  expect(text.pop()).toBe('');
  return { text, events: text.map((l) => JSON.parse(l) as Line) };
}

const byHead = (events: Line[], head: string) => events.find((e) => e.payload.head === head)!;

async function storedCommits(head: string) {
  const r = await sql<{
    sha: string;
    distinct: boolean | null;
    author_name: string;
    author_email: string;
    message: string;
  }>`
    SELECT pc.sha, pc."distinct", c.author_name, c.author_email, c.message
    FROM push_commits pc JOIN commits c USING (repository_id, sha)
    WHERE pc.head = ${head} ORDER BY pc.position`.execute(t.db);
  return r.rows;
}

describe('an exported hour', () => {
  it('has one line per visible push, in (created_at, id, natural key) order, keys in GH Archive order', async () => {
    const { events, text } = linesOf((await exportBytes(w.pushHour)).bytes);
    expect(events).toHaveLength(w.visible);
    const heads = events.map((e) => e.payload.head);
    expect(heads).not.toContain(w.heads.privateRepo);
    expect(heads).not.toContain(w.heads.webhookUnknownRepo);
    // Same second: the smaller event id first.
    expect(heads.indexOf(w.heads.tieB)).toBe(heads.indexOf(w.heads.tieA) - 1);
    const times = events.map((e) => Date.parse(e.created_at));
    expect(times).toEqual([...times].sort((a, b) => a - b));
    for (const e of events) {
      expect(Object.keys(e).slice(0, 7)).toEqual([
        'id',
        'type',
        'actor',
        'repo',
        'payload',
        'public',
        'created_at',
      ]);
      expect(e.type).toBe('PushEvent');
      expect(e.public).toBe(true);
      expect(e.created_at).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$/);
      expect(hourOf(new Date(e.created_at)).name).toBe(w.pushHour.name);
      expect(e.payload.repository_id).toBe(e.repo.id);
      expect(Object.keys(e.actor)).toEqual([
        'id',
        'login',
        'display_login',
        'gravatar_id',
        'url',
        'avatar_url',
      ]);
    }
    const three = byHead(events, w.heads.three);
    expect(Object.keys(three.payload)).toEqual([
      'repository_id',
      'push_id',
      'size',
      'distinct_size',
      'ref',
      'head',
      'before',
      'commits',
    ]);
    expect(three.org).toEqual({
      id: w.org.id,
      login: w.org.login,
      gravatar_id: '',
      url: `https://api.github.com/orgs/${w.org.login}`,
      avatar_url: `https://avatars.githubusercontent.com/u/${w.org.id}?`,
    });
    expect(three.repo).toEqual({
      id: w.repo.id,
      name: w.repo.name,
      url: `https://api.github.com/repos/${w.repo.name}`,
    });
    // No spaces, nothing but what a compact JSON.stringify would write.
    expect(text.every((l) => JSON.stringify(JSON.parse(l)) === l)).toBe(true);
  });

  it('gives size, distinct_size and the commits as stored, e-mails as COMMIT_EMAILS left them', async () => {
    const { events } = linesOf((await exportBytes(w.pushHour)).bytes);
    const three = byHead(events, w.heads.three);
    expect(three.payload.size).toBe(3);
    expect(three.payload.distinct_size).toBe(2);
    const stored = await storedCommits(w.heads.three);
    expect(three.payload.commits).toEqual(
      stored.map((c) => ({
        sha: c.sha,
        author: { email: c.author_email, name: c.author_name },
        message: c.message,
        distinct: c.distinct,
        url: `https://api.github.com/repos/${w.repo.name}/commits/${c.sha}`,
      })),
    );
    // COMMIT_EMAILS=hash (the default): the hash of the address, never the address.
    expect(three.payload.commits[0].author.email).toBe(emailFor('Dev0@Example.com', 'hash'));
    expect(JSON.stringify(events)).not.toMatch(/@Example\.com/i);

    const unicode = byHead(events, w.heads.unicode);
    expect(unicode.payload.commits[0].message).toBe(
      'fix: ünïcode ✓ "quoted" \\ back\n\n\tindented',
    );
    expect(unicode.payload.commits[0].author.name).toBe('Zoë 🚀');
    expect(unicode.actor.display_login).toBe(unicode.actor.login.replace(/\[bot\]$/, ''));
  });

  it('lists the oldest 20 of a longer push, says nothing of pending commits, and an empty list for a tag', async () => {
    const { events } = linesOf((await exportBytes(w.pushHour)).bytes);
    const partial = byHead(events, w.heads.partial);
    expect(partial.payload.size).toBe(25);
    expect(partial.payload.distinct_size).toBe(25);
    expect(partial.payload.commits.map((c: Line) => c.sha)).toEqual(
      (await storedCommits(w.heads.partial)).slice(0, 20).map((c) => c.sha),
    );
    expect(partial.payload.commits).toHaveLength(20);

    const pending = byHead(events, w.heads.pending);
    expect(
      (
        await sql<{
          s: string;
        }>`SELECT commits_state AS s FROM push_events WHERE head = ${w.heads.pending}`.execute(t.db)
      ).rows[0]!.s,
    ).toBe('pending');
    expect(Object.keys(pending.payload)).toEqual([
      'repository_id',
      'push_id',
      'ref',
      'head',
      'before',
    ]);

    const skipped = byHead(events, w.heads.skipped);
    expect(Object.keys(skipped.payload)).toEqual([
      'repository_id',
      'push_id',
      'ref',
      'head',
      'before',
    ]);

    const tag = byHead(events, w.heads.tag);
    expect(tag.payload).toMatchObject({
      size: 0,
      distinct_size: 0,
      commits: [],
      ref: 'refs/tags/v1.0.0',
    });
  });

  it('writes a webhook-only push with "id": null and no push_id, a fetched one with distinct derived', async () => {
    const { events } = linesOf((await exportBytes(w.pushHour)).bytes);
    const hooked = byHead(events, w.heads.webhook);
    expect(hooked.id).toBeNull();
    expect(hooked.payload).not.toHaveProperty('push_id');
    expect(hooked.payload).toMatchObject({ size: 2, distinct_size: 2 });
    expect(hooked.payload.commits).toHaveLength(2);
    // The delivery's `organization` is the line's `org`, as the Events API writes it.
    expect(hooked.org).toMatchObject({ id: w.org.id, login: w.org.login });

    const fetched = byHead(events, w.heads.fetched);
    // The answer did not say: each commit is distinct in the first stored push that holds it,
    // and no other push of the repository holds these.
    expect(fetched.payload.size).toBe(4);
    expect(fetched.payload.distinct_size).toBe(4);
    expect(fetched.payload.commits.map((c: Line) => c.distinct)).toEqual([true, true, true, true]);
  });

  it('is byte-identical twice, and another file once the stored hour changes', async () => {
    const a = await exportBytes(w.pushHour);
    const b = await exportBytes(w.pushHour);
    expect(a.bytes.equals(b.bytes)).toBe(true);
    expect(a.file.sha256).toBe(createHash('sha256').update(a.bytes).digest('hex'));
    expect(a.file.bytes).toBe(a.bytes.length);
    // gzip's header: no file name, mtime 0.
    expect([...a.bytes.subarray(0, 8)]).toEqual([0x1f, 0x8b, 8, 0, 0, 0, 0, 0]);
    // A line writes the login its event carried: the account renamed since changes nothing.
    const rename = sql`UPDATE actors SET login = login || '-renamed' WHERE id IN (
      SELECT actor_id FROM push_events WHERE head = ${w.heads.three})`;
    const renameBack = sql`UPDATE actors SET login = left(login, -8) WHERE login LIKE '%-renamed'`;
    await rename.execute(t.db);
    expect((await exportBytes(w.pushHour)).bytes.equals(a.bytes)).toBe(true);
    await renameBack.execute(t.db);
    // A push stored before the store kept the event's names writes what the store knows:
    // the same line while nothing changed, another once the account is renamed.
    await sql`UPDATE push_events SET actor_login = NULL, repo_name = NULL, org_id = NULL,
      org_login = NULL WHERE head = ${w.heads.three}`.execute(t.db);
    expect((await exportBytes(w.pushHour)).bytes.equals(a.bytes)).toBe(true);
    await rename.execute(t.db);
    const c = await exportBytes(w.pushHour);
    expect(c.bytes.equals(a.bytes)).toBe(false);
    await renameBack.execute(t.db);
    expect((await exportBytes(w.pushHour)).bytes.equals(a.bytes)).toBe(true);
  });

  it('writes an empty file for an hour of no pushes', async () => {
    const { bytes, file } = await exportBytes(w.hours[0]!);
    expect(file.pushes).toBe(0);
    expect(gunzipSync(bytes).length).toBe(0);
  });
});

describe('bin/export', () => {
  const env = () => ({ DATABASE_URL: t.url, LOG_LEVEL: 'info', LOG_FORMAT: 'json' });

  it('writes DIR/YYYY-MM-DD-H.json.gz per HOUR, the same bytes as the export, results on stdout', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'gpi-export-cli-'));
    dirs.push(dir);
    const r = await runBin('export', [w.pushHour.name, w.hours[2]!.name, '--out', dir], env());
    expect(r.code, r.err).toBe(0);
    // Each hour file with its manifest beside it.
    expect(readdirSync(dir).sort()).toEqual(
      [w.pushHour.name, w.hours[2]!.name]
        .flatMap((h) => [`${h}.json.gz`, `${h}.manifest.json`])
        .sort(),
    );
    const written = readFileSync(path.join(dir, `${w.pushHour.name}.json.gz`));
    expect(written.equals((await exportBytes(w.pushHour)).bytes)).toBe(true);
    expect(r.out).toContain(`${w.pushHour.name}: ${w.visible} pushes`);
    expect(r.out.trim().split('\n')).toHaveLength(2);
    // Logs on stderr, one export.hour_written per file.
    const logged = r.err
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l))
      .filter((l) => l.event === 'export.hour_written');
    expect(logged.map((l) => l.hour).sort()).toEqual([w.pushHour.name, w.hours[2]!.name].sort());
  });

  it('--json prints JSON only', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'gpi-export-cli-'));
    dirs.push(dir);
    const r = await runBin('export', [w.pushHour.name, '--out', dir, '--json'], {
      ...env(),
      LOG_LEVEL: 'warn',
    });
    expect(r.code, r.err).toBe(0);
    const out = JSON.parse(r.out);
    const bytes = readFileSync(path.join(dir, `${w.pushHour.name}.json.gz`));
    expect(out.files).toEqual([
      expect.objectContaining({
        hour: w.pushHour.name,
        ok: true,
        known: true,
        pushes: w.visible,
        pending: 1,
        bytes: bytes.length,
        sha256: createHash('sha256').update(bytes).digest('hex'),
      }),
    ]);
  });

  it('names a bad HOUR and exits 2, writing nothing', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'gpi-export-cli-'));
    dirs.push(dir);
    const bad = await runBin('export', [w.pushHour.name, '2026-02-30-1', '--out', dir], env());
    expect(bad.code).toBe(2);
    expect(bad.err).toContain('"2026-02-30-1" is not an hour');
    expect(bad.out).toBe('');
    expect(readdirSync(dir)).toEqual([]);
  });

  it('refuses the future and no HOUR at all, and takes --help', async () => {
    await expect(captureMain(main, ['2026-01-01-24'])).rejects.toThrow(
      '"2026-01-01-24" is not an hour',
    );
    await expect(captureMain(main, ['9999-01-01-1'])).rejects.toThrow(
      'hour 9999-01-01-1 is in the future',
    );
    await expect(captureMain(main, [])).rejects.toThrow(UsageError);
    await expect(captureMain(main, ['--bogus'])).rejects.toThrow(UsageError);
    const help = await captureMain(main, ['--help']);
    expect(help.code).toBe(0);
    expect(help.out).toContain(
      'Usage: bin/export HOUR|DAY... [--format json,parquet] [--out DIR] [--json]',
    );
  });
});
