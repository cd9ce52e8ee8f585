import { type Kysely, sql } from 'kysely';

// Frozen: the hour trigger of push_events watches the names an event carried too. Never
// import application code here.

/**
 * The push_events columns an hour file's lines are made of, now that a line writes the
 * login, repository name and organisation stored with the push (2026-12-05T0200): a write
 * that changes one of them changes the hour. test/integration/archive-hour-state.test.ts
 * holds the export's query to this list.
 */
export const WATCHED_PUSH_EVENTS = [
  'id',
  'actor_id',
  'repository_id',
  'push_id',
  'ref',
  'head',
  'before',
  'created_at',
  'commits_state',
  'commit_count',
  'distinct_size',
  'origin',
  'actor_login',
  'repo_name',
  'org_id',
  'org_login',
] as const;

/** The list the function watched before (2026-12-04T1100_archive_hour_state). */
const WATCHED_BEFORE = WATCHED_PUSH_EVENTS.slice(0, 12);

const HOUR = (col: string) => `date_trunc('hour', ${col}, 'UTC')`;
const ROW = (alias: string, cols: readonly string[]) =>
  `(${cols.map((c) => `${alias}."${c}"`).join(', ')})`;
const PUSH_KEY = (a: string) => `(${a}.repository_id, ${a}.ref, ${a}.before, ${a}.head)`;

/** The same function as before, over `cols`: CREATE OR REPLACE keeps its triggers. */
function pushEventsWritten(cols: readonly string[]): string {
  return `
    CREATE OR REPLACE FUNCTION archive_push_events_written() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
      IF TG_OP = 'INSERT' THEN
        PERFORM archive_hours_changed(ARRAY(SELECT ${HOUR('n.created_at')} FROM new_rows n));
      ELSIF TG_OP = 'DELETE' THEN
        PERFORM archive_hours_changed(ARRAY(SELECT ${HOUR('o.created_at')} FROM old_rows o));
      ELSE
        PERFORM archive_hours_changed(ARRAY(
          SELECT ${HOUR('t.at')}
          FROM old_rows o FULL JOIN new_rows n ON ${PUSH_KEY('o')} = ${PUSH_KEY('n')}
          CROSS JOIN LATERAL (VALUES (o.created_at), (n.created_at)) AS t(at)
          WHERE ${ROW('o', cols)} IS DISTINCT FROM ${ROW('n', cols)}));
      END IF;
      RETURN NULL;
    END $$`;
}

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql.raw(pushEventsWritten(WATCHED_PUSH_EVENTS)).execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql.raw(pushEventsWritten(WATCHED_BEFORE)).execute(db);
}
