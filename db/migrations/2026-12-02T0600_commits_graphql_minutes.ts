import { type Kysely, sql } from 'kysely';

// Frozen: which pushes GraphQL settled, per minute, for "pushes a point" on the status
// surfaces (issue 26 item 8, ADR 0171). Never import application code here.

export async function up(db: Kysely<unknown>): Promise<void> {
  // Per UTC minute, the pushes whose commits a GraphQL batch settled (complete, partial or
  // gone, proven by GraphQL; a REST fallback's push is not one). Written in the transaction
  // that settles the push, so a crash rolls the count back with the push and a push settled
  // once counts once. Split in shards (the repository id modulo 8) so that concurrent
  // batches rarely wait for one another's row lock (held to their COMMIT). A minute is at
  // most 8 rows; the status surfaces read the last hour's, retention keeps 2 hours (the
  // budget's per-minute counters' rule). Nothing on push_events: a column there would need
  // an index built over every stored push to be read within a bounded status.
  await sql`
    CREATE TABLE commits_graphql_minutes (
      minute timestamptz NOT NULL,
      shard smallint NOT NULL CHECK (shard >= 0),
      pushes integer NOT NULL DEFAULT 0 CHECK (pushes >= 0),
      PRIMARY KEY (minute, shard)
    )`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP TABLE IF EXISTS commits_graphql_minutes`.execute(db);
}
