import { type Kysely, sql } from 'kysely';

// Frozen: enrichment's additions (issue 3, ADR 0006). Never import application code here.

export async function up(db: Kysely<unknown>): Promise<void> {
  // Profile fields a user queries; the whole answer is kept in `profile` as well.
  await sql`
    ALTER TABLE actors
      ADD COLUMN name text,
      ADD COLUMN company text,
      ADD COLUMN blog text,
      ADD COLUMN location text,
      ADD COLUMN bio text,
      ADD COLUMN type text,
      ADD COLUMN public_repos integer,
      ADD COLUMN followers integer,
      ADD COLUMN following integer,
      ADD COLUMN github_created_at timestamptz,
      ADD COLUMN profile jsonb`.execute(db);
  await sql`
    ALTER TABLE repositories
      ADD COLUMN description text,
      ADD COLUMN language text,
      ADD COLUMN stargazers integer,
      ADD COLUMN forks integer,
      ADD COLUMN default_branch text,
      ADD COLUMN fork boolean,
      ADD COLUMN archived boolean,
      ADD COLUMN license text,
      ADD COLUMN topics text[],
      ADD COLUMN pushed_at timestamptz,
      ADD COLUMN github_created_at timestamptz,
      ADD COLUMN profile jsonb`.execute(db);

  for (const table of ['actors', 'repositories']) {
    // The claim's two tiers (ADR 0006): never-enriched pending rows first, then
    // refreshes (pending rows that hold a profile). Each tier is a range scan on
    // next_attempt_at over a small partial index, whatever the table's size.
    await sql`
      CREATE INDEX ${sql.id(`${table}_claim_new`)} ON ${sql.table(table)} (next_attempt_at, first_seen_at)
      WHERE enrichment_state = 'pending' AND enriched_at IS NULL`.execute(db);
    await sql`
      CREATE INDEX ${sql.id(`${table}_claim_refresh`)} ON ${sql.table(table)} (next_attempt_at, first_seen_at)
      WHERE enrichment_state = 'pending' AND enriched_at IS NOT NULL`.execute(db);
    // The age-out sweep and the "any refresh due?" check: enriched rows by age.
    await sql`
      CREATE INDEX ${sql.id(`${table}_age_out`)} ON ${sql.table(table)} (enriched_at)
      WHERE enrichment_state = 'enriched'`.execute(db);
  }

  await sql`
    CREATE TABLE enrichment_attempts (
      id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      class text NOT NULL CHECK (class IN ('actor', 'repository')),
      entity_id bigint NOT NULL,
      attempt integer NOT NULL,
      started_at timestamptz NOT NULL DEFAULT now(),
      finished_at timestamptz,
      -- NULL while the request is in flight; a later claim of the same entity marks an
      -- attempt its dead worker left open as 'interrupted'.
      outcome text CHECK (outcome IN
        ('enriched', 'not_modified', 'gone', 'retry', 'failed', 'rate_limited', 'interrupted')),
      http_status integer,
      detail text,
      request_id bigint,
      job_id text,
      worker text
    )`.execute(db);
  await sql`CREATE INDEX enrichment_attempts_entity ON enrichment_attempts (class, entity_id, started_at)`.execute(
    db,
  );
  await sql`CREATE INDEX enrichment_attempts_started ON enrichment_attempts (started_at)`.execute(
    db,
  );
  await sql`
    CREATE INDEX enrichment_attempts_open ON enrichment_attempts (class, entity_id)
    WHERE outcome IS NULL`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP TABLE IF EXISTS enrichment_attempts`.execute(db);
  for (const table of ['actors', 'repositories']) {
    for (const index of ['claim_new', 'claim_refresh', 'age_out']) {
      await sql`DROP INDEX IF EXISTS ${sql.id(`${table}_${index}`)}`.execute(db);
    }
  }
  await sql`
    ALTER TABLE actors
      DROP COLUMN name, DROP COLUMN company, DROP COLUMN blog, DROP COLUMN location,
      DROP COLUMN bio, DROP COLUMN type, DROP COLUMN public_repos, DROP COLUMN followers,
      DROP COLUMN following, DROP COLUMN github_created_at, DROP COLUMN profile`.execute(db);
  await sql`
    ALTER TABLE repositories
      DROP COLUMN description, DROP COLUMN language, DROP COLUMN stargazers, DROP COLUMN forks,
      DROP COLUMN default_branch, DROP COLUMN fork, DROP COLUMN archived, DROP COLUMN license,
      DROP COLUMN topics, DROP COLUMN pushed_at, DROP COLUMN github_created_at,
      DROP COLUMN profile`.execute(db);
}
