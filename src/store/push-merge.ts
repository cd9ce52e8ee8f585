import { KEY_DIGEST_FUNCTION } from '../../db/migrations/2026-12-05T1100_push_events_by_month.ts';
import {
  CONTENDER_RESULTS,
  type ContestedPush,
  contenderCtes,
  type IdClash,
  recordCtes,
} from './event-ids.ts';
import { AWAITING_CREDENTIAL } from './inline-commits.ts';

/**
 * The bulk store's one statement (src/store/pushes.ts), in its three forms: a
 * page's rows from parameter arrays, upserting actors and repositories too; an archive
 * chunk's rows from the staging table; and the same when the chunk is expected to be new.
 * Since push_events is partitioned by month (ADR 0199), push_keys decides what is new.
 */

export const STAGE_TABLE = 'gpi_push_stage';

/** The push_events columns the merge reads; actors and repositories go in beforehand. */
export const STAGE_COLUMNS = `
  id bigint, actor_id bigint, repository_id bigint,
  push_id bigint, ref text, head text, before text, created_at timestamptz,
  payload text, size integer, distinct_size integer, commit_count integer, commits_state text,
  commits_due boolean, commits_error text,
  actor_login text, repo_name text, org_id bigint, org_login text, payload_held smallint,
  commit_flags text, commit_shas bytea, commit_sha_texts text[]`;

/** A page's entity upsert: renames to the newest name of the batch. */
function entityUpsert(
  table: 'actors' | 'repositories',
  idColumn: string,
  nameColumn: string,
  givenName: string,
): string {
  // DISTINCT ON … ORDER BY id, created_at DESC: one row per entity, the newest name of the
  // batch, in id order (the lock order). xmax = 0 only on a freshly inserted row version:
  // inserted vs. renamed.
  return `INSERT INTO ${table} (id, ${nameColumn})
    SELECT DISTINCT ON (${idColumn}) ${idColumn}, ${givenName} FROM v
    ORDER BY ${idColumn}, created_at DESC
    ON CONFLICT (id) DO UPDATE SET ${nameColumn} = excluded.${nameColumn}, updated_at = now()
      WHERE ${table}.${nameColumn} IS DISTINCT FROM excluded.${nameColumn}
    RETURNING xmax = 0 AS inserted`;
}

/**
 * Where the merge reads its rows: the staging table (after a COPY), or — for a page of a
 * hundred, where a temporary table and a COPY cost more than they save — the statement's
 * own parameter arrays ($6 …). Ids travel as decimal text and are cast in Postgres, so
 * every digit arrives. $1 origin, $2 source, $3 run, $4 mirror id, $5 mirror URL.
 */
type MergeSource = 'stage' | 'values';

const VALUES_CTE = `v AS MATERIALIZED (
      SELECT id::bigint AS id, actor_id, actor_login, repository_id, repo_name, push_id, ref,
        head, before, created_at, payload, size, distinct_size, commit_count, commits_state,
        commits_due, commits_error, org_id, org_login, payload_held, commit_flags,
        decode(commit_hex, 'hex') AS commit_shas, commit_sha_texts::text[] AS commit_sha_texts
      FROM unnest($6::text[], $7::bigint[], $8::text[], $9::bigint[], $10::text[], $11::bigint[],
        $12::text[], $13::text[], $14::text[], $15::timestamptz[], $16::text[], $17::int[],
        $18::int[], $19::int[], $20::text[], $21::boolean[], $22::text[], $23::bigint[],
        $24::text[], $25::smallint[], $26::text[], $27::text[], $28::text[])
        AS u (id, actor_id, actor_login, repository_id, repo_name, push_id, ref, head, before,
          created_at, payload, size, distinct_size, commit_count, commits_state, commits_due,
          commits_error, org_id, org_login, payload_held, commit_flags, commit_hex,
          commit_sha_texts)
    ),`;

const NATURAL_KEY = (t: string) => `(${t}.repository_id, ${t}.ref, ${t}.before, ${t}.head)`;

/**
 * The merge, one statement. From the parameter arrays (a page) it upserts the actors and
 * repositories too; from the stage (an archive chunk) it merges the pushes alone, their
 * entities inserted beforehand by insertStagedEntities. The contender CTEs (event-ids.ts) find
 * the batch's ids stored with other pushes; a push contested in its era is inserted without
 * its id, for settleDisputes to decide. `p` returns the natural keys it inserted, so the
 * fill-in `f` only probes the pushes the insert skipped (a push it added had no webhook
 * copy to merge with): the data-modifying CTEs share one snapshot, so `f` cannot see `p`'s
 * rows anyway, and the two touch disjoint rows. With `expectNew` (stage only) the pushes
 * are inserted without `ON CONFLICT` (speculative insertion costs ~30% of the insert) and
 * there is nothing to fill in: a push already stored makes the statement fail, and the
 * caller merges again.
 */
