import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMigrator, migrateToLatest } from '../../src/platform/db/migrate.ts';
import { downToJustBefore } from '../support/migration-steps.ts';
import { createScratchDatabase, type ScratchDatabase } from '../support/scratch-db.ts';

// 2026-12-05T0310_timeline_pushes (ADR 0194): push_events.actor_id becomes nullable for the
// pushes of timeline-format archive lines, which name their actor by login only; a check
// holds every push to naming its actor one way or the other. Pushes stored before keep
// their actors; going down with a push that has no actor id is refused by name.
const MIGRATION = '2026-12-05T0310_timeline_pushes';
let s: ScratchDatabase;

beforeAll(async () => {
  s = await createScratchDatabase();
});
afterAll(async () => {
  await s?.drop();
});

async function actorIdNullable(): Promise<boolean> {
  const r = await sql<{ nullable: string }>`
    SELECT is_nullable AS nullable FROM information_schema.columns
    WHERE table_name = 'push_events' AND column_name = 'actor_id'`.execute(s.db);
  return r.rows[0]!.nullable === 'YES';
}

const insert = (head: string, actorId: number | null, login: string | null) =>
  sql`
  INSERT INTO push_events (actor_id, actor_login, repository_id, ref, before, head, created_at, payload)
  VALUES (${actorId}, ${login}, 10, 'refs/heads/main', '', ${head}, now(), '{}')`.execute(s.db);

describe(`migration ${MIGRATION}`, () => {
  it('makes actor_id nullable, keeps the pushes held, and refuses a push that names no actor', async () => {
    await downToJustBefore(s.db, MIGRATION);
    expect(await actorIdNullable()).toBe(false);
    await sql`
      INSERT INTO push_events (actor_id, repository_id, ref, before, head, created_at, payload)
      VALUES (1, 10, 'refs/heads/main', 'b1', 'h1', now(), '{}')`.execute(s.db);
    await expect(insert('h2', null, 'someone')).rejects.toMatchObject({ code: '23502' });

    expect(await migrateToLatest(s.db)).toContain(MIGRATION);
    expect(await actorIdNullable()).toBe(true);
    await insert('h2', null, 'someone');
    await expect(insert('h3', null, null)).rejects.toMatchObject({
      code: '23514',
      constraint: 'push_events_names_its_actor',
    });
    const r = await sql<{ head: string; actor_id: string | null }>`
      SELECT head, actor_id::text FROM push_events ORDER BY head`.execute(s.db);
    expect(r.rows).toEqual([
      { head: 'h1', actor_id: '1' },
      { head: 'h2', actor_id: null },
    ]);
  });

  it('goes down only once no push lacks an actor id, and up again', async () => {
    const names = (await createMigrator(s.db).getMigrations()).map((m) => m.name).sort();
    const before = names[names.indexOf(MIGRATION) - 1]!;
    const refused = await createMigrator(s.db).migrateTo(before);
    expect(String(refused.error)).toMatch(/1 pushes have no actor id/);
    expect(await actorIdNullable()).toBe(true);

    await sql`DELETE FROM push_events WHERE actor_id IS NULL`.execute(s.db);
    await downToJustBefore(s.db, MIGRATION);
    expect(await actorIdNullable()).toBe(false);
    expect(await migrateToLatest(s.db)).toContain(MIGRATION);
    expect(await actorIdNullable()).toBe(true);
  });
});
