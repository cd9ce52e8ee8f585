import { sql } from 'kysely';
import type pg from 'pg';
import type { BackfillFileState } from '../platform/db/columns.ts';
import { LockSpace, lockHeldSql } from '../platform/db/locks.ts';
import type { Db } from '../platform/db/pool.ts';
import { withoutUserinfo } from '../platform/redact.ts';
import { hourEnd, hourOf } from '../store/archive-hours.ts';
import { fileLockKey } from '../store/open-imports.ts';

/**
 * backfill_files: one row per (file, scope) import. `lines_done` and the counters move in
 * the same transaction as the rows a chunk stored, so after a crash the row says exactly
 * which lines are in the database: a resumed import skips them, and no line is counted
 * twice. Statements run on the importing session's client (its transaction).
 */

export interface Checkpoint {
  id: number;
  file: string;
  scope: string;
  state: BackfillFileState;
  linesDone: number;
  bytes: number | null;
  counts: CheckpointCounts;
  attempts: number;
  /** Imports of it whose process died mid-file. */
  deaths: number;
  error: string | null;
  startedAt: Date;
  updatedAt: Date;
  finishedAt: Date | null;
}

export interface CheckpointCounts {
  events: number;
  pushes: number;
  kept: number;
  created: number;
  malformed: number;
}

export const ZERO_COUNTS: CheckpointCounts = {
  events: 0,
  pushes: 0,
  kept: 0,
  created: 0,
  malformed: 0,
};

export function addCounts(a: CheckpointCounts, b: CheckpointCounts): CheckpointCounts {
  return {
    events: a.events + b.events,
    pushes: a.pushes + b.pushes,
    kept: a.kept + b.kept,
    created: a.created + b.created,
    malformed: a.malformed + b.malformed,
  };
}

interface Row {
  id: string;
  file: string;
  scope: string;
  state: BackfillFileState;
  lines_done: string;
  bytes: string | null;
  events_seen: string;
  pushes_seen: string;
  pushes_kept: string;
  pushes_created: string;
  malformed: string;
  attempts: number;
  deaths: number;
  error: string | null;
  started_at: Date;
  updated_at: Date;
  finished_at: Date | null;
}

function fromRow(r: Row): Checkpoint {
  return {
    id: Number(r.id),
    file: r.file,
    scope: r.scope,
    state: r.state,
    linesDone: Number(r.lines_done),
    bytes: r.bytes === null ? null : Number(r.bytes),
    counts: {
      events: Number(r.events_seen),
      pushes: Number(r.pushes_seen),
      kept: Number(r.pushes_kept),
      created: Number(r.pushes_created),
      malformed: Number(r.malformed),
    },
    attempts: r.attempts,
    deaths: r.deaths,
    error: r.error,
    startedAt: r.started_at,
    updatedAt: r.updated_at,
    finishedAt: r.finished_at,
  };
}

export interface CheckpointKey {
  file: string;
  scope: string;
  /** The mirror an archive hour is read from ('' for a local file): one checkpoint each. */
  mirror: string;
  /** The archive hour (null for a local file). */
  hour: Date | null;
  sourceId: number | null;
  gapId: number | null;
}

export async function readCheckpoint(
  client: pg.ClientBase,
  key: Pick<CheckpointKey, 'file' | 'scope' | 'mirror'>,
): Promise<Checkpoint | null> {
  const r = await client.query<Row>(
    'SELECT * FROM backfill_files WHERE file = $1 AND scope = $2 AND mirror = $3',
    [key.file, key.scope, key.mirror],
  );
  return r.rows[0] ? fromRow(r.rows[0]) : null;
}

/**
 * True when another mirror's copy of the same file was read for the same scope and kept
 * pushes: this copy will mostly hold pushes stored already, so its import merges with
 * conflict handling from the start instead of finding out on its first chunk.
 */
export async function readFromAnotherMirror(
  client: pg.ClientBase,
  key: Pick<CheckpointKey, 'file' | 'scope' | 'mirror'>,
): Promise<boolean> {
  const r = await client.query(
    `SELECT 1 FROM backfill_files
     WHERE file = $1 AND scope = $2 AND mirror <> $3 AND pushes_kept > 0 LIMIT 1`,
    [key.file, key.scope, key.mirror],
  );
  return r.rows.length > 0;
}

/**
 * Opens (or reopens) the checkpoint for an attempt: state running, one more attempt. With
 * `restart` (a changed file, or --force) reading starts over: lines_done and the counters
 * of lines read go back to zero. pushes_created does not: it counts rows this import put in
 * the database, which a second reading finds held and does not create again.
 */
