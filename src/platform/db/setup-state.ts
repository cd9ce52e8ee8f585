import { sql } from 'kysely';
import { AppError } from '../errors.ts';
import { createMigrator } from './migrate.ts';
import type { Db } from './pool.ts';

export const NOT_SET_UP = 'database not set up: run bin/setup';

/** The database lacks what bin/setup creates: exit 1 for commands, 503 for the web. */
export class DatabaseNotSetUp extends AppError {
  constructor(detail?: string) {
    super('DATABASE_NOT_SET_UP', detail ? `${NOT_SET_UP} (${detail})` : NOT_SET_UP, {});
  }
}

/** True when the pg-boss schema has been installed (bin/setup). */
export async function pgBossInstalled(db: Db, schema: string): Promise<boolean> {
  const r = await sql<{ job: string | null; version: string | null }>`
    SELECT to_regclass(${`${schema}.job`}) AS job, to_regclass(${`${schema}.version`}) AS version`.execute(
    db,
  );
  return r.rows[0]!.job !== null && r.rows[0]!.version !== null;
}

/**
 * Commands check this before they touch a table, so a fresh database says what to do
 * instead of `relation "event_sources" does not exist`. A schema behind this version's
 * migrations is "not set up" too: bin/setup brings it forward.
 */
export async function assertSetUp(
  db: Db,
  { pgbossSchema }: { pgbossSchema?: string } = {},
): Promise<void> {
  const all = await createMigrator(db).getMigrations();
  const pending = all.filter((m) => !m.executedAt).map((m) => m.name);
  if (pending.length === all.length) throw new DatabaseNotSetUp();
  if (pending.length > 0) {
    throw new DatabaseNotSetUp(`${pending.length} migration(s) not applied: ${pending.join(', ')}`);
  }
  if (pgbossSchema && !(await pgBossInstalled(db, pgbossSchema))) {
    throw new DatabaseNotSetUp(`pg-boss schema "${pgbossSchema}" is not installed`);
  }
}

/**
 * A query failed because a table or schema bin/setup creates is missing (undefined_table,
 * invalid_schema_name): the web answers 503 with NOT_SET_UP instead of 500.
 */
export function isNotSetUpError(err: unknown): boolean {
  if (err instanceof DatabaseNotSetUp) return true;
  const code = (err as { code?: unknown })?.code;
  return code === '42P01' || code === '3F000';
}
