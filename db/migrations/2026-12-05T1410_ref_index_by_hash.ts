import { type Kysely, sql } from 'kysely';

// Frozen: never import application code here.
//
// push_events_ref_created_at keys a push by the hash of its ref, not the ref's text:
// (repository_id, hashtext(ref), created_at). Its one reader, the default branch's tip at a
// new branch's push (the pushes to one ref of one repository just before, after and at a
// time), asks for one ref, which it names by its hash in the index condition and by its
// text in the filter, so a ref of the same hash costs a row read, never a wrong answer. An
// entry takes 36 bytes where it took about 52 (an 8-byte key, a 19-byte ref on average, a
// time, the alignment): about 23 bytes a push (ADR 0205).
//
// hashtext is immutable and kept across pg_upgrade (hash indexes and hash partitions rely on
// it). The index is rebuilt on every partition in the migration's transaction, as the
// partitioned indexes of 2026-12-05T1100 were built.

const OLD =
  'CREATE INDEX push_events_ref_created_at ON push_events (repository_id, ref, created_at)';
const NEW =
  'CREATE INDEX push_events_ref_created_at ON push_events (repository_id, hashtext(ref), created_at)';

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`DROP INDEX push_events_ref_created_at`.execute(db);
  await sql.raw(NEW).execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP INDEX push_events_ref_created_at`.execute(db);
  await sql.raw(OLD).execute(db);
}
