import { sql } from 'kysely';
import type { Db } from '../../src/platform/db/pool.ts';
import { waitFor } from './helpers.ts';
import { type Child, spawnBin } from './world.ts';

/** The secret tests' shared steps and what they search for leaks (not a test file). */

/** bin/worker and bin/web with `env`, once the web listens (its URL). */
export async function startWorkerAndWeb(
  env: Record<string, string>,
  children: Child[],
): Promise<{ worker: Child; web: Child; url: string }> {
  const worker = spawnBin('worker', env);
  const web = spawnBin('web', env);
  children.push(worker, web);
  // A signal; bounded only so a broken start fails (a loaded machine takes its time).
  const listening = await web.waitForLine(
    (l) => l.event === 'web.listening',
    'the web to listen',
    90_000,
  );
  return { worker, web, url: String(listening.url) };
}

/** Waits until `n` enrichment attempts have an outcome (every entity of a small world tried). */
export async function untilAttempted(db: Db, n: number, timeoutMs: number): Promise<void> {
  await waitFor(
    async () => {
      const r = await sql<{ n: number }>`
        SELECT count(*)::int AS n FROM enrichment_attempts WHERE outcome IS NOT NULL`.execute(db);
      return r.rows[0]!.n >= n;
    },
    { timeoutMs, what: 'every entity to have been attempted' },
  );
}

/** Everything a child process wrote: its parsed log lines and raw stderr. */
export function childOutput(c: Child): string {
  return `${JSON.stringify(c.lines)}\n${c.stderr.join('')}`;
}

/** Every row of every table, business schema and pg-boss's, as Postgres renders it. */
export async function allRowsAsText(db: Db): Promise<string> {
  const tables = await sql<{ schema: string; name: string }>`
    SELECT table_schema AS schema, table_name AS name FROM information_schema.tables
    WHERE table_schema IN ('public', 'pgboss') AND table_type = 'BASE TABLE'`.execute(db);
  const parts: string[] = [];
  for (const { schema, name } of tables.rows) {
    const r = await sql<{ t: string | null }>`
      SELECT string_agg(x::text, E'\n') AS t FROM ${sql.table(`${schema}.${name}`)} x`.execute(db);
    parts.push(r.rows[0]!.t ?? '');
  }
  return parts.join('\n');
}

/**
 * A login role with `password`, so a DATABASE_URL can carry a sentinel password that the
 * server really checks (whatever the harness's authentication). Superuser: the processes
 * run migrations-free but create pg-boss's queue partitions. `drop` reassigns what it
 * created and removes it.
 */
export async function sentinelRole(
  db: Db,
  url: string,
  password: string,
): Promise<{ url: string; drop(): Promise<void> }> {
  const name = `gpi_sentinel_${process.pid}_${Math.floor(Math.random() * 1e6)}`;
  await sql`CREATE ROLE ${sql.id(name)} LOGIN SUPERUSER PASSWORD ${sql.lit(password)}`.execute(db);
  const u = new URL(url);
  u.username = name;
  u.password = password;
  return {
    url: u.href,
    async drop() {
      const me = (await sql<{ u: string }>`SELECT current_user AS u`.execute(db)).rows[0]!.u;
      await sql`REASSIGN OWNED BY ${sql.id(name)} TO ${sql.id(me)}`.execute(db);
      await sql`DROP OWNED BY ${sql.id(name)}`.execute(db);
      await sql`DROP ROLE ${sql.id(name)}`.execute(db);
    },
  };
}

/** A command's whole output, for the search: exit code, stdout and stderr. */
export function exitText(name: string, r: { code: number; out: string; err: string }): string {
  return `== ${name} (exit ${r.code})\n${r.out}\n${r.err}`;
}
