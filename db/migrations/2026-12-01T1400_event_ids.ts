import { type Kysely, sql } from 'kysely';

// Frozen: event ids are not keys (issue 27 item 5, ADR 0122). Never import application
// code here. Its sibling 2026-12-01T1401_event_id_index swaps push_events' UNIQUE (id) for
// a unique (id, era) index; this one adds what that index and the stores need, and nothing
// here rewrites push_events (every statement is catalog-only there).

export async function up(db: Kysely<unknown>): Promise<void> {
  // An event id's era: the UTC year its event was created in. GitHub reset its event id
  // sequence on 2025-10-08 and new ids reuse those of 2016–2020, so an id names one event
  // per era, never one for all time; the same event read twice has the same created_at,
  // so it is always in one era. A SQL function the planner inlines (in indexes too).
  await sql`
    CREATE FUNCTION event_id_era(at timestamptz) RETURNS smallint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT date_part('year', at AT TIME ZONE 'UTC')::smallint $$`.execute(db);

  // The archive mirrors pushes were read from, by their GHARCHIVE_URL entry ('' for a local
  // file): push_events.mirror_id names the mirror an archive push's event id came from, so
  // two mirrors that disagree on an id are ranked by GHARCHIVE_URL whatever the read order.
  // No foreign key: the column is on the hottest insert, and mirrors are never deleted.
  await sql`
    CREATE TABLE archive_mirrors (
      id smallint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      url text NOT NULL UNIQUE,
      first_seen_at timestamptz NOT NULL DEFAULT now()
    )`.execute(db);
  await sql`ALTER TABLE push_events ADD COLUMN mirror_id smallint`.execute(db);

  // Every time two stored pushes were found claiming one event id: 'reused' (other eras:
  // both keep it) or 'disputed' (one era: `kept` holds it, `other` is stored without it).
  // `pair` is the md5 of both natural keys in key order, so a pair is recorded once.
  const side = (s: 'kept' | 'other') => `
      ${s}_repository_id bigint NOT NULL,
      ${s}_ref text NOT NULL,
      ${s}_before text NOT NULL,
      ${s}_head text NOT NULL,
      ${s}_created_at timestamptz NOT NULL,
      ${s}_origin text NOT NULL,
      ${s}_mirror text`;
  await sql
    .raw(`
    CREATE TABLE event_id_clashes (
      id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      event_id bigint NOT NULL,
      kind text NOT NULL CHECK (kind IN ('reused', 'disputed')),
      pair text NOT NULL,
      ${side('kept')},
      ${side('other')},
      detected_at timestamptz NOT NULL DEFAULT now(),
      CONSTRAINT event_id_clashes_once UNIQUE (event_id, pair)
    )`)
    .execute(db);

  // The horizon's ring, scoped by time: the created_at of each id in recent_event_ids (same
  // order). Rings written before this have no times (NULL: matched by id alone, as before);
  // they rotate out within a few runs.
  await sql`
    ALTER TABLE event_sources ADD COLUMN recent_event_at timestamptz[] NOT NULL DEFAULT '{}'`.execute(
    db,
  );
  await sql`
    UPDATE event_sources
    SET recent_event_at = array_fill(NULL::timestamptz, ARRAY[cardinality(recent_event_ids)])
    WHERE cardinality(recent_event_ids) > 0`.execute(db);

  // rejected_events: once per (source, event id, era). A key that is a bare id gains its
  // era from the event's created_at when that is plainly UTC (what the application derives
  // too); any other keeps its old key, and a re-read of it is recorded once more.
  await sql`
    UPDATE rejected_events
    SET event_key = event_key || '@' || left(raw ->> 'created_at', 4)
    WHERE event_key ~ '^[0-9]+$'
      AND raw ->> 'created_at' ~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]+)?Z$'`.execute(
    db,
  );
}

export async function down(db: Kysely<unknown>): Promise<void> {
  // One row per (source, bare id) again: the first seen of an id's eras is kept.
  await sql`
    DELETE FROM rejected_events r
    USING rejected_events k
    WHERE r.event_key ~ '^[0-9]+@[0-9]{4}$' AND k.event_key ~ '^[0-9]+@[0-9]{4}$'
      AND coalesce(r.source_id, 0) = coalesce(k.source_id, 0)
      AND split_part(r.event_key, '@', 1) = split_part(k.event_key, '@', 1)
      AND (r.first_seen_at, r.id) > (k.first_seen_at, k.id)`.execute(db);
  await sql`
    UPDATE rejected_events SET event_key = split_part(event_key, '@', 1)
    WHERE event_key ~ '^[0-9]+@[0-9]{4}$'
      AND NOT EXISTS (
        SELECT 1 FROM rejected_events o
        WHERE coalesce(o.source_id, 0) = coalesce(rejected_events.source_id, 0)
          AND o.event_key = split_part(rejected_events.event_key, '@', 1))`.execute(db);
  await sql`ALTER TABLE event_sources DROP COLUMN IF EXISTS recent_event_at`.execute(db);
  await sql`DROP TABLE IF EXISTS event_id_clashes`.execute(db);
  await sql`ALTER TABLE push_events DROP COLUMN IF EXISTS mirror_id`.execute(db);
  await sql`DROP TABLE IF EXISTS archive_mirrors`.execute(db);
  await sql`DROP FUNCTION IF EXISTS event_id_era(timestamptz)`.execute(db);
}
