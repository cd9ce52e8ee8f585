import { type Kysely, sql } from 'kysely';

// Frozen: never import application code here.

export async function up(db: Kysely<unknown>): Promise<void> {
  // What retention (HISTORY_MONTHS, ADR 0201) knows of each month it looked at: kept (with
  // why), exported (every hour verified in the archive) or dropped (its partition gone).
  // A dropped month's figures are kept here because nothing else holds them once its
  // partition is gone: the bytes it took, the pushes it held, where its files are.
  await sql`
    CREATE TABLE history_months (
      month date PRIMARY KEY CHECK (extract(day FROM month) = 1),
      state text NOT NULL CHECK (state IN ('kept', 'exported', 'dropped')),
      -- Why a month older than the kept window is still here (kept), else NULL.
      reason text,
      -- The pushes the month held when it was last verified, or when it was dropped.
      pushes bigint CHECK (pushes >= 0),
      -- Its partition's bytes (pg_total_relation_size) when it was dropped.
      bytes bigint CHECK (bytes >= 0),
      -- Where every hour of it was verified: a directory or a mirror (without userinfo).
      exported_to text,
      verified_at timestamptz,
      dropped_at timestamptz,
      updated_at timestamptz NOT NULL DEFAULT now(),
      CHECK (state <> 'dropped' OR (dropped_at IS NOT NULL AND exported_to IS NOT NULL)),
      CHECK (state = 'kept' OR verified_at IS NOT NULL)
    )`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP TABLE IF EXISTS history_months`.execute(db);
}