function mergeStatement(from: MergeSource, expectNew = false): string {
  const src = from === 'stage' ? STAGE_TABLE : 'v';
  const entities = from === 'values';
  // One row a natural key (a batch may repeat a push), the contested ones without their id.
  const batch = `
      SELECT DISTINCT ON (s.repository_id, s.ref, s.before, s.head) s.*,
        CASE WHEN c.id IS NULL THEN s.id END AS kept_id,
        ${KEY_DIGEST_FUNCTION}(s.repository_id, s.ref, s.before, s.head) AS digest
      FROM ${src} s
      LEFT JOIN c ON c.id = s.id AND ${NATURAL_KEY('c')} = ${NATURAL_KEY('s')}
      ORDER BY s.repository_id, s.ref, s.before, s.head`;
  // push_keys decides what is new, whichever month a copy is in: a key held already (or
  // taken by a writer racing this one, which it waits for) is not inserted again. Its event
  // id is the push's, so two pushes claiming one id in an era meet at push_events_event_id
  // (event_id, event_id_era(created_at)).
  const keys = `
    b AS MATERIALIZED (${batch}),
    pk AS (
      INSERT INTO push_keys (repository_id, digest, created_at, event_id)
      SELECT b.repository_id, b.digest, b.created_at, b.kept_id
      FROM b ORDER BY b.repository_id, b.digest
      ${expectNew ? '' : 'ON CONFLICT (repository_id, digest) DO NOTHING'}
      RETURNING repository_id, digest
    ),`;
  const insert = `
      INSERT INTO push_events (id, actor_id, repository_id, push_id, ref, head, before,
        created_at, payload, payload_held, size, distinct_size, origin, source_id, run_id,
        commit_count, commits_state, commits_next_attempt_at, commits_error, mirror_id,
        actor_login, repo_name, org_id, org_login, commit_flags, commit_shas, commit_sha_texts)
      SELECT s.kept_id, s.actor_id, s.repository_id, s.push_id,
        s.ref, s.head, s.before, s.created_at, s.payload::jsonb, s.payload_held, s.size,
        s.distinct_size, $1::text, $2::bigint, $3::bigint, s.commit_count,
        -- a covered push stored without a credential: skipped, its next attempt marking it
        -- as waiting for one
        CASE WHEN s.commits_state = '${AWAITING_CREDENTIAL}' THEN 'skipped' ELSE s.commits_state END,
        CASE WHEN s.commits_due OR s.commits_state = '${AWAITING_CREDENTIAL}' THEN now() END,
        s.commits_error, $4::smallint, s.actor_login, s.repo_name, s.org_id, s.org_login,
        -- its inline list (inline-commits.ts insertedList): the row is written once
        s.commit_flags, s.commit_shas, s.commit_sha_texts
      FROM b s
      ${expectNew ? '' : 'WHERE (s.repository_id, s.digest) IN (SELECT repository_id, digest FROM pk)'}
      ORDER BY s.repository_id, s.ref, s.before, s.head`;
  const pushes = expectNew
    ? `${keys}
    p AS (${insert}
      RETURNING repository_id, ref, before, head, commits_state, commits_next_attempt_at
    )`
    : `${keys}
    p AS (${insert}
      RETURNING repository_id, ref, before, head, commits_state, commits_next_attempt_at
    ), f AS (
      UPDATE push_events t SET id = s.id, mirror_id = $4::smallint
      FROM b s JOIN push_keys h ON (h.repository_id, h.digest) = (s.repository_id, s.digest)
      WHERE s.id IS NOT NULL AND t.id IS NULL
        AND t.created_at = h.created_at AND t.head = s.head
        AND ${NATURAL_KEY('t')} = ${NATURAL_KEY('s')}
        AND NOT EXISTS (SELECT 1 FROM pk WHERE (pk.repository_id, pk.digest) = (s.repository_id, s.digest))
        AND NOT EXISTS (
          SELECT 1 FROM c WHERE c.id = s.id AND ${NATURAL_KEY('c')} = ${NATURAL_KEY('s')})
      RETURNING t.repository_id, t.ref, t.before, t.head
    )`;
  const upserts = entities
    ? `a AS (${entityUpsert('actors', 'actor_id', 'login', 'actor_login')}),
    r AS (${entityUpsert('repositories', 'repository_id', 'full_name', 'repo_name')}),`
    : '';
  return `
    WITH ${from === 'values' ? VALUES_CTE : ''}
    ${upserts}
    ${contenderCtes(src)}
    ${pushes}
    ${recordCtes(!expectNew)}
    SELECT ${entities ? '(SELECT count(*) FILTER (WHERE inserted) FROM a)' : '0'} AS actors,
           ${entities ? '(SELECT count(*) FILTER (WHERE inserted) FROM r)' : '0'} AS repositories,
           (SELECT count(*) FROM p) AS created,
           (SELECT count(*) FILTER (WHERE commits_next_attempt_at IS NOT NULL
             AND commits_state <> 'skipped') FROM p) AS pending,
           ${expectNew ? '0' : '(SELECT count(*) FROM f)'} AS filled,
           ${CONTENDER_RESULTS}`;
}

export interface MergeCounts {
  actors: string;
  repositories: string;
  created: string;
  pending: string;
  filled: string;
  clashes: IdClash[];
  contested: ContestedPush[];
}

/** The merges, each a prepared statement of the session it runs on (named gpi_merge_*). */
export const MERGE_VALUES_RENAMING = { name: 'gpi_merge_page', text: mergeStatement('values') };
export const MERGE_PUSHES_ONLY = { name: 'gpi_merge_stage', text: mergeStatement('stage') };
export const MERGE_PUSHES_ONLY_NEW = {
  name: 'gpi_merge_stage_new',
  text: mergeStatement('stage', true),
};
