import { createHash } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { gunzipSync } from 'node:zlib';
import { DuckDBInstance } from '@duckdb/node-api';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hourOf } from '../../src/store/archive-hours.ts';
import { addSource } from '../../src/store/sources.ts';
import { runBin } from '../support/cli.ts';
import { useTestDatabase } from '../support/db.ts';
import { type FakeGitHub, startFakeGitHub } from '../support/fake-github.ts';
import { randomToken } from '../support/github-client.ts';
import type { GitHubEvent } from '../support/github-factories.ts';
import { deliver, startTestWeb, type TestWeb } from '../support/web.ts';

/**
 * COMMIT_EMAILS holds in every column, log and export (ADR 0184). Real pushes carrying
 * addresses (test/fixtures/realdata-addresses: a webhook delivery, a page of a user's
 * events, GH Archive lines) arrive the three ways a user's deployment receives them — a
 * signed delivery to bin/web, a poll by bin/ingest, a file read by bin/backfill — with one
 * event of the page and one line of the file that cannot be stored (rejected with what
 * they carried); bin/enrich then stores the profiles of the accounts and repositories they
 * name, which carry a public email and addresses in a bio and a description. Then the whole database is read back (every row of every table in every
 * schema, as text), with the processes' logs and the hours bin/export writes, and not one
 * address the inputs held is found in clear; under `hash` the addresses are there hashed,
 * so each still joins to itself. Under `gharchive` (GH Archive's rule) every address field
 * everywhere is in GH Archive's form, and text is as given.
 */

const t = useTestDatabase();
let fake: FakeGitHub;
let dir: string;

const FIXTURES = path.resolve(import.meta.dirname, '../fixtures/realdata-addresses');
const fixture = (name: string) => readFileSync(path.join(FIXTURES, name), 'utf8');

/** Every address the inputs hold, as they hold it (the field values and those in text). */
function addressesIn(text: string): string[] {
  return [...new Set(text.match(/[A-Za-z0-9._%+-]+@[A-Za-z0-9-]*(?:\.[A-Za-z0-9-]+)+/g) ?? [])];
}
const hashOf = (a: string) =>
  `sha256:${createHash('sha256').update(a.trim().toLowerCase()).digest('hex')}`;

