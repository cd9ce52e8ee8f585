import { readdir } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import {
  type Migration,
  type MigrationProvider,
  type MigrationResultSet,
  Migrator,
  sql,
} from 'kysely';
import type pg from 'pg';
import {
  EVENT_ID_INDEX,
  EVENT_ID_INDEX_COLUMNS,
} from '../../../db/migrations/2026-12-01T1401_event_id_index.ts';
import {
  REF_CREATED_AT_INDEX,
  REF_CREATED_AT_INDEX_COLUMNS,
} from '../../../db/migrations/2026-12-02T0500_push_events_ref_created_at.ts';
import {
  FETCHER_INDEX_PREDICATE,
  FETCHER_INDEXES,
  onlineName,
} from '../../../db/migrations/2026-12-04T1050_commit_sources_and_unverified.ts';
import {
  AWAITING_INDEX,
  AWAITING_INDEX_DEFINITION,
} from '../../../db/migrations/2026-12-04T1110_commits_awaiting_credential.ts';
import { AppError } from '../errors.ts';
import { LockSpace } from './locks.ts';
import type { Db } from './pool.ts';

export const MIGRATIONS_DIR = fileURLToPath(new URL('../../../db/migrations/', import.meta.url));

/** db/migrations' module files, in name order (names are dated, so order is time). */
async function migrationFiles(dir: string): Promise<string[]> {
  return (await readdir(dir)).filter((f) => /\.(ts|js)$/.test(f) && !f.endsWith('.d.ts')).sort();
}