export async function startCheckpoint(
  client: pg.ClientBase,
  key: CheckpointKey,
  opts: {
    bytes: number | null;
    worker: string;
    restart: boolean;
    /** The created_at range its pushes are expected in (null for a local file: unknown). */
    writes: WriteRange | null;
  },
): Promise<Checkpoint> {
  const r = await client.query<Row>(
    `INSERT INTO backfill_files (file, scope, source_id, gap_id, bytes, worker, attempts, mirror, hour,
       writes_from, writes_to)
     VALUES ($1, $2, $3, $4, $5, $6, 1, $8, $9, $10::timestamptz, $11::timestamptz)
     ON CONFLICT (file, scope, mirror) DO UPDATE SET
       state = 'running', attempts = backfill_files.attempts + 1, error = NULL,
       writes_from = least(backfill_files.writes_from, excluded.writes_from),
       writes_to = greatest(backfill_files.writes_to, excluded.writes_to),
       worker = excluded.worker, bytes = excluded.bytes, finished_at = NULL, updated_at = now(),
       lines_done = CASE WHEN $7 THEN 0 ELSE backfill_files.lines_done END,
       events_seen = CASE WHEN $7 THEN 0 ELSE backfill_files.events_seen END,
       pushes_seen = CASE WHEN $7 THEN 0 ELSE backfill_files.pushes_seen END,
       pushes_kept = CASE WHEN $7 THEN 0 ELSE backfill_files.pushes_kept END,
       malformed = CASE WHEN $7 THEN 0 ELSE backfill_files.malformed END,
       started_at = CASE WHEN $7 THEN now() ELSE backfill_files.started_at END
     RETURNING *`,
    [
      key.file,
      key.scope,
      key.sourceId,
      key.gapId,
      opts.bytes,
      opts.worker,
      opts.restart,
      key.mirror,
      key.hour,
      opts.writes?.from ?? null,
      opts.writes?.to ?? null,
    ],
  );
  return fromRow(r.rows[0]!);
}

/** The created_at range an import's pushes fall in, both ends included. */
export interface WriteRange {
  from: Date;
  to: Date;
}

/**
 * How an import ends: `completed`, or `open` (read to its end while its mirror said the
 * hour was still open: the next read starts over, src/backfill/read-and-store.ts).
 */
export type FinalState = 'completed' | 'open';

/**
 * Moves the checkpoint to `linesDone` and adds the counts of the lines in between. Called in
 * the chunk's transaction; `written` widens the hours the import holds open to the chunk's
 * pushes (in the same transaction as those pushes, so a snapshot that sees one sees the other);
 * with `end` it also closes the import in that state.
 */
export async function advanceCheckpoint(
  client: pg.ClientBase,
  id: number,
  linesDone: number,
  delta: CheckpointCounts,
  end: FinalState | null,
  written: WriteRange | null = null,
  /** An `open` end's error: which reasons the mirror gave. */
  openNote: string | null = null,
): Promise<void> {
  await client.query(
    `UPDATE backfill_files SET
       lines_done = $2, events_seen = events_seen + $3, pushes_seen = pushes_seen + $4,
       pushes_kept = pushes_kept + $5, pushes_created = pushes_created + $6,
       malformed = malformed + $7, updated_at = now(),
       writes_from = least(writes_from, $9::timestamptz),
       writes_to = greatest(writes_to, $10::timestamptz),
       state = coalesce($8::text, state),
       finished_at = CASE WHEN $8::text IS NOT NULL THEN now() ELSE finished_at END,
       error = CASE WHEN $8::text = 'open' THEN $11::text ELSE error END
     WHERE id = $1`,
    [
      id,
      linesDone,
      delta.events,
      delta.pushes,
      delta.kept,
      delta.created,
      delta.malformed,
      end,
      written?.from ?? null,
      written?.to ?? null,
      end === 'open' ? (openNote ?? OPEN_AT_MIRROR) : null,
    ],
  );
}

/** What an `open` checkpoint says, after the mirror's reasons. */
export const OPEN_AT_MIRROR =
  'its lines are stored, and it is read again from its start until the mirror says it is final';

/**
 * The attempt ended without reaching the end of the file; lines_done stays where it is.
 * `missing`: the mirror said it has no such hour (404/410), which another mirror may have.
 */
