import { sql } from 'kysely';
import type { Db } from '../../src/db/pool.ts';
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
  const listening = await web.waitForLine((l) => l.event === 'web.listening', 'the web to listen');
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
