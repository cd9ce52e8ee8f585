import { type Kysely, sql } from 'kysely';

// Frozen: webhook intake and the status page (issue 5, ADR 0008). Never import application code here.

export async function up(db: Kysely<unknown>): Promise<void> {
  // One row per GitHub delivery (X-GitHub-Delivery), written in the same transaction as
  // what the delivery stored: the primary key is what makes a redelivery a no-op. We keep
  // routing coordinates and a hash of the body, never the body itself.
  await sql`
    CREATE TABLE webhook_deliveries (
      delivery_id text PRIMARY KEY,
      event text NOT NULL,
      action text,
      -- 'push:created' | 'push:known' | 'ping' | 'ignored:<event>'
      routing text NOT NULL,
      payload_sha256 text NOT NULL,
      hook_id bigint,
      repository_id bigint,
      repository_full_name text,
      received_at timestamptz NOT NULL DEFAULT now()
    )`.execute(db);
  await sql`CREATE INDEX webhook_deliveries_received_at ON webhook_deliveries (received_at)`.execute(
    db,
  );

  // The status page charts count rows per minute over the last hours. Both tables are
  // append-mostly in time order, so a BRIN index answers "since 3 hours ago" for a few
  // pages of index whatever the table's size.
  await sql`CREATE INDEX push_events_ingested_at ON push_events USING brin (ingested_at)`.execute(db);
  await sql`CREATE INDEX github_requests_reserved_at ON github_requests USING brin (reserved_at)`.execute(
    db,
  );
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP INDEX IF EXISTS github_requests_reserved_at`.execute(db);
  await sql`DROP INDEX IF EXISTS push_events_ingested_at`.execute(db);
  await sql`DROP TABLE IF EXISTS webhook_deliveries`.execute(db);
}
