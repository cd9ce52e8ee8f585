import { type Kysely, sql } from 'kysely';

// Frozen (issue 9): why a credential is blocked, and how many 401s in a row it got, so a
// rejected token backs off on a short ladder (1, 5, 15, 60 min) that its first success
// clears, and a source can say GITHUB_AUTH_FAILED rather than "budget exhausted". Never
// import application code here.

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    ALTER TABLE github_rate_limits
      ADD COLUMN block_reason text CHECK (block_reason IN ('rate_limit', 'auth')),
      ADD COLUMN auth_failures integer NOT NULL DEFAULT 0`.execute(db);
  // Blocks recorded before this migration were rate limits or 401s; the 401 ones said so
  // nowhere. Call them rate limits: they expire on their own either way.
  await sql`
    UPDATE github_rate_limits SET block_reason = 'rate_limit' WHERE blocked_until IS NOT NULL`.execute(
    db,
  );
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`
    ALTER TABLE github_rate_limits DROP COLUMN block_reason, DROP COLUMN auth_failures`.execute(db);
}
