import { type Kysely, sql } from 'kysely';

// Frozen: never import application code here.

/**
 * The export now reads more than the hour's triggers watched (migration
 * 2026-12-04T1100_archive_hour_state): the names an event carried (push_events.actor_login,
 * repo_name, org_id, org_login) in every format, and, in the push_commits Parquet table,
 * each commit's author id and login and its two times. A write that changes one of them must
 * count as a change of the hour, or /archive serves a file built before it. The two trigger
 * functions are replaced with the longer lists; the triggers themselves stay.
 */
export const WATCHED = {
  push_events: [
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
  ],
  commits: [
    'repository_id',
    'sha',
    'author_name',
    'author_email',
    'message',
    'author_id',
    'author_login',
    'authored_at',
    'committed_at',
  ],
} as const;

/** What the commits function watched before. */
const COMMITS_BEFORE = WATCHED.commits.slice(0, 5);

const HOUR = (col: string) => `date_trunc('hour', ${col}, 'UTC')`;
const ROW = (alias: string, cols: readonly string[]) =>
  `(${cols.map((c) => `${alias}."${c}"`).join(', ')})`;
const PUSH_KEY = (a: string) => `(${a}.repository_id, ${a}.ref, ${a}.before, ${a}.head)`;

async function pushEventsFunction(db: Kysely<unknown>, cols: readonly string[]): Promise<void> {
  await sql
    .raw(`
    CREATE OR REPLACE FUNCTION archive_push_events_written() RETURNS trigger LANGUAGE plpgsql AS $$
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
    END $$`)
    .execute(db);
}

async function commitsFunction(db: Kysely<unknown>, cols: readonly string[]): Promise<void> {
  const pushesListing = (rows: string) => `
    SELECT ${HOUR('p.created_at')} FROM (SELECT DISTINCT repository_id, sha FROM ${rows}) k
    JOIN push_commits pc ON (pc.repository_id, pc.sha) = (k.repository_id, k.sha)
    JOIN push_events p ON ${PUSH_KEY('p')} = ${PUSH_KEY('pc')}`;
  await sql
    .raw(`
    CREATE OR REPLACE FUNCTION archive_commits_written() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF TG_OP = 'INSERT' THEN
        PERFORM archive_hours_changed(ARRAY(${pushesListing('new_rows')}));
      ELSIF TG_OP = 'DELETE' THEN
        PERFORM archive_hours_changed(ARRAY(${pushesListing('old_rows')}));
      ELSE
        PERFORM archive_hours_changed(ARRAY(${pushesListing(`(
          SELECT n.repository_id, n.sha FROM old_rows o JOIN new_rows n
            ON (o.repository_id, o.sha) = (n.repository_id, n.sha)
          WHERE ${ROW('o', cols)} IS DISTINCT FROM ${ROW('n', cols)}) AS changed`)}));
      END IF;
      RETURN NULL;
    END $$`)
    .execute(db);
}

export async function up(db: Kysely<unknown>): Promise<void> {
  await pushEventsFunction(db, WATCHED.push_events);
  await commitsFunction(db, WATCHED.commits);
}

// Down restores the commits function only: the names on push_events may be watched by
// another migration too (watching a column more never serves a stale file).
export async function down(db: Kysely<unknown>): Promise<void> {
  await commitsFunction(db, COMMITS_BEFORE);
}