beforeAll(async () => {
  fake = await startFakeGitHub();
  dir = mkdtempSync(path.join(tmpdir(), 'gpi-emails-'));
});
afterAll(async () => {
  await fake?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/**
 * Every row of every table and view outside Postgres's own schemas, each as its text: the
 * views too, because a table may hold an address as bytes (stored_commits) that only its
 * view (commits) spells out.
 */
async function wholeDatabase(): Promise<string[]> {
  const tables = await sql<{ schema: string; name: string }>`
    SELECT table_schema AS schema, table_name AS name FROM information_schema.tables
    WHERE table_type IN ('BASE TABLE', 'VIEW')
      AND table_schema NOT IN ('pg_catalog', 'information_schema')
      AND table_schema NOT LIKE 'pg_toast%' AND table_schema NOT LIKE 'pg_temp%'
    ORDER BY 1, 2`.execute(t.db);
  expect(tables.rows.map((r) => r.name)).toEqual(
    expect.arrayContaining(['push_events', 'commits', 'rejected_events', 'webhook_deliveries']),
  );
  const rows: string[] = [];
  for (const { schema, name } of tables.rows) {
    const r = await sql<{ row: string }>`
      SELECT x::text AS row FROM ${sql.table(`${schema}.${name}`)} x`.execute(t.db);
    rows.push(...r.rows.map((x) => `${schema}.${name}: ${x.row}`));
  }
  return rows;
}

describe.each(['hash', 'drop', 'gharchive'] as const)('COMMIT_EMAILS=%s', (mode) => {
  let web: TestWeb;
  const logs: string[] = [];
  const env = () => ({
    DATABASE_URL: t.url,
    GITHUB_API_URL: fake.url,
    GITHUB_TOKEN: randomToken(),
    GITHUB_MODE: 'live',
    COMMIT_EMAILS: mode,
    LOG_LEVEL: 'debug',
    LOG_FORMAT: 'json',
  });

  beforeAll(async () => {
    await sql`TRUNCATE push_events, stored_commits, rejected_events, webhook_deliveries,
      actors, repositories, event_sources, backfill_files, ingestion_runs, github_requests
      CASCADE`.execute(t.db);
    // This database's stored data is shaped by `mode` (ADR 0125), as bin/setup records it.
    await sql`
      INSERT INTO stored_settings (name, value, recorded_by) VALUES ('COMMIT_EMAILS', ${mode}, 'test')
      ON CONFLICT (name) DO UPDATE SET value = excluded.value`.execute(t.db);
    web = await startTestWeb(t, { env: { COMMIT_EMAILS: mode } });
  });
  afterAll(async () => {
    await web?.close();
  });

  it('stores a delivery, a poll and a backfill with no address in clear anywhere: tables, logs, exports', async () => {
    // A webhook delivery, as GitHub sent it.
    const delivery = fixture('webhook-push-some-commits.json');
    const hooked = await deliver(web.url, { deliveryId: `emails-${mode}`, body: delivery });
    expect(hooked.status).toBe(202);
    // A delivery that cannot be stored, whose refusal quotes what it holds (kept as rejected).
    const broken = JSON.parse(delivery) as { repository: Record<string, unknown> };
    broken.repository.id = 'fmhrit@gmail.com';
    const refused = await deliver(web.url, {
      deliveryId: `emails-${mode}-refused`,
      body: JSON.stringify(broken),
    });
    expect(refused.status).toBe(422);

    // A poll of the user's feed: four real pushes and one that breaks a rule (rejected).
    const events = JSON.parse(fixture('events-wycats-2025-08.json')) as GitHubEvent[];
    const bad = structuredClone(events[0]!) as GitHubEvent & { payload: { ref: unknown } };
    bad.id = '53051623999';
    bad.payload.ref = { not: 'a ref', by: 'wycats@gmail.com' };
    fake.addEvents(`user:wycats-${mode}`, [...events, bad]);
    await addSource(t.db, { kind: 'user', target: `wycats-${mode}` }, 'live');
    const polled = await runBin('ingest', [], env());
    expect(polled.out).toMatch(/completed: 5 events seen, 4 created/);
    logs.push(polled.err);

    // bin/backfill of a file: three real GH Archive lines and one cut short (rejected).
    const lines = fixture('archive-lines.ndjson').trimEnd().split('\n');
    const file = path.join(dir, `hours-${mode}.json`);
    writeFileSync(file, `${[...lines, lines[0]!.slice(0, 700)].join('\n')}\n`);
    const backfilled = await runBin('backfill', [file], env());
    expect(backfilled.out).toMatch(/completed: 3 events, 3 pushes, 3 stored/);
    logs.push(backfilled.err);

    // bin/enrich of every account and repository those pushes name: GitHub's profiles carry
    // a public email, an address in a bio and one in a description.
    const actors = await sql<{ id: string; login: string }>`
      SELECT id::text, login FROM actors`.execute(t.db);
    for (const a of actors.rows) {
      fake.setUser({
        id: Number(a.id),
        login: a.login,
        type: 'User',
        email: `${a.login.toLowerCase()}.profile@example.org`,
        bio: `Write to ${a.login.toLowerCase()}.bio@example.net`,
        created_at: '2012-01-01T00:00:00Z',
      });
    }
    const repos = await sql<{ id: string; full_name: string }>`
      SELECT id::text, full_name FROM repositories`.execute(t.db);
    for (const r of repos.rows) {
      fake.setRepo({
        id: Number(r.id),
        full_name: r.full_name,
        name: r.full_name.split('/')[1]!,
        owner: { login: r.full_name.split('/')[0]! },
        description: 'Security reports: security-team@example.com',
        private: false,
      });
    }
    const enriched = await runBin('enrich', ['--limit', '100'], env());
    expect(enriched.code, enriched.err).toBe(0);
    logs.push(enriched.err);
    const profiled = await sql<{ actors: number; repos: number }>`
      SELECT (SELECT count(*)::int FROM actors WHERE profile IS NOT NULL) AS actors,
             (SELECT count(*)::int FROM repositories WHERE profile IS NOT NULL) AS repos`.execute(
      t.db,
    );
    expect(profiled.rows[0]).toEqual({ actors: actors.rows.length, repos: repos.rows.length });
    expect(actors.rows.length).toBeGreaterThan(0);
    expect(repos.rows.length).toBeGreaterThan(0);

    // What arrived: every push stored, their commits too; the bad ones rejected.
    const counts = await sql<{ pushes: number; commits: number; rejected: number }>`
      SELECT (SELECT count(*)::int FROM push_events) AS pushes,
             (SELECT count(*)::int FROM commits) AS commits,
             (SELECT count(*)::int FROM rejected_events) AS rejected`.execute(t.db);
    expect(counts.rows[0]).toEqual({ pushes: 1 + 4 + 3, commits: 9 + 15 + 3, rejected: 2 });

    // The hours those pushes are in, as bin/export writes them.
    const hours = await sql<{ at: Date }>`
      SELECT DISTINCT date_trunc('hour', created_at) AS at FROM push_events`.execute(t.db);
    const names = hours.rows.map((h) => hourOf(h.at).name);
    const out = path.join(dir, `export-${mode}`);
    const exported = await runBin(
      'export',
      [...names, '--format', 'json,parquet', '--out', out],
      env(),
    );
    expect(exported.code, exported.err).toBe(0);
    logs.push(exported.err);
    const files = readdirSync(out).filter((f) => f.endsWith('.json.gz'));
    expect(files).toHaveLength(names.length);
    const hourFiles = files.map((f) => gunzipSync(readFileSync(path.join(out, f))).toString());
    // The Parquet tables, every row as text (every commit there, not only a line's 20).
    const duck = await DuckDBInstance.create(':memory:', {
      autoinstall_known_extensions: 'false',
      autoload_known_extensions: 'false',
    });
    const c = await duck.connect();
    for (const table of ['pushes', 'push_commits']) {
      const rows = await c.runAndReadAll(
        `SELECT * FROM read_parquet('${path.join(out, table, '*.parquet')}')`,
      );
      hourFiles.push(JSON.stringify(rows.getRowObjectsJson()));
    }
    c.closeSync();
    duck.closeSync();
    expect(hourFiles.at(-1)).toContain('"sha"');

    const given = addressesIn(
      [delivery, fixture('events-wycats-2025-08.json'), fixture('archive-lines.ndjson')].join('\n'),
    );
    // The field that is not an address by any pattern: held to the policy all the same.
    given.push('arifarhan1602@.com');
    // And what the profiles carried.
    for (const a of actors.rows) {
      given.push(
        `${a.login.toLowerCase()}.profile@example.org`,
        `${a.login.toLowerCase()}.bio@example.net`,
      );
    }
    given.push('security-team@example.com');
    expect(given).toEqual(
      expect.arrayContaining([
        'fmhrit@gmail.com',
        'wycats@gmail.com',
        'boisvert@anl.gov',
        'noreply@anthropic.com',
      ]),
    );

    const database = await wholeDatabase();
    const everywhere: [string, string[]][] = [
      ['database', database],
      ['logs', [...logs, ...web.logs]],
      ['exports', hourFiles],
    ];
    // gharchive is GH Archive's rule: every address field in its form, text as given.
    if (mode === 'gharchive') {
      const fields = (texts: string[]) =>
        [
          ...texts.join('\n').matchAll(/\\?"(?:author_|committer_)?email\\?"\s*:\s*\\?"([^"\\]*)/g),
        ].map((m) => m[1]!);
      for (const [where, texts] of everywhere) {
        for (const value of fields(texts)) {
          expect(value, `an email field in the ${where}`).toMatch(/^([0-9a-f]{40}(@.*)?)?$/);
        }
      }
      const columns = await sql<{ e: string }>`
        SELECT author_email AS e FROM commits WHERE author_email IS NOT NULL
        UNION ALL SELECT committer_email FROM commits WHERE committer_email IS NOT NULL`.execute(
        t.db,
      );
      expect(columns.rows.length).toBeGreaterThan(20);
      for (const { e } of columns.rows) expect(e).toMatch(/^[0-9a-f]{40}(@|$)/);
      expect(fields(hourFiles).length).toBeGreaterThan(10);
    }
    for (const [where, texts] of mode === 'gharchive' ? [] : everywhere) {
      const haystack = texts.join('\n').toLowerCase();
      const found = given.filter((a) => haystack.includes(a.toLowerCase()));
      expect(found, `addresses in clear in the ${where}`).toEqual([]);
      // Nor any other address: nothing of the shape is left anywhere.
      expect(
        texts.join('\n').match(/[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*\.[a-z]{2,}/gi) ??
          [],
        where,
      ).toEqual([]);
    }

    // Under `hash`, an address is still itself: the commits' column holds the hash, and so
    // does a trailer in a message. The stored payload keeps no commit the commits table holds
    // (ADR 0199): the address is not kept a second time.
    const held = await sql<{ email: string | null; payload_email: string | null; message: string }>`
      SELECT c.author_email AS email, p.payload #>> '{commits,0,author,email}' AS payload_email,
        c.message
      FROM push_events p JOIN push_commits pc USING (repository_id, ref, before, head)
      JOIN commits c USING (repository_id, sha)
      WHERE p.origin = 'archive' AND p.created_at < '2016-01-01' AND pc.position = 0`.execute(t.db);
    const obfuscated = '1a4d2e25eb5ba040b6ad5779a730a1a8a0ff9bc5@anl.gov';
    expect(held.rows).toHaveLength(1);
    const row = held.rows[0]!;
    if (mode === 'hash') {
      expect(row.email).toBe(hashOf(obfuscated));
      expect(row.payload_email).toBeNull();
      expect(row.message).toContain(
        `Signed-off-by: Sébastien Boisvert <${hashOf('boisvert@anl.gov')}>`,
      );
    } else if (mode === 'gharchive') {
      // GH Archive's own address, kept as it came; the trailer as GH Archive published it.
      expect(row.email).toBe(obfuscated);
      expect(row.payload_email).toBeNull();
      expect(row.message).toContain('Signed-off-by: Sébastien Boisvert <boisvert@anl.gov>');
    } else {
      expect(row.email).toBeNull();
      expect(row.payload_email).toBeNull();
      expect(row.message).toContain('Signed-off-by: Sébastien Boisvert <>');
    }
    const webhookEmails = await sql<{ email: string | null }>`
      SELECT DISTINCT c.author_email AS email FROM commits c
      JOIN push_events p ON p.repository_id = c.repository_id WHERE p.origin = 'webhook'`.execute(
      t.db,
    );
    const sha1 = (a: string) => createHash('sha1').update(a).digest('hex');
    expect(webhookEmails.rows).toEqual([
      {
        email:
          mode === 'hash'
            ? hashOf('fmhrit@gmail.com')
            : mode === 'gharchive'
              ? `${sha1('fmhrit')}@gmail.com`
              : null,
      },
    ]);
  }, 180_000);
});

describe('bin/setup --reconfigure to a stricter COMMIT_EMAILS', () => {
  it('keep → hash: every address stored under keep is put under hash, then recorded', async () => {
    await sql`TRUNCATE push_events, stored_commits, rejected_events, webhook_deliveries,
      actors, repositories, event_sources, backfill_files, ingestion_runs CASCADE`.execute(t.db);
    await sql`
      INSERT INTO stored_settings (name, value, recorded_by) VALUES ('COMMIT_EMAILS', 'keep', 'test')
      ON CONFLICT (name) DO UPDATE SET value = excluded.value, previous_value = NULL`.execute(t.db);
    const env = (emails: string) => ({
      DATABASE_URL: t.url,
      GITHUB_API_URL: fake.url,
      GITHUB_TOKEN: randomToken(),
      GITHUB_MODE: 'live',
      COMMIT_EMAILS: emails,
      LOG_LEVEL: 'warn',
      LOG_FORMAT: 'json',
    });
    const file = path.join(dir, 'kept.json');
    const lines = fixture('archive-lines.ndjson').trimEnd().split('\n');
    writeFileSync(file, `${[...lines, lines[0]!.slice(0, 700)].join('\n')}\n`);
    expect((await runBin('backfill', [file], env('keep'))).code).toBe(0);
    const kept = (await wholeDatabase()).join('\n');
    expect(kept).toContain('boisvert@anl.gov');
    expect(kept).toContain('arifarhan1602@.com');

    const r = await runBin('setup', ['--reconfigure'], env('hash'));
    expect(r.code, r.err).toBe(0);
    // 3 commits, 1 rejected line (payloads keep no commit the commits table holds: ADR 0199).
    expect(r.out).toMatch(
      /stored-data settings COMMIT_EMAILS keep → hash, addresses of 4 stored row\(s\) rewritten\n$/,
    );
    const warned = r.err
      .split('\n')
      .filter((l) => l.includes('"setup.reconfigured"'))
      .map((l) => JSON.parse(l));
    expect(warned[0]).toMatchObject({
      rewritten: { push_events: 0, commits: 3, rejected_events: 1, webhook_deliveries: 0 },
    });
    const database = (await wholeDatabase()).join('\n');
    expect(database.match(/[A-Za-z0-9._%+-]+@[A-Za-z0-9-]*(\.[A-Za-z0-9-]+)+/g) ?? []).toEqual([]);
    expect(database).toContain(hashOf('boisvert@anl.gov'));
    // Run again: nothing left to do.
    expect((await runBin('setup', ['--reconfigure'], env('hash'))).out).toBe(
      'setup: nothing to do, the database is up to date\n',
    );
  }, 120_000);
});
