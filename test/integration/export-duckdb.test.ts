import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { type DuckDBConnection, DuckDBInstance } from '@duckdb/node-api';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inHourSnapshot, writeHourFile } from '../../src/export/write.ts';
import { useTestDatabase } from '../support/db.ts';
import { buildExportWorld, type ExportWorld } from '../support/export-world.ts';

/**
 * A real consumer: DuckDB reads an exported hour the way GH Archive's users read
 * an hour file — read_json over the .json.gz, `payload` as JSON — and two models of our own,
 * shaped as Open Source Observer's staging models shape pushes (one row a push: push_id,
 * size, distinct_size) and commits (one row a listed commit: sha, author e-mail and name,
 * distinct, url). Every push's size and distinct_size, and every commit's sha, author and
 * url, is checked against the tables.
 */

const t = useTestDatabase();
let w: ExportWorld;
let dir: string;
let duck: DuckDBInstance;
let c: DuckDBConnection;

beforeAll(async () => {
  w = await buildExportWorld(t);
  dir = mkdtempSync(path.join(tmpdir(), 'gpi-export-duckdb-'));
  const file = path.join(dir, `${w.pushHour.name}.json.gz`);
  await inHourSnapshot(t.db, (run) => writeHourFile(run, w.pushHour, file));
  // Offline: json is built in, and nothing may be fetched (tests never reach the internet).
  duck = await DuckDBInstance.create(':memory:', {
    autoinstall_known_extensions: 'false',
    autoload_known_extensions: 'false',
  });
  c = await duck.connect();
  await c.run(`
    CREATE TABLE events AS SELECT * FROM read_json('${file}',
      format = 'newline_delimited',
      columns = {id: 'VARCHAR', type: 'VARCHAR', actor: 'STRUCT(id BIGINT, login VARCHAR)',
        repo: 'STRUCT(id BIGINT, name VARCHAR)', payload: 'JSON', public: 'BOOLEAN',
        created_at: 'TIMESTAMPTZ', org: 'STRUCT(id BIGINT, login VARCHAR)'})`);
  // One row a push.
  await c.run(`
    CREATE VIEW pushes AS
    SELECT e.id AS event_id, e.created_at, e.actor.id AS actor_id, e.actor.login AS actor_login,
      e.repo.id AS repository_id, e.repo.name AS repository_name, e.org.login AS org_login,
      CAST(e.payload->'$.push_id' AS UBIGINT) AS push_id,
      e.payload->>'$.ref' AS git_ref, e.payload->>'$.before' AS before_sha,
      e.payload->>'$.head' AS head_sha,
      CAST(e.payload->'$.size' AS INTEGER) AS size,
      CAST(e.payload->'$.distinct_size' AS INTEGER) AS distinct_size
    FROM events e WHERE e.type = 'PushEvent'`);
  // One row a commit a push lists, in the push's order.
  await c.run(`
    CREATE VIEW push_commits AS
    SELECT e.repo.id AS repository_id, e.payload->>'$.ref' AS git_ref,
      e.payload->>'$.before' AS before_sha, e.payload->>'$.head' AS head_sha,
      l.n - 1 AS position, l.j->>'$.sha' AS sha,
      l.j->>'$.author.email' AS author_email, l.j->>'$.author.name' AS author_name,
      CAST(l.j->'$.distinct' AS BOOLEAN) AS is_distinct, l.j->>'$.url' AS url
    FROM events e, unnest(CAST(e.payload->'$.commits' AS JSON[])) WITH ORDINALITY AS l(j, n)
    WHERE e.type = 'PushEvent'`);
});
afterAll(() => {
  c?.closeSync();
  duck?.closeSync();
  rmSync(dir, { recursive: true, force: true });
});

async function rows(query: string): Promise<Record<string, unknown>[]> {
  return (await c.runAndReadAll(query)).getRowObjectsJson() as Record<string, unknown>[];
}