/** Loads db/migrations/*.ts in name order (names are dated, so order is time). */
class DirectoryMigrationProvider implements MigrationProvider {
  readonly dir: string;
  constructor(dir: string) {
    this.dir = dir;
  }
  async getMigrations(): Promise<Record<string, Migration>> {
    const out: Record<string, Migration> = {};
    for (const file of await migrationFiles(this.dir)) {
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
 * Indexes a migration needs that are built CONCURRENTLY just before it (writes go on
 * meanwhile), because Kysely's migrator runs all pending migrations in one transaction,
 * where CREATE INDEX CONCURRENTLY cannot run. The migration itself checks the index and
 * builds it in its transaction only if it is not there.
 */
const ONLINE_INDEXES = [
  {
    migration: '2026-12-01T1401_event_id_index',
    name: EVENT_ID_INDEX,
    create: `CREATE UNIQUE INDEX CONCURRENTLY ${EVENT_ID_INDEX} ON push_events ${EVENT_ID_INDEX_COLUMNS}`,
  },
  {
    migration: '2026-12-02T0500_push_events_ref_created_at',
    name: REF_CREATED_AT_INDEX,
    create: `CREATE INDEX CONCURRENTLY ${REF_CREATED_AT_INDEX} ON push_events ${REF_CREATED_AT_INDEX_COLUMNS}`,
  },
  // The fetcher's partial indexes over 'unverified' too: built under a second
  // name, which the migration gives the old one's.
  ...FETCHER_INDEXES.map((index) => ({
    migration: '2026-12-04T1050_commit_sources_and_unverified',
    name: onlineName(index.name),
    create: `CREATE INDEX CONCURRENTLY ${onlineName(index.name)} ON push_events ${index.columns} WHERE ${FETCHER_INDEX_PREDICATE}`,
  })),
  {
    migration: '2026-12-04T1110_commits_awaiting_credential',
    name: AWAITING_INDEX,
    create: `CREATE INDEX CONCURRENTLY ${AWAITING_INDEX} ${AWAITING_INDEX_DEFINITION}`,
  },
] as const;

function failedOf(set: MigrationResultSet): void {
  if (set.error) {
    const failed = set.results?.find((r) => r.status === 'Error');
    throw new MigrationFailed(failed?.migrationName, set.error);
  }
}

const applied = (set: MigrationResultSet) =>
  (set.results ?? []).filter((r) => r.status === 'Success').map((r) => r.migrationName);

/**
 * Builds `index` CONCURRENTLY (an INVALID leftover of an interrupted build is dropped
 * first), outside any transaction; a valid one is left alone.
 */
async function buildOnline(db: Db, index: (typeof ONLINE_INDEXES)[number]): Promise<void> {
  const r = await sql<{ valid: boolean }>`
    SELECT i.indisvalid AS valid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
    WHERE c.relname = ${index.name} AND c.relnamespace = current_schema()::regnamespace`.execute(
    db,
  );
  if (r.rows[0]?.valid) return;
  if (r.rows.length > 0) await sql.raw(`DROP INDEX CONCURRENTLY ${index.name}`).execute(db);
  await sql.raw(index.create).execute(db);
}

/**
 * Runs every pending migration. Callers that may race (two bin/setup at once) hold
 * the setup advisory lock around this via withSetupLock. When a migration with an online
 * index is pending and nothing after it has run, the migrations before it run first, then
 * the index is built CONCURRENTLY, then the rest.
 */
export async function migrateToLatest(db: Db): Promise<string[]> {
  const migrator = createMigrator(db);
  const done: string[] = [];
  for (const index of ONLINE_INDEXES) {
    const all = await migrator.getMigrations();
    const at = all.findIndex((m) => m.name === index.migration);
    if (at < 0 || all.slice(at).some((m) => m.executedAt)) continue;
    if (at > 0 && !all[at - 1]!.executedAt) {
      const before = await migrator.migrateTo(all[at - 1]!.name);
      failedOf(before);
      done.push(...applied(before));
    }
    await buildOnline(db, index);
  }
  const rest = await migrator.migrateToLatest();
  failedOf(rest);
  return [...done, ...applied(rest)];
}

/** True when every migration file has been applied (used by /readyz). */
export async function pendingMigrations(db: Db, dir = MIGRATIONS_DIR): Promise<string[]> {
  // From the files' names and Kysely's table, without loading the modules: the migrator's
  // getMigrations() imports every one, seconds on a loaded machine, and /readyz's first
  // check ran out of its 2 s deadline doing it.
  const names = (await migrationFiles(dir)).map((f) => f.replace(/\.(ts|js)$/, ''));
  const table = await sql<{ t: string | null }>`
    SELECT to_regclass('kysely_migration')::text AS t`.execute(db);
  if (!table.rows[0]?.t) return names;
  const done = await sql<{ name: string }>`SELECT name FROM kysely_migration`.execute(db);
  const executed = new Set(done.rows.map((r) => r.name));
  return names.filter((n) => !executed.has(n));
}

/**
 * Takes the setup lock by trying, not by waiting in pg_advisory_lock: a statement waiting
 * on a lock holds a snapshot, and CREATE INDEX CONCURRENTLY (run by the holder, on another
 * connection) waits for every older snapshot in the database, so waiters that block inside
 * a statement would wait for the holder while its index build waits for them — forever
 * (ten bin/setup at once on a fresh database did). Between tries a waiter holds nothing.
 */
async function takeSetupLock(client: pg.PoolClient): Promise<void> {
  for (let pause = 50; ; pause = Math.min(pause * 2, 500)) {
    const r = await client.query<{ ok: boolean }>('SELECT pg_try_advisory_lock($1, 0) AS ok', [
      LockSpace.setup,
    ]);
    if (r.rows[0]?.ok) return;
    await new Promise((resolve) => setTimeout(resolve, pause));
  }
}

/**
 * Holds a session advisory lock for the duration of fn so that concurrent setups
 * (several containers, two terminals) run one after the other; the second finds
 * nothing to do. The lock dies with the session if the process does.
 */
export async function withSetupLock<T>(pool: pg.Pool, fn: () => Promise<T>): Promise<T> {
  const client = await pool.connect();
  try {
    await takeSetupLock(client);
    try {
      return await fn();
    } finally {
      await client.query('SELECT pg_advisory_unlock($1, 0)', [LockSpace.setup]);
    }
  } finally {
    client.release();
  }
}
