import { type Kysely, sql } from 'kysely';

// Frozen: commits on for the public source too (issue 26 item 3, ADR 0112). Never import
// application code here.
//
// Migration 2026-12-01T1000_commits set commits_enabled by kind: on for repo, org and user
// sources, off for `public`. New sources now start with commits on whatever their kind, and
// the public source's existing rows follow: nothing recorded whether an operator turned one
// off on purpose (that was its default), so every public source is turned on, once, here.
// `bin/sources commits ID off` turns one off again. A repo, org or user source that is off
// was turned off by someone (its default was on): it is left as it is.
//
// Pushes already stored keep their commits_state: a `skipped` push stays skipped (ADR 0112
// says why). event_sources holds at most a few thousand rows: one statement.

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    UPDATE event_sources SET commits_enabled = true, updated_at = now()
    WHERE kind = 'public' AND NOT commits_enabled`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  // Back to the previous default for the public source (which ones were on before cannot
  // be told apart from the ones this turned on).
  await sql`
    UPDATE event_sources SET commits_enabled = false, updated_at = now()
    WHERE kind = 'public' AND commits_enabled`.execute(db);
}
