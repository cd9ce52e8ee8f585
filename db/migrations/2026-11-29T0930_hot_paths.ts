import { type Kysely, sql } from 'kysely';

// Frozen: indexes for the two hot counts benchmark 2 missed (issue 6, docs/performance.md). Never
// import application code here.

const ENTITY_TABLES = ['actors', 'repositories'];

/** The ledger rows that spend quota: the same text as SPENDS_QUOTA in src/github/ledger.ts,
 * because the planner only uses a partial index whose predicate the query repeats. */
const SPENDS_QUOTA = sql`counted IS NOT FALSE AND NOT (outcome = 'abandoned' AND sent_at IS NULL)`;

export async function up(db: Kysely<unknown>): Promise<void> {
  // The budget's window count (every reservation): only the rows that spend quota, with
  // what the count filters on as INCLUDE columns, so counting the window reads the index
  // alone (on all-visible pages) instead of visiting ~5,000 heap rows per reservation.
  await sql`
    CREATE INDEX github_requests_spend ON github_requests (credential, reserved_at)
    INCLUDE (purpose, finished_at) WHERE ${SPENDS_QUOTA}`.execute(db);

  // countDue's pending half tests claimed_until on every due row: carrying it in the
  // pending index makes that count index-only. Same name and key, so every plan that
  // used the old index uses this one.
  for (const table of ENTITY_TABLES) {
    await sql`DROP INDEX ${sql.id(`${table}_pending`)}`.execute(db);
    await sql`
      CREATE INDEX ${sql.id(`${table}_pending`)} ON ${sql.table(table)} (next_attempt_at, first_seen_at)
      INCLUDE (claimed_until) WHERE enrichment_state = 'pending'`.execute(db);
  }
}

export async function down(db: Kysely<unknown>): Promise<void> {
  for (const table of ENTITY_TABLES) {
    await sql`DROP INDEX ${sql.id(`${table}_pending`)}`.execute(db);
    await sql`
      CREATE INDEX ${sql.id(`${table}_pending`)} ON ${sql.table(table)} (next_attempt_at, first_seen_at)
      WHERE enrichment_state = 'pending'`.execute(db);
  }
  await sql`DROP INDEX github_requests_spend`.execute(db);
}
