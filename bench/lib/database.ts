import { sql } from 'kysely';
import pg from 'pg';
import { acquireEmbeddedPostgres } from '../../src/platform/db/embedded.ts';
import { migrateToLatest } from '../../src/platform/db/migrate.ts';
import { createDb, createPool, type Db } from '../../src/platform/db/pool.ts';
import { createLogger } from '../../src/platform/log.ts';

/**
 * Where the bench runs, in this order:
 * 1. DATABASE_URL: that database, migrated to latest. The bench truncates the business
 *    tables between benchmarks, so it refuses a database that already holds pushes or
 *    entities — point it at a throwaway database.
 * 2. The local Postgres (BENCH_ADMIN_URL, default postgres://postgres@127.0.0.1:5432/postgres):
 *    a fresh scratch database created and migrated here, dropped at the end. It is named
 *    `gpi_<epoch seconds, base 36>_bench`: the test harness's run-stamped convention, so a
 *    concurrent `vitest run` (which drops `gpi_*` databases older than 3 h by that stamp)
 *    leaves it alone, and a bench killed before its cleanup is swept later.
 * 3. Embedded Postgres (as `npm start` would start it), with a scratch database likewise.
 */

export const DEFAULT_ADMIN_URL = 'postgres://postgres@127.0.0.1:5432/postgres';

export interface BenchDatabase {
  url: string;
  /** How it was found, for the printed header and docs. */
  origin: 'DATABASE_URL' | 'local server' | 'embedded';
  serverVersion: string;
  pool: pg.Pool;
  db: Db;
  /** Leave the database when closing (a scratch one is not dropped): `growth --keep`. */
  keep(): void;
  close(): Promise<void>;
}

const BUSINESS_TABLES = [
  'push_events',
  'ingestion_runs',
  'event_sources',
  'actors',
  'repositories',
  'enrichment_attempts',
  'github_requests',
  'github_request_minutes',
  'github_rate_limits',
  'github_endpoint_pace',
  'webhook_deliveries',
  'backfill_files',
  'gaps',
  'stored_commits',
  'commit_fetch_turns',
];

function withDatabase(url: string, database: string): string {
  const u = new URL(url);
  u.pathname = `/${database}`;
  return u.toString();
}

async function adminQuery(adminUrl: string, text: string): Promise<void> {
  const client = new pg.Client({ connectionString: adminUrl, connectionTimeoutMillis: 3000 });
  await client.connect();
  try {
    await client.query(text);
  } finally {
    await client.end();
  }
}

async function answers(adminUrl: string): Promise<boolean> {
  try {
    await adminQuery(adminUrl, 'SELECT 1');
    return true;
  } catch {
    return false;
  }
}

async function connect(
  url: string,
  origin: BenchDatabase['origin'],
  cleanup: (drop: boolean) => Promise<void>,
): Promise<BenchDatabase> {
  // Enough connections for 4 concurrent runners, their gate sessions and the harness.
  const pool = createPool(url, { max: 16, applicationName: 'gpi-bench' });
  const db = createDb(pool);
  await migrateToLatest(db);
  const v = await sql<{ v: string }>`SELECT current_setting('server_version') AS v`.execute(db);
  let kept = false;
  return {
    url,
    origin,
    serverVersion: v.rows[0]!.v,
    pool,
    db,
    keep() {
      kept = true;
    },
    async close() {
      await db.destroy();
      await cleanup(!kept);
      if (kept && origin !== 'DATABASE_URL') console.log(`# kept: ${url}`);
    },
  };
}

export async function openBenchDatabase(): Promise<BenchDatabase> {
  const scratch = `gpi_${Math.floor(Date.now() / 1000).toString(36)}_bench`;

  if (process.env.DATABASE_URL) {
    const handle = await connect(process.env.DATABASE_URL, 'DATABASE_URL', async () => {});
    const held = await sql<{ n: string }>`
      SELECT (SELECT count(*) FROM (SELECT 1 FROM push_events LIMIT 1) p)
           + (SELECT count(*) FROM (SELECT 1 FROM actors LIMIT 1) a) AS n`.execute(handle.db);
    if (Number(held.rows[0]!.n) > 0) {
      await handle.close();
      throw new Error(
        'DATABASE_URL already holds pushes or actors; the bench truncates tables. ' +
          'Point DATABASE_URL at a throwaway database, or unset it to use a scratch one.',
      );
    }
    return handle;
  }

  const adminUrl = process.env.BENCH_ADMIN_URL ?? DEFAULT_ADMIN_URL;
  if (await answers(adminUrl)) {
    await adminQuery(adminUrl, `CREATE DATABASE ${scratch}`);
    return connect(withDatabase(adminUrl, scratch), 'local server', async (drop) => {
      if (drop) await adminQuery(adminUrl, `DROP DATABASE IF EXISTS ${scratch} WITH (FORCE)`);
    });
  }

  const embedded = await acquireEmbeddedPostgres({
    dataDir: process.env.DATA_DIR ?? '.data',
    logger: createLogger('silent'),
    role: 'bench',
  });
  const embeddedAdmin = withDatabase(embedded.url, 'postgres');
  await adminQuery(embeddedAdmin, `CREATE DATABASE ${scratch}`);
  return connect(withDatabase(embedded.url, scratch), 'embedded', async (drop) => {
    if (drop) await adminQuery(embeddedAdmin, `DROP DATABASE IF EXISTS ${scratch} WITH (FORCE)`);
    await embedded.release();
  });
}

/** Empties every business table: each benchmark starts from the same clean schema. */
export async function resetBusinessTables(db: Db): Promise<void> {
  await sql`TRUNCATE ${sql.join(BUSINESS_TABLES.map((t) => sql.table(t)))} RESTART IDENTITY CASCADE`.execute(
    db,
  );
}
