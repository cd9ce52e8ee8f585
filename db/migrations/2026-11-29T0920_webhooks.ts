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
  await sql`CREATE INDEX push_events_ingested_at ON push_events USING brin (ingested_at)`.execute(
    db,
  );
  await sql`CREATE INDEX github_requests_reserved_at ON github_requests USING brin (reserved_at)`.execute(
    db,
  );

  // /metrics derives its counters from the ledgers at scrape time (so every process's work
  // is counted), but retention prunes the ledgers: a count(*) would fall, and Prometheus
  // would read every prune as a counter reset and report a burst. What a delete removes
  // is added to metric_tallies first, so live rows + tallies only ever grow.
  await sql`
    CREATE TABLE metric_tallies (
      metric text NOT NULL,
      labels jsonb NOT NULL,
      n bigint NOT NULL,
      PRIMARY KEY (metric, labels)
    )`.execute(db);
  const tallies = [
    {
      table: 'ingestion_runs',
      select: `SELECT 'gpi_ingestion_runs_total', jsonb_build_object('outcome', status), count(*)
               FROM gone WHERE status <> 'running' GROUP BY status
               UNION ALL
               SELECT 'gpi_gaps_total', '{}'::jsonb, count(*) FROM gone WHERE gap_detected
               HAVING count(*) > 0`,
    },
    {
      table: 'github_requests',
      select: `SELECT 'gpi_github_requests_total',
                      jsonb_build_object('purpose', purpose, 'status', coalesce(status::text, outcome)),
                      count(*)
               FROM gone WHERE outcome NOT IN ('reserved', 'sent')
               GROUP BY purpose, coalesce(status::text, outcome)`,
    },
    {
      table: 'enrichment_attempts',
      select: `SELECT 'gpi_enrichment_attempts_total',
                      jsonb_build_object('class', class, 'outcome', outcome), count(*)
               FROM gone WHERE outcome IS NOT NULL GROUP BY class, outcome`,
    },
  ];
  for (const { table, select } of tallies) {
    const fn = `tally_deleted_${table}`;
    await sql
      .raw(`
        CREATE FUNCTION ${fn}() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          INSERT INTO metric_tallies (metric, labels, n)
          ${select}
          ON CONFLICT (metric, labels) DO UPDATE SET n = metric_tallies.n + excluded.n;
          RETURN NULL;
        END $$`)
      .execute(db);
    await sql
      .raw(`
        CREATE TRIGGER ${fn} AFTER DELETE ON ${table}
        REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION ${fn}()`)
      .execute(db);
  }
}

export async function down(db: Kysely<unknown>): Promise<void> {
  for (const table of ['ingestion_runs', 'github_requests', 'enrichment_attempts']) {
    await sql.raw(`DROP TRIGGER IF EXISTS tally_deleted_${table} ON ${table}`).execute(db);
    await sql.raw(`DROP FUNCTION IF EXISTS tally_deleted_${table}()`).execute(db);
  }
  await sql`DROP TABLE IF EXISTS metric_tallies`.execute(db);
  await sql`DROP INDEX IF EXISTS github_requests_reserved_at`.execute(db);
  await sql`DROP INDEX IF EXISTS push_events_ingested_at`.execute(db);
  await sql`DROP TABLE IF EXISTS webhook_deliveries`.execute(db);
}
