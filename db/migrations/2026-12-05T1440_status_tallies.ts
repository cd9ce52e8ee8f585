import { type Kysely, sql } from 'kysely';

// Frozen: never import application code here.
//
// What status counts, without counting history (ADR 0206). Three counts read every table
// whole, or every row of a window that a backfill fills with all of history:
//
// - `push_minute_tallies`: the pushes stored, by minute of arrival (ingested_at) and by
//   minute of the event (created_at), and origin: the last 24 hours of status are a sum of
//   1,440 minutes' rows, where a backfill of a year made "arrived in the last 24 hours" a
//   count of every push it stored. One row a minute, clock and origin a statement on
//   push_events touched, appended by statement-level triggers with transition tables, as
//   push_tally_deltas is (migration 2026-12-05T1300): appending never waits on another
//   writer. The maintenance job deletes the rows older than two days; nothing reads them.
// - `entity_tallies` and `entity_tally_deltas`: actors and repositories by
//   enrichment_state, as push_tallies are pushes by month, origin and state; a reader sums
//   both, the maintenance job folds. An UPDATE that moves no entity to another state (a
//   claim, a retry's schedule) appends nothing.
// - `actors_leased` / `repositories_leased`: the pending entities under a lease, keyed on
//   its end, with next_attempt_at: "claimed" is the range of live leases, and the due count
//   becomes the pending tally less the pending rows that are not due (scheduled later, or
//   under a live lease), both bounded by work in flight, not by the backlog.
//
// What the triggers see: every statement on push_events, actors or repositories by those
// names (a partition named directly does not fire push_events' triggers: only the
// month-maker's move from the default partition does that, which changes no minute). No
// statement of the application deletes pushes; a month retention drops takes its pushed
// minutes along in its transaction. TRUNCATE empties the table's tallies.

const MINUTES = 'push_minute_tallies';
const ENTITY_TALLIES = 'entity_tallies';
const ENTITY_DELTAS = 'entity_tally_deltas';
const ENTITIES = [
  ['actor', 'actors'],
  ['repository', 'repositories'],
] as const;

/** One row a minute, clock and origin of `rows` (alias r), each push counted `sign` times. */
const MINUTE_ROWS = (rows: string, sign: '' | '-') => `
  SELECT date_trunc('minute', r.ingested_at, 'UTC') AS minute, 'arrived' AS clock, r.origin,
    ${sign}1 AS d FROM ${rows} r
  UNION ALL
  SELECT date_trunc('minute', r.created_at, 'UTC'), 'pushed', r.origin, ${sign}1 FROM ${rows} r`;

