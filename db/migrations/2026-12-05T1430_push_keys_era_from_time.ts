import { type Kysely, sql } from 'kysely';

// Frozen: never import application code here.
//
// push_keys holds no `era` column: an event id's era is its event's UTC year, which the
// key's own created_at gives (event_id_era, immutable), so "one push per id and era" is a
// unique index on (event_id, event_id_era(created_at)), under the name it had
// (push_events_event_id: the store tells a race over an id by that name). A key is 8 bytes
// smaller (42 bytes of columns, aligned to 48, become 40); rows written before keep their
// width until the table is rewritten (VACUUM FULL push_keys). The triggers that write keys
// for other writers stop writing it (ADR 0205).

const INDEX = 'push_events_event_id';

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql.raw(`DROP INDEX ${INDEX}`).execute(db);
  await sql`ALTER TABLE push_keys DROP CONSTRAINT push_keys_check`.execute(db);
  await sql`ALTER TABLE push_keys DROP COLUMN era`.execute(db);
  await sql
    .raw(`CREATE UNIQUE INDEX ${INDEX} ON push_keys (event_id, event_id_era(created_at))
      WHERE event_id IS NOT NULL`)
    .execute(db);
  await triggers(db, false);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql.raw(`DROP INDEX ${INDEX}`).execute(db);
  await sql`ALTER TABLE push_keys ADD COLUMN era smallint`.execute(db);
  await sql`UPDATE push_keys SET era = event_id_era(created_at) WHERE event_id IS NOT NULL`.execute(
    db,
  );
  await sql`ALTER TABLE push_keys ADD CONSTRAINT push_keys_check
    CHECK ((event_id IS NULL) = (era IS NULL))`.execute(db);
  await sql
    .raw(`CREATE UNIQUE INDEX ${INDEX} ON push_keys (event_id, era) WHERE event_id IS NOT NULL`)
    .execute(db);
  await triggers(db, true);
}

/** The key triggers' functions of migration 2026-12-05T1100, with or without the era. */
async function triggers(db: Kysely<unknown>, era: boolean): Promise<void> {
  const columns = era ? 'event_id, era' : 'event_id';
  const values = era
    ? `n.id,
        CASE WHEN n.id IS NOT NULL THEN date_part('year', n.created_at AT TIME ZONE 'UTC')::smallint END`
    : 'n.id';
  const setEra = era
    ? `,
        era = CASE WHEN NEW.id IS NOT NULL THEN date_part('year', NEW.created_at AT TIME ZONE 'UTC')::smallint END`
    : '';
  await sql
    .raw(`
    CREATE OR REPLACE FUNCTION push_keys_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF EXISTS (SELECT 1 FROM new_rows n JOIN push_keys k
                   ON (k.repository_id, k.digest) = (n.repository_id, push_key_digest(n.repository_id, n.ref, n.before, n.head))
                 WHERE k.created_at <> n.created_at) THEN
        RAISE EXCEPTION 'a push is stored once: another copy of it is held in another month'
          USING ERRCODE = 'unique_violation', CONSTRAINT = 'push_events_natural_key';
      END IF;
      INSERT INTO push_keys (repository_id, digest, created_at, ${columns})
      SELECT n.repository_id, n.digest, n.created_at, ${values}
      FROM (SELECT r.*, push_key_digest(r.repository_id, r.ref, r.before, r.head) AS digest FROM new_rows r) n
      WHERE NOT EXISTS (SELECT 1 FROM push_keys k
                        WHERE (k.repository_id, k.digest) = (n.repository_id, n.digest));
      RETURN NULL;
    END $$`)
    .execute(db);
  await sql
    .raw(`
    CREATE OR REPLACE FUNCTION push_keys_id_changed() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      UPDATE push_keys SET event_id = NEW.id${setEra}
      WHERE repository_id = NEW.repository_id AND digest = push_key_digest(NEW.repository_id, NEW.ref, NEW.before, NEW.head);
      RETURN NULL;
    END $$`)
    .execute(db);
}
