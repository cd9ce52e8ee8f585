import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { gunzipSync } from 'node:zlib';
import { type DuckDBConnection, DuckDBInstance } from '@duckdb/node-api';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseHours } from '../../src/cli/export.ts';
import { COLUMNS } from '../../src/export/parquet.ts';
import { COMMITS_STATES, PUSH_ORIGINS } from '../../src/platform/db/columns.ts';
import { hourEnd } from '../../src/store/archive-hours.ts';
import { runBin } from '../support/cli.ts';
import { useTestDatabase } from '../support/db.ts';
import { buildExportWorld, type ExportWorld } from '../support/export-world.ts';

/**
 * bin/export --format parquet (ADR 0195): the two tables of an hour read by DuckDB, with
 * the columns and types docs/export.md lists, agreeing push for push with the JSON hour
 * file written beside them and commit for commit with the store; the manifest's files and
 * counts; the same bytes twice; a day at once.
 */

const t = useTestDatabase();
let w: ExportWorld;
let dir: string;
let duck: DuckDBInstance;
let c: DuckDBConnection;
const env = () => ({ DATABASE_URL: t.url, LOG_LEVEL: 'warn', LOG_FORMAT: 'json' });

beforeAll(async () => {
  w = await buildExportWorld(t);
  // The push of 25 commits of which the world stores 20: the other 5 fetched since, so it is
  // complete, and its line still lists 20.
  await sql`INSERT INTO commits (repository_id, sha, author_name, author_email, message, authored_at)
    SELECT p.repository_id, md5(p.head || i) || substr(md5('x' || i), 1, 8), 'Late ' || i,
      'late' || i || '@example.com', 'late commit ' || i, '2026-11-01T00:00:00Z'::timestamptz + i * interval '1 second'
    FROM push_events p, generate_series(20, 24) i WHERE p.head = ${w.heads.partial}`.execute(t.db);
  await sql`INSERT INTO push_commits (repository_id, ref, before, head, position, sha, "distinct")
    SELECT p.repository_id, p.ref, p.before, p.head, i, md5(p.head || i) || substr(md5('x' || i), 1, 8), true
    FROM push_events p, generate_series(20, 24) i WHERE p.head = ${w.heads.partial}`.execute(t.db);
  await sql`UPDATE push_events SET commits_state = 'complete', commit_count = 25
    WHERE head = ${w.heads.partial}`.execute(t.db);
  dir = mkdtempSync(path.join(tmpdir(), 'gpi-export-parquet-'));
  const r = await runBin(
    'export',
    [w.pushHour.name, '--format', 'json,parquet', '--out', dir, '--json'],
    env(),
  );
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

async function rows(query: string): Promise<Record<string, unknown>[]> {
  return (await c.runAndReadAll(query)).getRowObjectsJson() as Record<string, unknown>[];
}
const pushesFile = () => path.join(dir, 'pushes', `${w.pushHour.name}.parquet`);
const commitsFile = () => path.join(dir, 'push_commits', `${w.pushHour.name}.parquet`);

// biome-ignore lint/suspicious/noExplicitAny: a line as JSON.parse gives it back
type Line = Record<string, any>;

function jsonLines(): Line[] {
  const text = gunzipSync(readFileSync(path.join(dir, `${w.pushHour.name}.json.gz`)))
    .toString('utf8')
    .trim()
    .split('\n');
  return text.map((l) => JSON.parse(l) as Line);
}

describe('the Parquet tables of an hour', () => {
  it('have the documented columns and types', async () => {
    for (const [table, file] of [
      ['pushes', pushesFile()],
      ['push_commits', commitsFile()],
    ] as const) {
      const described = await rows(`DESCRIBE SELECT * FROM read_parquet('${file}')`);
      expect(described.map((d) => [d.column_name, d.column_type])).toEqual(
        COLUMNS[table].map(([n, ty]) => [
          n,
          ty === 'TIMESTAMPTZ' ? 'TIMESTAMP WITH TIME ZONE' : ty,
        ]),
      );
    }
  });

  it('pushes: one row a line of the JSON hour file, in its order, saying what the line says', async () => {
    const read = await rows(
      `SELECT event_id, strftime(created_at AT TIME ZONE 'UTC', '%Y-%m-%dT%H:%M:%S.%fZ') AS at,
         actor_id, actor_login, repo_id, repo_name, org_id, org_login, push_id, ref, head,
         "before", size, distinct_size, commits_state, origin
       FROM read_parquet('${pushesFile()}')`,
    );
    const lines = jsonLines();
    expect(read).toHaveLength(w.visible);
    expect(lines).toHaveLength(w.visible);
    read.forEach((r, i) => {
      const l = lines[i]!;
      expect(r.event_id).toBe(l.id);
      expect(Date.parse(r.at as string)).toBe(Date.parse(l.created_at));
      expect([r.actor_id, r.actor_login]).toEqual([String(l.actor.id), l.actor.login]);
      expect([r.repo_id, r.repo_name]).toEqual([String(l.repo.id), l.repo.name]);
      expect([r.org_id, r.org_login]).toEqual(
        l.org ? [String(l.org.id), l.org.login] : [null, null],
      );
      expect(r.push_id).toBe(l.payload.push_id === undefined ? null : String(l.payload.push_id));
      expect([r.ref, r.head, r.before]).toEqual([l.payload.ref, l.payload.head, l.payload.before]);
      expect(r.size).toBe(l.payload.size ?? null);
      expect(r.distinct_size).toBe(l.payload.distinct_size ?? null);
    });
  });

  it('pushes: commits state and origin as the store holds them', async () => {
    const read = await rows(
      `SELECT repo_id, ref, head, commits_state, origin FROM read_parquet('${pushesFile()}')
       ORDER BY repo_id, ref, head`,
    );
    const stored = await sql<Record<string, unknown>>`
      SELECT p.repository_id::text AS repo_id, p.ref, p.head, p.commits_state, p.origin
      FROM push_events p
      WHERE p.created_at >= ${w.pushHour.start} AND p.created_at < ${hourEnd(w.pushHour)}
        AND p.head NOT IN (${w.heads.privateRepo}, ${w.heads.webhookUnknownRepo})
      ORDER BY p.repository_id, p.ref COLLATE "C", p.head COLLATE "C"`.execute(t.db);
    expect(read).toEqual(stored.rows);
    expect(new Set(read.map((r) => r.commits_state)).size).toBeGreaterThan(3);
  });

  it('push_commits: every stored commit of a listed push, all of them, in order', async () => {
    const read = await rows(
      `SELECT repo_id, ref, head, position, sha, author_name, author_email, author_id,
         author_login, message, "distinct",
         epoch_us(authored_at)::VARCHAR AS authored_us, epoch_us(committed_at)::VARCHAR AS committed_us
       FROM read_parquet('${commitsFile()}')`,
    );
    const stored = await sql<Record<string, unknown>>`
      SELECT pc.repository_id::text AS repo_id, pc.ref, pc.head, pc.position, pc.sha,
        c.author_name, c.author_email, c.author_id::text AS author_id, c.author_login, c.message,
        pc."distinct",
        (extract(epoch FROM c.authored_at) * 1000000)::bigint::text AS authored_us,
        (extract(epoch FROM c.committed_at) * 1000000)::bigint::text AS committed_us
      FROM push_events p
      JOIN push_commits pc ON (pc.repository_id, pc.ref, pc.before, pc.head) = (p.repository_id, p.ref, p.before, p.head)
      LEFT JOIN commits c ON (c.repository_id, c.sha) = (pc.repository_id, pc.sha)
      WHERE p.created_at >= ${w.pushHour.start} AND p.created_at < ${hourEnd(w.pushHour)}
        AND p.head NOT IN (${w.heads.privateRepo}, ${w.heads.webhookUnknownRepo})
        AND p.commits_state IN ('complete', 'partial', 'none')
      ORDER BY p.created_at, p.id NULLS LAST, p.repository_id, p.ref COLLATE "C",
        p.before COLLATE "C", p.head COLLATE "C", pc.position`.execute(t.db);
    // The push of 25 commits has all 25 here; its line lists 20.
    expect(read.filter((r) => r.head === w.heads.partial)).toHaveLength(25);
    const line = jsonLines().find((l) => l.payload.head === w.heads.partial)!;
    expect([line.payload.size, line.payload.commits.length]).toEqual([25, 20]);
    expect(read).toEqual(stored.rows);
  });
});

describe('the manifest', () => {
  it('lists each file with its rows, bytes and SHA-256, and the hour counted by origin and state', async () => {
    const m = JSON.parse(readFileSync(path.join(dir, `${w.pushHour.name}.manifest.json`), 'utf8'));
    expect(m.files.map((f: { path: string }) => f.path)).toEqual([
      `${w.pushHour.name}.json.gz`,
      `push_commits/${w.pushHour.name}.parquet`,
      `pushes/${w.pushHour.name}.parquet`,
    ]);
    for (const f of m.files) {
      const bytes = readFileSync(path.join(dir, f.path));
      expect(f.bytes).toBe(bytes.length);
      expect(f.sha256).toBe(createHash('sha256').update(bytes).digest('hex'));
    }
    const rowsOf = (p: string) => m.files.find((f: { path: string }) => f.path === p).rows;
    expect(rowsOf(`pushes/${w.pushHour.name}.parquet`)).toBe(w.visible);
    expect(rowsOf(`${w.pushHour.name}.json.gz`)).toBe(w.visible);
    const stored = await sql<{ origin: string; state: string; n: number }>`
      SELECT p.origin, p.commits_state AS state, count(*)::int AS n FROM push_events p
      WHERE p.created_at >= ${w.pushHour.start} AND p.created_at < ${hourEnd(w.pushHour)}
        AND p.head NOT IN (${w.heads.privateRepo}, ${w.heads.webhookUnknownRepo})
      GROUP BY 1, 2`.execute(t.db);
    expect(m.pushes).toBe(w.visible);
    expect(Object.keys(m.pushes_by_origin)).toEqual([...PUSH_ORIGINS]);
    expect(Object.keys(m.pushes_by_commits_state)).toEqual([...COMMITS_STATES]);
    for (const o of PUSH_ORIGINS) {
      const n = stored.rows.filter((r) => r.origin === o).reduce((s, r) => s + r.n, 0);
      expect(m.pushes_by_origin[o], o).toBe(n);
    }
    for (const s of COMMITS_STATES) {
      const n = stored.rows.filter((r) => r.state === s).reduce((a, r) => a + r.n, 0);
      expect(m.pushes_by_commits_state[s], s).toBe(n);
    }
    expect(m.pushes_by_commits_state.pending).toBe(1);
    expect(m.gaps_open).toEqual([]);
  });

  it('lists the gaps open over the hour', async () => {
    const gap = await sql<{ id: string }>`
      INSERT INTO gaps (source_id, from_at, to_at, state)
      SELECT id, ${new Date(w.pushHour.start.getTime() + 600_000)}, ${new Date(w.pushHour.start.getTime() + 1_200_000)}, 'open'
      FROM event_sources LIMIT 1 RETURNING id::text AS id`.execute(t.db);
    try {
      const other = mkdtempSync(path.join(tmpdir(), 'gpi-export-parquet-'));
      const r = await runBin('export', [w.pushHour.name, '--out', other], env());
      expect(r.code, r.err).toBe(0);
      const m = JSON.parse(
        readFileSync(path.join(other, `${w.pushHour.name}.manifest.json`), 'utf8'),
      );
      expect(m.gaps_open).toEqual([
        {
          id: gap.rows[0]!.id,
          from: new Date(w.pushHour.start.getTime() + 600_000).toISOString(),
          to: new Date(w.pushHour.start.getTime() + 1_200_000).toISOString(),
        },
      ]);
      // JSON alone: the manifest lists the JSON file alone.
      expect(m.files.map((f: { path: string }) => f.path)).toEqual([`${w.pushHour.name}.json.gz`]);
      rmSync(other, { recursive: true, force: true });
    } finally {
      await sql`DELETE FROM gaps WHERE id = ${gap.rows[0]!.id}::bigint`.execute(t.db);
    }
  });
});

describe('bin/export --format parquet', () => {
  it('writes the same bytes again, and a day as its hours', async () => {
    const again = mkdtempSync(path.join(tmpdir(), 'gpi-export-parquet-'));
    try {
      const day = w.pushHour.name.replace(/-\d{1,2}$/, '');
      const r = await runBin('export', [day, '--format', 'parquet', '--out', again], env());
      expect(r.code, r.err).toBe(0);
      const hours = parseHours([day], new Date());
      expect(hours.length).toBeGreaterThan(1);
      expect(readdirSync(path.join(again, 'pushes')).sort()).toEqual(
        hours.map((h) => `${h.name}.parquet`).sort(),
      );
      expect(readdirSync(path.join(again, 'push_commits'))).toHaveLength(hours.length);
      for (const table of ['pushes', 'push_commits']) {
        const name = `${w.pushHour.name}.parquet`;
        expect(
          readFileSync(path.join(again, table, name)).equals(
            readFileSync(path.join(dir, table, name)),
          ),
          table,
        ).toBe(true);
      }
      expect(existsSync(path.join(again, `${w.pushHour.name}.json.gz`))).toBe(false);
      expect(existsSync(path.join(again, `${w.pushHour.name}.manifest.json`))).toBe(true);
    } finally {
      rmSync(again, { recursive: true, force: true });
    }
  });

  it('refuses an unknown format', async () => {
    const r = await runBin('export', [w.pushHour.name, '--format', 'csv'], env());
    expect(r.code).toBe(2);
    expect(r.err).toContain('--format "csv"');
  });
});
