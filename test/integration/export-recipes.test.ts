import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { gunzipSync } from 'node:zlib';
import { type DuckDBConnection, DuckDBInstance } from '@duckdb/node-api';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hourEnd } from '../../src/store/archive-hours.ts';
import { runBin } from '../support/cli.ts';
import { useTestDatabase } from '../support/db.ts';
import { buildExportWorld, type ExportWorld } from '../support/export-world.ts';

/**
 * The DuckDB recipes of docs/export.md ("Recipes over the Parquet tables"), read from the
 * page itself so that the page cannot drift, run over an hour bin/export wrote, and checked
 * against the JSON hour file written beside the tables and against the store.
 */

const t = useTestDatabase();
let w: ExportWorld;
let dir: string;
let duck: DuckDBInstance;
let c: DuckDBConnection;
const PAGE = path.join(import.meta.dirname, '../../docs/export.md');

/** The ```duckdb blocks of the recipes section, in page order. */
function recipes(): string[] {
  const page = readFileSync(PAGE, 'utf8');
  const start = page.indexOf('## Recipes over the Parquet tables');
  expect(start).toBeGreaterThan(0);
  const end = page.indexOf('\n## ', start + 3);
  const section = page.slice(start, end);
  return [...section.matchAll(/```duckdb\n([\s\S]*?)```/g)].map((m) => m[1]!);
}

/** Runs a recipe's statements in order; the last one's rows. */
async function run(recipe: string): Promise<Record<string, unknown>[]> {
  const statements = recipe
    .replaceAll('/srv/export', dir)
    .split(/;\s*\n/)
    .map((s) => s.trim())
    .filter((s) => s.length > 0);
  let rows: Record<string, unknown>[] = [];
  for (const s of statements) {
    rows = (await c.runAndReadAll(s)).getRowObjectsJson() as Record<string, unknown>[];
  }
  return rows;
}

// Emails as GH Archive writes them (the SHA-1 of the local part, then the domain), so that
// the domain recipe has domains to count; two domains, one of them in two cases.
const DOMAINS = ['example.com', 'Example.com', 'users.noreply.github.com'];

beforeAll(async () => {
  w = await buildExportWorld(t);
  await sql`UPDATE commits SET author_email = encode(sha256(sha::bytea), 'hex') || '@' ||
      (${DOMAINS}::text[])[1 + get_byte(decode(substr(sha, 1, 2), 'hex'), 0) % 3]`.execute(t.db);
  dir = mkdtempSync(path.join(tmpdir(), 'gpi-export-recipes-'));
  const r = await runBin('export', [w.pushHour.name, '--format', 'json,parquet', '--out', dir], {
    DATABASE_URL: t.url,
    LOG_LEVEL: 'warn',
  });
  expect(r.code, r.err).toBe(0);
  duck = await DuckDBInstance.create(':memory:', {
    autoinstall_known_extensions: 'false',
    autoload_known_extensions: 'false',
  });
  c = await duck.connect();
});
afterAll(() => {
  c?.closeSync();
  duck?.closeSync();
  rmSync(dir, { recursive: true, force: true });
});

const inHour =
  () => sql`p.created_at >= ${w.pushHour.start} AND p.created_at < ${hourEnd(w.pushHour)}
  AND p.head NOT IN (${w.heads.privateRepo}, ${w.heads.webhookUnknownRepo})`;

describe('the recipes of docs/export.md', () => {
  it('are two DuckDB blocks', () => {
    expect(recipes()).toHaveLength(2);
  });

  it('commits per email domain: as the store counts them', async () => {
    const read = await run(recipes()[0]!);
    const stored = await sql<{ domain: string; commits: string; repositories: string }>`
      SELECT lower(split_part(c.author_email, '@', 2)) AS domain,
        count(DISTINCT pc.sha)::text AS commits, count(DISTINCT pc.repository_id)::text AS repositories
      FROM push_events p
      JOIN push_commits pc ON (pc.repository_id, pc.ref, pc.before, pc.head) = (p.repository_id, p.ref, p.before, p.head)
      JOIN commits c ON (c.repository_id, c.sha) = (pc.repository_id, pc.sha)
      WHERE ${inHour()} AND p.commits_state IN ('complete', 'partial', 'none')
        AND c.author_email LIKE '%@%'
      GROUP BY 1 ORDER BY count(DISTINCT pc.sha) DESC, lower(split_part(c.author_email, '@', 2)) COLLATE "C"`.execute(
      t.db,
    );
    expect(stored.rows.length).toBe(2);
    expect(read).toEqual(stored.rows);
  });

  it('pushes per hour with coverage: as the JSON hour file and the store say', async () => {
    const read = await run(recipes()[1]!);
    const lines = gunzipSync(readFileSync(path.join(dir, `${w.pushHour.name}.json.gz`)))
      .toString('utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { payload: { size?: number } });
    const states = await sql<{ state: string; n: number }>`
      SELECT p.commits_state AS state, count(*)::int AS n FROM push_events p
      WHERE ${inHour()} GROUP BY 1`.execute(t.db);
    const count = (...s: string[]) =>
      states.rows.filter((r) => s.includes(r.state)).reduce((a, r) => a + r.n, 0);
    expect(read).toEqual([
      {
        hour: w.pushHour.name,
        pushes: String(lines.length),
        commits: String(lines.reduce((a, l) => a + (l.payload.size ?? 0), 0)),
        pushes_with_commits: String(count('complete', 'partial', 'none')),
        pushes_commits_unknown: String(count('pending', 'unverified', 'failed')),
        gaps_open: '0',
      },
    ]);
    expect(count('pending')).toBeGreaterThan(0);
  });
});
