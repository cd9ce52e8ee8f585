import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { gunzipSync } from 'node:zlib';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hourOf } from '../../src/store/archive-hours.ts';
import { NO_TARGETS } from '../../src/store/commits-targets.ts';
import { mapEventsPage } from '../../src/store/mapping.ts';
import { storePushes } from '../../src/store/pushes.ts';
import { runBin } from '../support/cli.ts';
import { useTestDatabase } from '../support/db.ts';

/**
 * The store as a faithful GH Archive (ADR 0193): real GH Archive lines
 * (test/fixtures/realdata-roundtrip) imported with bin/backfill and exported again with
 * bin/export are the same events, field for field — the org, the actor and the repository's
 * name as the line had them, the payload's fields as given — with only the two fields GitHub
 * added later and the export fills in (`actor.display_login`, `payload.repository_id`). A
 * page polled live exports in the same shape.
 */

const t = useTestDatabase();
let dir: string;

const FIXTURES = path.resolve(import.meta.dirname, '../fixtures/realdata-roundtrip');
const ARCHIVE_FILES = [
  '2015-01-01-15.ndjson',
  '2018-01-01-0.ndjson',
  '2021-07-21.ndjson',
  '2025-09-15-15+2026-06-01-15.ndjson',
];

// biome-ignore lint/suspicious/noExplicitAny: a line as JSON.parse gives it back
type Line = Record<string, any>;

const env = () => ({ DATABASE_URL: t.url, COMMIT_EMAILS: 'keep', LOG_LEVEL: 'warn' });

beforeAll(async () => {
  dir = mkdtempSync(path.join(tmpdir(), 'gpi-roundtrip-'));
  await sql`
    INSERT INTO stored_settings (name, value, recorded_by) VALUES ('COMMIT_EMAILS', 'keep', 'test')
    ON CONFLICT (name) DO UPDATE SET value = excluded.value`.execute(t.db);
});
afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** The lines of `files`, each parsed. */
function originals(files: string[]): Line[] {
  return files.flatMap((f) =>
    readFileSync(path.join(FIXTURES, f), 'utf8')
      .trimEnd()
      .split('\n')
      .map((l) => JSON.parse(l) as Line),
  );
}

/** Every hour of `events`, exported by bin/export: the lines by event id. */
async function exported(events: Line[], name: string): Promise<Map<string, Line>> {
  const hours = [...new Set(events.map((e) => hourOf(new Date(e.created_at)).name))];
  const out = path.join(dir, name);
  const r = await runBin('export', [...hours, '--out', out], env());
  expect(r.code, r.err).toBe(0);
  const lines = new Map<string, Line>();
  for (const f of readdirSync(out).filter((x) => x.endsWith('.json.gz'))) {
    const text = gunzipSync(readFileSync(path.join(out, f)))
      .toString('utf8')
      .trimEnd();
    for (const l of text.split('\n')) {
      const e = JSON.parse(l) as Line;
      lines.set(String(e.id), e);
    }
  }
  return lines;
}

/** The exported line without the two fields it may add to what the original had. */
function withoutAdditions(line: Line, original: Line): Line {
  const copy = structuredClone(line);
  if (!('display_login' in original.actor)) delete copy.actor.display_login;
  if (!('repository_id' in original.payload)) delete copy.payload.repository_id;
  return copy;
}

describe('a GH Archive line imported and exported again', () => {
  it('is the same event, field for field, org and the name of the time included', async () => {
    const files = ARCHIVE_FILES.map((f) => path.join(FIXTURES, f));
    const imported = await runBin('backfill', files, env());
    expect(imported.code, imported.err).toBe(0);
    const lines = originals(ARCHIVE_FILES);
    expect(lines).toHaveLength(51);
    expect(lines.filter((l) => l.org).length).toBe(23);

    // What the store learns later does not rewrite history: the repository renamed and its
    // owner's login changed (as a later poll or enrichment would), the lines still say what
    // they said.
    const renamed = lines.find((l) => l.org)!;
    await sql`UPDATE repositories SET full_name = 'renamed-later/new-name',
        profile = '{"owner": {"type": "User", "id": 1, "login": "renamed-later"}}'
      WHERE id = ${renamed.repo.id}`.execute(t.db);
    await sql`UPDATE actors SET login = 'renamed-later' WHERE id = ${renamed.actor.id}`.execute(
      t.db,
    );

    const out = await exported(lines, 'archive');
    expect(out.size).toBe(lines.length);
    const differing: string[] = [];
    for (const original of lines) {
      const line = out.get(original.id)!;
      expect(line, original.id).toBeDefined();
      try {
        expect(withoutAdditions(line, original)).toStrictEqual(original);
      } catch {
        differing.push(original.id);
      }
    }
    for (const id of differing) {
      const original = lines.find((l) => l.id === id)!;
      expect(withoutAdditions(out.get(id)!, original), `event ${id}`).toStrictEqual(original);
    }
    // The additions, where the original did not have them.
    const old = out.get(lines[0]!.id)!;
    expect(old.actor.display_login).toBe(lines[0]!.actor.login);
    expect(old.payload.repository_id).toBe(lines[0]!.repo.id);
  }, 120_000);
});

describe('a page polled live', () => {
  it('exports in the same shape: each polled event as GitHub served it', async () => {
    const events = JSON.parse(
      readFileSync(path.join(FIXTURES, 'polled-events.json'), 'utf8'),
    ) as Line[];
    const page = mapEventsPage(events, '/events');
    expect(page.rejected).toEqual([]);
    expect(page.pushes).toHaveLength(17);
    await t.db.transaction().execute((trx) =>
      storePushes(trx, page.pushes, {
        origin: 'poll',
        commits: { targets: NO_TARGETS, emails: 'keep' },
      }),
    );
    const out = await exported(events, 'polled');
    for (const original of events) {
      const line = out.get(original.id)!;
      expect(line, original.id).toBeDefined();
      expect(withoutAdditions(line, original), `event ${original.id}`).toStrictEqual(original);
    }
  }, 60_000);
});