/** A statement trigger's function that runs `statements` and returns nothing. */
async function appendingTrigger(db: Kysely<unknown>, name: string, statements: string) {
  await sql
    .raw(`
    CREATE FUNCTION ${name}() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      ${statements};
      RETURN NULL;
    END $$`)
    .execute(db);
}

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql
    .raw(`
    CREATE TABLE ${MINUTES} (
      minute timestamptz NOT NULL,
      clock text NOT NULL CHECK (clock IN ('arrived', 'pushed')),
      origin text NOT NULL,
      pushes bigint NOT NULL
    )`)
    .execute(db);
  await sql.raw(`CREATE INDEX ${MINUTES}_window ON ${MINUTES} (clock, minute)`).execute(db);
  for (const [fn, body] of [
    [
      'push_minute_tallies_inserted',
      `SELECT minute, clock, origin, sum(d) FROM (${MINUTE_ROWS('new_rows', '')}) c
       GROUP BY 1, 2, 3`,
    ],
    [
      'push_minute_tallies_updated',
      `SELECT minute, clock, origin, sum(d)
       FROM (${MINUTE_ROWS('new_rows', '')} UNION ALL ${MINUTE_ROWS('old_rows', '-')}) c
       GROUP BY 1, 2, 3 HAVING sum(d) <> 0`,
    ],
    [
      'push_minute_tallies_deleted',
      `SELECT minute, clock, origin, sum(d) FROM (${MINUTE_ROWS('old_rows', '-')}) c
       GROUP BY 1, 2, 3`,
    ],
  ] as const) {
    await appendingTrigger(
      db,
      fn,
      `INSERT INTO ${MINUTES} (minute, clock, origin, pushes) ${body}`,
    );
  }
  await appendingTrigger(db, 'push_minute_tallies_truncated', `TRUNCATE ${MINUTES}`);

  await sql
    .raw(`
    CREATE TABLE ${ENTITY_TALLIES} (
      entity text NOT NULL,
      enrichment_state text NOT NULL,
      entities bigint NOT NULL CHECK (entities >= 0),
      PRIMARY KEY (entity, enrichment_state)
    )`)
    .execute(db);
  await sql
    .raw(`
    CREATE TABLE ${ENTITY_DELTAS} (
      entity text NOT NULL,
      enrichment_state text NOT NULL,
      entities bigint NOT NULL
    )`)
    .execute(db);
  // TG_ARGV[0]: the entity class the table holds.
  for (const [fn, body] of [
    [
      'entity_tallies_inserted',
      `SELECT TG_ARGV[0], n.enrichment_state, count(*) FROM new_rows n GROUP BY 2`,
    ],
    [
      'entity_tallies_updated',
      `SELECT TG_ARGV[0], s, sum(d)
       FROM (SELECT n.enrichment_state AS s, 1 AS d FROM new_rows n
             UNION ALL SELECT o.enrichment_state, -1 FROM old_rows o) c
       GROUP BY 2 HAVING sum(d) <> 0`,
    ],
    [
      'entity_tallies_deleted',
      `SELECT TG_ARGV[0], o.enrichment_state, -count(*) FROM old_rows o GROUP BY 2`,
    ],
  ] as const) {
    await appendingTrigger(
      db,
      fn,
      `INSERT INTO ${ENTITY_DELTAS} (entity, enrichment_state, entities) ${body}`,
    );
  }
  await appendingTrigger(
    db,
    'entity_tallies_truncated',
    `DELETE FROM ${ENTITY_DELTAS} WHERE entity = TG_ARGV[0];
     DELETE FROM ${ENTITY_TALLIES} WHERE entity = TG_ARGV[0]`,
  );

  // The triggers before the counts: creating one takes SHARE ROW EXCLUSIVE on its table, so
  // no writer stores a row between the count and this migration's commit.
  const referencing = {
    insert: 'NEW TABLE AS new_rows',
    update: 'OLD TABLE AS old_rows NEW TABLE AS new_rows',
    delete: 'OLD TABLE AS old_rows',
  } as const;
  const done = { insert: 'inserted', update: 'updated', delete: 'deleted' } as const;
  for (const op of ['insert', 'update', 'delete'] as const) {
    await sql
      .raw(`
      CREATE TRIGGER push_events_minutes_${op} AFTER ${op.toUpperCase()} ON push_events
        REFERENCING ${referencing[op]} FOR EACH STATEMENT
        EXECUTE FUNCTION push_minute_tallies_${done[op]}()`)
      .execute(db);
    for (const [entity, table] of ENTITIES) {
      await sql
        .raw(`
        CREATE TRIGGER ${table}_tallies_${op} AFTER ${op.toUpperCase()} ON ${table}
          REFERENCING ${referencing[op]} FOR EACH STATEMENT
          EXECUTE FUNCTION entity_tallies_${done[op]}('${entity}')`)
        .execute(db);
    }
  }
  await sql
    .raw(`
    CREATE TRIGGER push_events_minutes_truncate AFTER TRUNCATE ON push_events
      FOR EACH STATEMENT EXECUTE FUNCTION push_minute_tallies_truncated()`)
    .execute(db);
  for (const [entity, table] of ENTITIES) {
    await sql
      .raw(`
      CREATE TRIGGER ${table}_tallies_truncate AFTER TRUNCATE ON ${table}
        FOR EACH STATEMENT EXECUTE FUNCTION entity_tallies_truncated('${entity}')`)
      .execute(db);
  }

  // What is held already, counted once: the last two days' minutes (their BRIN indexes) and
  // every entity.
  for (const [clock, column] of [
    ['arrived', 'ingested_at'],
    ['pushed', 'created_at'],
  ] as const) {
    await sql
      .raw(`
      INSERT INTO ${MINUTES} (minute, clock, origin, pushes)
      SELECT date_trunc('minute', ${column}, 'UTC'), '${clock}', origin, count(*)
      FROM push_events WHERE ${column} > now() - interval '2 days' GROUP BY 1, 3`)
      .execute(db);
  }
  for (const [entity, table] of ENTITIES) {
    await sql
      .raw(`
      INSERT INTO ${ENTITY_TALLIES} (entity, enrichment_state, entities)
      SELECT '${entity}', enrichment_state, count(*) FROM ${table} GROUP BY 2`)
      .execute(db);
    await sql
      .raw(`
      CREATE INDEX ${table}_leased ON ${table} (claimed_until) INCLUDE (next_attempt_at)
        WHERE enrichment_state = 'pending' AND claimed_until IS NOT NULL`)
      .execute(db);
  }
}

export async function down(db: Kysely<unknown>): Promise<void> {
  for (const op of ['insert', 'update', 'delete', 'truncate']) {
    await sql.raw(`DROP TRIGGER IF EXISTS push_events_minutes_${op} ON push_events`).execute(db);
    for (const [, table] of ENTITIES) {
      await sql.raw(`DROP TRIGGER IF EXISTS ${table}_tallies_${op} ON ${table}`).execute(db);
    }
  }
  for (const f of ['inserted', 'updated', 'deleted', 'truncated']) {
    await sql.raw(`DROP FUNCTION IF EXISTS push_minute_tallies_${f}()`).execute(db);
    await sql.raw(`DROP FUNCTION IF EXISTS entity_tallies_${f}()`).execute(db);
  }
  for (const [, table] of ENTITIES) {
    await sql.raw(`DROP INDEX IF EXISTS ${table}_leased`).execute(db);
  }
  await sql.raw(`DROP TABLE IF EXISTS ${MINUTES}, ${ENTITY_DELTAS}, ${ENTITY_TALLIES}`).execute(db);
}
