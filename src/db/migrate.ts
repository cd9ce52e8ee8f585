import { readdir } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { type Migration, type MigrationProvider, type MigrationResultSet, Migrator } from 'kysely';
import type pg from 'pg';
import { AppError } from '../errors.ts';
import { LockSpace } from './locks.ts';
import type { Db } from './pool.ts';

export const MIGRATIONS_DIR = fileURLToPath(new URL('../../db/migrations/', import.meta.url));

/** Loads db/migrations/*.ts in name order (names are dated, so order is time). */
class DirectoryMigrationProvider implements MigrationProvider {
  readonly dir: string;
  constructor(dir: string) {
    this.dir = dir;
  }
  async getMigrations(): Promise<Record<string, Migration>> {
    const out: Record<string, Migration> = {};
    const files = (await readdir(this.dir)).filter(
      (f) => /\.(ts|js)$/.test(f) && !f.endsWith('.d.ts'),
    );
    for (const file of files.sort()) {
      const mod = (await import(pathToFileURL(path.join(this.dir, file)).href)) as Migration;
      out[file.replace(/\.(ts|js)$/, '')] = { up: mod.up, down: mod.down };
    }
    return out;
  }
}

export class MigrationFailed extends AppError {
  constructor(migration: string | undefined, cause: unknown) {
    super(
      'MIGRATION_FAILED',
      `migration ${migration ?? '(unknown)'} failed: ${String((cause as Error)?.message ?? cause)}`,
      { migration },
      { cause },
    );
  }
}

export function createMigrator(db: Db, dir = MIGRATIONS_DIR): Migrator {
  return new Migrator({ db, provider: new DirectoryMigrationProvider(dir) });
}

/**
 * Runs every pending migration. Callers that may race (two bin/setup at once) hold
 * the setup advisory lock around this via withSetupLock.
 */
export async function migrateToLatest(db: Db): Promise<string[]> {
  const { error, results }: MigrationResultSet = await createMigrator(db).migrateToLatest();
  if (error) {
    const failed = results?.find((r) => r.status === 'Error');
    throw new MigrationFailed(failed?.migrationName, error);
  }
  return (results ?? []).filter((r) => r.status === 'Success').map((r) => r.migrationName);
}

/** True when every migration file has been applied (used by /readyz). */
export async function pendingMigrations(db: Db): Promise<string[]> {
  const all = await createMigrator(db).getMigrations();
  return all.filter((m) => !m.executedAt).map((m) => m.name);
}

/**
 * Holds a session advisory lock for the duration of fn so that concurrent setups
 * (several containers, two terminals) run one after the other; the second finds
 * nothing to do. The lock dies with the session if the process does.
 */
export async function withSetupLock<T>(pool: pg.Pool, fn: () => Promise<T>): Promise<T> {
  const client = await pool.connect();
  try {
    await client.query('SELECT pg_advisory_lock($1, 0)', [LockSpace.setup]);
    try {
      return await fn();
    } finally {
      await client.query('SELECT pg_advisory_unlock($1, 0)', [LockSpace.setup]);
    }
  } finally {
    client.release();
  }
}