export async function failCheckpoint(
  client: pg.ClientBase,
  key: CheckpointKey,
  error: string,
  worker: string,
  state: 'failed' | 'missing' | 'open' = 'failed',
): Promise<void> {
  await client.query(
    `INSERT INTO backfill_files (file, scope, source_id, gap_id, state, error, worker, attempts, finished_at, mirror, hour)
     VALUES ($1, $2, $3, $4, $7, $5, $6, 1, now(), $8, $9)
     ON CONFLICT (file, scope, mirror) DO UPDATE SET
       state = excluded.state, error = excluded.error, worker = excluded.worker,
       updated_at = now(), finished_at = now(),
       -- An attempt that failed before its start (the file could not be opened) still counts.
       attempts = backfill_files.attempts + CASE WHEN backfill_files.state = 'running' THEN 0 ELSE 1 END`,
    // The error may quote a URL: stored without its userinfo (src/platform/redact.ts).
    [
      key.file,
      key.scope,
      key.sourceId,
      key.gapId,
      withoutUserinfo(error),
      worker,
      state,
      key.mirror,
      key.hour,
    ],
  );
}

// What a died import's checkpoint says, around its lines_done (set in SQL, where it is read).
const DIED_HEAD = 'interrupted: the process importing it died (killed, or out of memory) at line ';
const DIED_TAIL = '; the next import resumes there';

/**
 * A checkpoint the caller found `running` while holding its file's lock: the import that
 * left it so died (the lock dies with its session). Marks it failed with one more death,
 * once: the state guard keeps a concurrent sweep from counting it again.
 */
export async function markDied(client: pg.ClientBase, id: number): Promise<Checkpoint | null> {
  const r = await client.query<Row>(
    `UPDATE backfill_files SET state = 'failed', deaths = deaths + 1, updated_at = now(),
       finished_at = now(), error = $2 || lines_done::text || $3
     WHERE id = $1 AND state = 'running' RETURNING *`,
    [id, DIED_HEAD, DIED_TAIL],
  );
  return r.rows[0] ? fromRow(r.rows[0]) : null;
}

export interface DeadImport {
  id: number;
  file: string;
  scope: string;
  linesDone: number;
  deaths: number;
}

/**
 * The reconciler's sweep: `running` checkpoints whose file lock nobody holds were left by
 * a process that died (as ingestion runs left running become `interrupted`). Each is marked
 * as markDied does, in one statement that re-checks the lock, so a live import is never
 * touched.
 */
export async function interruptDeadImports(db: Db): Promise<DeadImport[]> {
  const running = await db
    .selectFrom('backfill_files')
    .select(['id', 'file', 'scope', 'mirror'])
    .where('state', '=', 'running')
    .execute();
  const dead: DeadImport[] = [];
  for (const c of running) {
    const key = fileLockKey(c.file, c.scope, c.mirror);
    const r = await sql<{ lines_done: string; deaths: number }>`
      UPDATE backfill_files SET state = 'failed', deaths = deaths + 1, updated_at = now(),
        finished_at = now(), error = ${DIED_HEAD} || lines_done::text || ${DIED_TAIL}
      WHERE id = ${c.id} AND state = 'running' AND NOT ${lockHeldSql(LockSpace.backfillFile, key)}
      RETURNING lines_done, deaths`.execute(db);
    const row = r.rows[0];
    if (row) {
      dead.push({
        id: Number(c.id),
        file: c.file,
        scope: c.scope,
        linesDone: Number(row.lines_done),
        deaths: row.deaths,
      });
    }
  }
  return dead;
}

/** The checkpoint of reading `source` (one file, from one mirror) for `target`'s scope. */
export function checkpointKeyFor(
  source: { key: string; mirror: string; hour: Date | null },
  target: { scope: string; sourceId: number | null; gapId: number | null },
): CheckpointKey {
  return {
    file: source.key,
    scope: target.scope,
    mirror: source.mirror,
    hour: source.hour,
    sourceId: target.sourceId,
    gapId: target.gapId,
  };
}

const HOUR_MS = 3_600_000;

/**
 * The hours an import will write into, announced at its start: a gap's window; an archive
 * hour's own hour and the one before it (crawl-time filing puts an hour's late events in
 * the next file); nothing for a local file, whose hours its chunks announce as they store.
 */
export function expectedWrites(
  source: { hour: Date | null },
  target: { window?: { from: Date; to: Date } },
): WriteRange | null {
  if (target.window) return { from: target.window.from, to: target.window.to };
  if (!source.hour) return null;
  const hour = hourOf(source.hour);
  return {
    from: new Date(hour.start.getTime() - HOUR_MS),
    to: new Date(hourEnd(hour).getTime() - 1),
  };
}
