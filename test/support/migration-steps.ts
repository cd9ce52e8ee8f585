import { expect } from 'vitest';
import { createMigrator } from '../../src/platform/db/migrate.ts';
import type { Db } from '../../src/platform/db/pool.ts';

/**
 * A migration's test takes the schema down to just before it (as a deployment that has not
 * upgraded yet), fills it, and brings it up. This is the first half: the name before
 * `migration` and the migrations taken down, asserting the last one taken down is `migration`.
 */
export async function downToJustBefore(
  db: Db,
  migration: string,
): Promise<{ before: string; taken: string[] }> {
  const names = (await createMigrator(db).getMigrations()).map((m) => m.name).sort();
  const at = names.indexOf(migration);
  expect(at, `${migration} is not a migration`).toBeGreaterThan(0);
  const before = names[at - 1]!;
  const down = await createMigrator(db).migrateTo(before);
  expect(down.error).toBeUndefined();
  const taken = down.results?.map((r) => r.migrationName) ?? [];
  expect(taken.at(-1)).toBe(migration);
  return { before, taken };
}
