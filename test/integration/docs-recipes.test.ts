import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { installViews } from '../../src/status/views.ts';
import { ROOT } from '../support/cli.ts';
import { useTestDatabase } from '../support/db.ts';
import { docPage, section } from '../support/docs.ts';

/**
 * Every SQL recipe of the manual (each statement of each ```sql block in README.md and
 * docs/*.md) is planned by Postgres against the schema bin/setup makes: a column, table or
 * view a recipe names and the schema does not have fails here (the schema page's recipe once
 * used a column its list did not name; a renamed one would break a user's copy-paste).
 * EXPLAIN plans without running anything. And every column a schema.md recipe reads from a
 * table is named in that table's row of the page's column list.
 */
const t = useTestDatabase();

interface Recipe {
  page: string;
  sql: string;
}

function recipes(): Recipe[] {
  const pages = [
    'README.md',
    ...readdirSync(path.join(ROOT, 'docs'))
      .filter((f) => f.endsWith('.md'))
      .map((f) => `docs/${f}`),
  ];
  const out: Recipe[] = [];
  for (const page of pages) {
    const text = readFileSync(path.join(ROOT, page), 'utf8');
    for (const block of text.matchAll(/^```sql\n([\s\S]*?)^```$/gm)) {
      const bare = block[1]!
        .split('\n')
        .map((l) => l.replace(/--.*$/, ''))
        .join('\n');
      for (const statement of bare.split(';')) {
        const sql = statement.trim();
        // Queries a user runs; a DDL sketch (docs/scaling.md's partitioning) is not one.
        if (/^(SELECT|WITH)\b/i.test(sql)) out.push({ page, sql });
      }
    }
  }
  return out;
}

const all = recipes();

beforeAll(async () => {
  await installViews(t.db, 'pgboss');
});

describe('the SQL recipes of the manual', () => {
  it('are there (README and docs)', () => {
    expect(all.length).toBeGreaterThan(10);
  });

  it.each(all.map((r) => [r.page, r.sql.split('\n')[0], r.sql] as const))(
    '%s: %s plans against the schema',
    async (_page, _first, sql) => {
      await expect(t.pool.query(`EXPLAIN ${sql}`)).resolves.toBeDefined();
    },
  );
});

describe("docs/schema.md's column lists", () => {
  it("name every column the page's own recipes read from each table", async () => {
    const rows = new Map<string, string>();
    for (const line of section(docPage('schema.md'), 'Tables').split('\n')) {
      const name = /^\| `([a-z_]+)` \|/.exec(line)?.[1];
      if (name) rows.set(name, line);
    }
    const columns = await t.pool.query<{ table_name: string; column_name: string }>(
      `SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'public'`,
    );
    const unnamed: string[] = [];
    for (const r of all.filter((x) => x.page === 'docs/schema.md')) {
      for (const m of r.sql.matchAll(/\bFROM\s+([a-z_]+)/gi)) {
        const table = m[1]!;
        const row = rows.get(table);
        if (!row) continue; // a view: its columns are listed in prose
        for (const c of columns.rows.filter((c) => c.table_name === table)) {
          const used = new RegExp(`\\b${c.column_name}\\b`).test(r.sql);
          if (used && !new RegExp(`\\b${c.column_name}\\b`).test(row)) {
            unnamed.push(`${table}.${c.column_name}`);
          }
        }
      }
    }
    expect(unnamed).toEqual([]);
  });
});