describe('an exported hour read by DuckDB', () => {
  it('has every push with the size and distinct_size the tables hold', async () => {
    const read = await rows(
      'SELECT event_id, repository_id, git_ref, head_sha, push_id, size, distinct_size FROM pushes ORDER BY head_sha',
    );
    const stored = await sql<{
      id: string | null;
      repository_id: string;
      ref: string;
      head: string;
      push_id: string | null;
      commits_state: string;
      commit_count: number | null;
      distinct_size: number | null;
      distincts: (boolean | null)[] | null;
    }>`
      SELECT p.id::text AS id, p.repository_id::text AS repository_id, p.ref, p.head,
        p.push_id::text AS push_id, p.commits_state, p.commit_count, p.distinct_size,
        (SELECT array_agg(pc."distinct") FROM push_commits pc
         WHERE (pc.repository_id, pc.ref, pc.before, pc.head) = (p.repository_id, p.ref, p.before, p.head)) AS distincts
      FROM push_events p
      WHERE p.created_at >= ${w.pushHour.start} AND p.created_at < ${new Date(w.pushHour.start.getTime() + 3_600_000)}
        AND p.head NOT IN (${w.heads.privateRepo}, ${w.heads.webhookUnknownRepo})
      ORDER BY p.head`.execute(t.db);
    expect(read).toHaveLength(w.visible);
    expect(stored.rows).toHaveLength(w.visible);
    read.forEach((r, i) => {
      const s = stored.rows[i]!;
      const size = s.commits_state === 'pending' ? null : s.commit_count;
      const allKnown = (s.distincts ?? []).every((d) => d !== null);
      const distinct =
        size === null
          ? null
          : (s.distinct_size ??
            (allKnown && (s.distincts ?? []).length === size
              ? (s.distincts ?? []).filter(Boolean).length
              : null));
      expect(r, s.head).toEqual({
        event_id: s.id,
        repository_id: s.repository_id,
        git_ref: s.ref,
        head_sha: s.head,
        push_id: s.push_id,
        size,
        distinct_size: distinct,
      });
    });
  });

  it('has every listed commit with the sha, author and url the tables hold, the oldest 20 first', async () => {
    const read = await rows(
      `SELECT repository_id, git_ref, before_sha, head_sha, position, sha, author_email,
         author_name, is_distinct, url
       FROM push_commits ORDER BY repository_id, git_ref, before_sha, head_sha, position`,
    );
    const stored = await sql<Record<string, unknown>>`
      SELECT pc.repository_id::text AS repository_id, pc.ref AS git_ref, pc.before AS before_sha,
        pc.head AS head_sha, pc.position::text AS position, pc.sha, c.author_email, c.author_name,
        pc."distinct" AS is_distinct,
        'https://api.github.com/repos/' || r.full_name || '/commits/' || pc.sha AS url
      FROM push_events p
      JOIN repositories r ON r.id = p.repository_id
      JOIN push_commits pc ON (pc.repository_id, pc.ref, pc.before, pc.head) = (p.repository_id, p.ref, p.before, p.head)
      JOIN commits c ON (c.repository_id, c.sha) = (pc.repository_id, pc.sha)
      WHERE p.created_at >= ${w.pushHour.start} AND p.created_at < ${new Date(w.pushHour.start.getTime() + 3_600_000)}
        AND p.head NOT IN (${w.heads.privateRepo}, ${w.heads.webhookUnknownRepo})
        AND p.commits_state IN ('complete', 'partial', 'none') AND pc.position < 20
      ORDER BY pc.repository_id, pc.ref COLLATE "C", pc.before COLLATE "C", pc.head COLLATE "C", pc.position`.execute(
      t.db,
    );
    expect(stored.rows.length).toBeGreaterThan(20);
    expect(read).toEqual(stored.rows);
  });

  it('answers an aggregate as the tables do: commits listed per repository and author', async () => {
    const read = await rows(`
      SELECT p.repository_name, c.author_email, count(*)::INTEGER AS commits,
        count(DISTINCT p.head_sha)::INTEGER AS pushes
      FROM push_commits c JOIN pushes p USING (repository_id, git_ref, before_sha, head_sha)
      GROUP BY ALL ORDER BY ALL`);
    const stored = await sql<{
      repository_name: string;
      author_email: string;
      commits: number;
      pushes: number;
    }>`
      SELECT r.full_name AS repository_name, c.author_email, count(*)::int AS commits,
        count(DISTINCT pc.head)::int AS pushes
      FROM push_events p
      JOIN repositories r ON r.id = p.repository_id
      JOIN push_commits pc ON (pc.repository_id, pc.ref, pc.before, pc.head) = (p.repository_id, p.ref, p.before, p.head)
      JOIN commits c ON (c.repository_id, c.sha) = (pc.repository_id, pc.sha)
      WHERE p.created_at >= ${w.pushHour.start} AND p.created_at < ${new Date(w.pushHour.start.getTime() + 3_600_000)}
        AND p.head NOT IN (${w.heads.privateRepo}, ${w.heads.webhookUnknownRepo})
        AND p.commits_state IN ('complete', 'partial', 'none') AND pc.position < 20
      GROUP BY 1, 2 ORDER BY r.full_name COLLATE "C", c.author_email COLLATE "C"`.execute(t.db);
    expect(read).toEqual(stored.rows);
    expect(
      await rows(`SELECT org_login FROM pushes WHERE repository_name = '${w.repo.name}' LIMIT 1`),
    ).toEqual([{ org_login: w.org.login }]);
  });
});
