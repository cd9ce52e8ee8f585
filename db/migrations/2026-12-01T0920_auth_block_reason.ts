import { type Kysely, sql } from 'kysely';

// Frozen (issue 17 item 6): since when a credential's 401s run in a row and what GitHub
// said, so a pool whose every credential is rejected can say which, since when and until
// when, and /status can show each auth block with its reason. Both are cleared with the
// auth ladder by the first answer that is not a 401. Never import application code here.

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    ALTER TABLE github_rate_limits
      ADD COLUMN auth_failed_since timestamptz,
      ADD COLUMN auth_error text`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`
    ALTER TABLE github_rate_limits DROP COLUMN auth_failed_since, DROP COLUMN auth_error`.execute(
    db,
  );
}
