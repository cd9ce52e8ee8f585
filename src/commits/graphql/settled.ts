import { sql } from 'kysely';
import type { Db } from '../../platform/db/pool.ts';
import type { CommitsClaim } from '../claim.ts';
import { markGone } from '../state.ts';

/**
 * Which pushes GraphQL settled, per minute (commits_graphql_minutes, migration
 * 2026-12-02T0600, ADR 0171): what "pushes a point" on the status surfaces divides by the
 * GraphQL points of the same hour. Counted inside the transaction that settles the push, so
 * a crash before its COMMIT counts nothing and the push, fetched again, counts once.
 */

/** Rows a minute is split in (the repository id modulo this): concurrent batches rarely share one. */
export const GRAPHQL_SETTLED_SHARDS = 8;

/**
 * One push settled by GraphQL in `now`'s minute. Run it last in the settling transaction: its
 * row lock is held to the COMMIT, so it is held for as short a time as can be.
 */
export async function countGraphQLSettled(
  trx: Db,
  repositoryId: CommitsClaim['repositoryId'],
  now: Date,
): Promise<void> {
  await sql`
    INSERT INTO commits_graphql_minutes AS m (minute, shard, pushes)
    VALUES (date_trunc('minute', ${now}::timestamptz, 'UTC'),
            (${String(repositoryId)}::bigint % ${GRAPHQL_SETTLED_SHARDS}::int)::smallint, 1)
    ON CONFLICT (minute, shard) DO UPDATE SET pushes = m.pushes + 1`.execute(trx);
}

/** `gone` by a GraphQL answer (NOT_FOUND, no such head), counted with it. */
export function markGoneByGraphQL(
  db: Db,
  claim: CommitsClaim,
  detail: string,
  now: Date,
): Promise<boolean> {
  return db.transaction().execute(async (trx) => {
    const ok = await markGone(trx, claim, detail);
    if (ok) await countGraphQLSettled(trx, claim.repositoryId, now);
    return ok;
  });
}

/** Pushes GraphQL settled since `since`'s minute (at most 8 rows a minute: the primary key). */
export function graphqlSettledSinceSql(since: Date) {
  return sql<string>`(SELECT coalesce(sum(pushes), 0) FROM commits_graphql_minutes
    WHERE minute >= date_trunc('minute', ${since}::timestamptz, 'UTC'))`;
}
