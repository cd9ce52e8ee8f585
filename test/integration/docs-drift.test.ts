import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { installViews } from '../../src/status/views.ts';
import { useTestDatabase } from '../support/db.ts';
import { docPage, firstCellNames, section } from '../support/docs.ts';
import { parsePrometheusText } from '../support/prometheus.ts';
import { startTestWeb, type TestWeb } from '../support/web.ts';

/**
 * The manual cannot drift from the schema or the exporter: every table and view
 * the migrations and bin/setup create is in docs/schema.md and the page lists none that does
 * not exist; every gpi_* metric /metrics serves is in docs/observability.md's metrics table,
 * and the table lists none it does not serve.
 */

const t = useTestDatabase();

describe('docs/schema.md', () => {
  const page = docPage('schema.md');
  const documented = (heading: string) =>
    firstCellNames(section(page, heading)).filter((n) => /^[a-z_]+$/.test(n));

  async function relations(kind: 'BASE TABLE' | 'VIEW'): Promise<string[]> {
    const r = await t.pool.query<{ name: string }>(
      // A partition (push_events' months, its default) is documented with its table.
      `SELECT table_name AS name FROM information_schema.tables t
       WHERE table_schema = 'public' AND table_type = $1 AND table_name NOT LIKE 'kysely\\_%'
         AND NOT EXISTS (SELECT 1 FROM pg_class c WHERE c.relname = t.table_name
                           AND c.relnamespace = 'public'::regnamespace AND c.relispartition)
       ORDER BY 1`,
      [kind],
    );
    return r.rows.map((row) => row.name);
  }

  it('lists every table, and no table that does not exist', async () => {
    const tables = await relations('BASE TABLE');
    expect(tables.length).toBeGreaterThan(5);
    expect(tables.filter((n) => !documented('Tables').includes(n))).toEqual([]);
    expect(documented('Tables').filter((n) => !tables.includes(n))).toEqual([]);
  });

  it('lists every view, and no view that does not exist', async () => {
    // The template is migrated with pg-boss installed; bin/setup adds the views after that.
    await installViews(t.db, 'pgboss');
    const views = await relations('VIEW');
    expect(views.length).toBeGreaterThan(0);
    expect(views.filter((n) => !documented('Views').includes(n))).toEqual([]);
    expect(documented('Views').filter((n) => !views.includes(n))).toEqual([]);
  });
});

describe('docs/observability.md metrics', () => {
  let web: TestWeb;
  beforeAll(async () => {
    web = await startTestWeb(t);
  });
  afterAll(async () => {
    await web?.close();
  });

  it('lists every gpi_* metric /metrics serves, and none it does not', async () => {
    const res = await fetch(`${web.url}/metrics`);
    expect(res.status).toBe(200);
    const served = [...parsePrometheusText(await res.text()).keys()].filter((n) =>
      n.startsWith('gpi_'),
    );
    expect(served.length).toBeGreaterThan(10);
    const documented = firstCellNames(section(docPage('observability.md'), 'Metrics')).flatMap(
      (cell) => cell.split(/,\s*/),
    );
    expect(served.filter((n) => !documented.includes(n)).sort()).toEqual([]);
    expect(documented.filter((n) => n.startsWith('gpi_') && !served.includes(n))).toEqual([]);
  });
});
