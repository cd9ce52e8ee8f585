import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { gunzipSync } from 'node:zlib';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hourOf } from '../../src/store/archive-hours.ts';
import { jsonUnderPolicy } from '../../src/store/commit-emails.ts';
import { storeCommits } from '../../src/store/commits.ts';
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

// COMMIT_EMAILS unset: a new database's default, GH Archive's own rule (gharchive).
const env = () => ({ DATABASE_URL: t.url, LOG_LEVEL: 'warn', COMMIT_EMAILS: undefined });

beforeAll(() => {
  dir = mkdtempSync(path.join(tmpdir(), 'gpi-roundtrip-'));
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

/** What GH Archive would have written for an event: its address fields under its rule. */
const asGhArchive = (event: Line): Line => jsonUnderPolicy(event, 'gharchive');

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
    const recorded = await sql<{ value: string }>`
      SELECT value FROM stored_settings WHERE name = 'COMMIT_EMAILS'`.execute(t.db);
    expect(recorded.rows).toEqual([{ value: 'gharchive' }]);
    const lines = originals(ARCHIVE_FILES);
    expect(lines).toHaveLength(51);
    expect(lines.filter((l) => l.org).length).toBe(23);
    // GH Archive's crawler wrote every address of these lines but one (a line edited by the
    // fixture's authors, its address in clear): each is its own GH Archive form already.
    const clear = lines.filter((l) => JSON.stringify(asGhArchive(l)) !== JSON.stringify(l));
    expect(clear.map((l) => l.id)).toEqual(['54715645747']);

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
        expect(withoutAdditions(line, original)).toStrictEqual(asGhArchive(original));
      } catch {
        differing.push(original.id);
      }
    }
    for (const id of differing) {
      const original = lines.find((l) => l.id === id)!;
      expect(withoutAdditions(out.get(id)!, original), `event ${id}`).toStrictEqual(
        asGhArchive(original),
      );
    }
    // The additions, where the original did not have them.
    const old = out.get(lines[0]!.id)!;
    expect(old.actor.display_login).toBe(lines[0]!.actor.login);
    expect(old.payload.repository_id).toBe(lines[0]!.repo.id);
  }, 120_000);
});

describe('a page polled live', () => {
  it('exports in the same shape: each polled event as GH Archive would have written it', async () => {
    const events = JSON.parse(
      readFileSync(path.join(FIXTURES, 'polled-events.json'), 'utf8'),
    ) as Line[];
    const page = mapEventsPage(events, '/events');
    expect(page.rejected).toEqual([]);
    expect(page.pushes).toHaveLength(17);
    await t.db.transaction().execute((trx) =>
      storePushes(trx, page.pushes, {
        origin: 'poll',
        commits: { targets: NO_TARGETS, emails: 'gharchive' },
      }),
    );
    const out = await exported(events, 'polled');
    for (const original of events) {
      const line = out.get(original.id)!;
      expect(line, original.id).toBeDefined();
      expect(withoutAdditions(line, original), `event ${original.id}`).toStrictEqual(
        asGhArchive(original),
      );
    }
    // The addresses GitHub served in clear went out as GH Archive writes them.
    const emails = [...out.values()].flatMap((l) =>
      (l.payload.commits ?? []).map((c: Line) => c.author.email as string),
    );
    expect(emails.length).toBeGreaterThan(10);
    for (const e of emails) expect(e).toMatch(/^[0-9a-f]{40}(@|$)/);
  }, 60_000);
});

describe('distinct, when the answer did not say', () => {
  it('a commit is distinct in the first stored push of its repository that holds it', async () => {
    // Three polled pushes of one repository in the shape GitHub serves since 2025-10 (no
    // commits), whose commits an answer then gives without `distinct`: a branch pushed, then
    // merged into main (its commits again, and one of the merge's own), then a push whose
    // two commits arrive in one statement with another push holding one of them.
    const repo = { id: 61_000_001, name: 'distinct-org/app' };
    const sha = (n: number) => n.toString(16).padStart(40, '0');
    const push = (minute: number, ref: string, head: number, before: number): Line => ({
      id: String(62_000_000 + minute),
      type: 'PushEvent',
      actor: { id: 63_001, login: 'dev' },
      repo,
      payload: {
        repository_id: repo.id,
        push_id: 64_000 + minute,
        ref,
        head: sha(head),
        before: sha(before),
      },
      public: true,
      created_at: `2026-09-01T10:${String(minute).padStart(2, '0')}:00Z`,
    });
    const events = [
      push(1, 'refs/heads/feature', 2, 100),
      push(2, 'refs/heads/main', 3, 101),
      push(3, 'refs/heads/other', 5, 102),
      push(4, 'refs/heads/copy', 5, 103),
    ];
    const page = mapEventsPage(events, '/events');
    await t.db.transaction().execute((trx) =>
      storePushes(trx, page.pushes, {
        origin: 'poll',
        commits: { targets: NO_TARGETS, emails: 'gharchive' },
      }),
    );
    const key = (e: Line) => ({
      repositoryId: String(repo.id),
      ref: e.payload.ref as string,
      before: e.payload.before as string,
      head: e.payload.head as string,
    });
    const rows = (shas: number[]) =>
      shas.map((n) => ({
        sha: sha(n),
        authorName: 'Dev',
        authorEmail: 'dev@example.org',
        message: `c${n}`,
        distinct: null,
      }));
    const answer = async (pushes: { e: Line; shas: number[] }[]) => {
      await storeCommits(
        t.db,
        pushes.map(({ e, shas }) => ({ push: key(e), commits: rows(shas) })),
        { emails: 'gharchive' },
      );
      for (const { e, shas } of pushes) {
        await sql`UPDATE push_events SET commits_state = 'complete', commit_count = ${shas.length}
          WHERE head = ${e.payload.head} AND ref = ${e.payload.ref}`.execute(t.db);
      }
    };
    await answer([{ e: events[0]!, shas: [1, 2] }]);
    await answer([{ e: events[1]!, shas: [1, 2, 3] }]);
    await answer([
      { e: events[2]!, shas: [4, 5] },
      { e: events[3]!, shas: [4, 5] },
    ]);
    const out = await exported(events, 'distinct');
    const line = (e: Line) => out.get(e.id)!.payload;
    expect(line(events[0]!)).toMatchObject({ size: 2, distinct_size: 2 });
    expect(line(events[0]!).commits.map((c: Line) => c.distinct)).toEqual([true, true]);
    expect(line(events[1]!)).toMatchObject({ size: 3, distinct_size: 1 });
    expect(line(events[1]!).commits.map((c: Line) => c.distinct)).toEqual([false, false, true]);
    expect(line(events[2]!).commits.map((c: Line) => c.distinct)).toEqual([true, true]);
    expect(line(events[3]!)).toMatchObject({ size: 2, distinct_size: 0 });
    // Stored again (a later answer for the same push), its own rows do not make it less distinct.
    await answer([{ e: events[0]!, shas: [1, 2] }]);
    const again = await exported(events, 'distinct-again');
    expect(again.get(events[0]!.id)!.payload.distinct_size).toBe(2);
  }, 60_000);
});
