import { type Kysely, sql } from 'kysely';

// Frozen: never import application code here.
//
// push_events_head, the hash index every natural-key lookup probes, fills its bucket pages
// (fillfactor 100, from the default 75; ADR 0205). Its keys are shas, spread evenly over the buckets,
// so a full page rarely overflows before its bucket splits: a lookup still reads a bucket
// page or two, and an entry costs 29 bytes where it cost 37 (200,000 random shas; 30 where
// it cost 50 a push in the storage bench's 5,290 copies of 2015-01-01-15). Rebuilt on every
// partition in the migration's transaction, as the partitioned indexes of 2026-12-05T1100
// were built.

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`DROP INDEX push_events_head`.execute(db);
  await sql`CREATE INDEX push_events_head ON push_events USING hash (head) WITH (fillfactor = 100)`.execute(
    db,
  );
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP INDEX push_events_head`.execute(db);
  await sql`CREATE INDEX push_events_head ON push_events USING hash (head)`.execute(db);
}
