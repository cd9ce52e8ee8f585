import type {
  BackfillFileState,
  BigId,
  GapState,
  Generated,
  NullableTimestamp,
  Timestamp,
} from './columns.ts';

/** The archive's tables: gaps and their fills, file checkpoints, hourly coverage, mirrors. */

/** A window a run could not read and how filling it from the archive went. */
export interface GapsTable {
  id: Generated<BigId>;
  source_id: BigId;
  run_id: BigId | null;
  from_at: Timestamp;
  to_at: Timestamp;
  state: Generated<GapState>;
  events_recovered: Generated<number>;
  filled_at: NullableTimestamp;
  attempts: Generated<number>;
  last_error: string | null;
  next_attempt_at: Generated<Timestamp>;
  created_at: Generated<Timestamp>;
  updated_at: Generated<Timestamp>;
  /** Set while a fill attempt is open; found set under the gap's lock: that fill died. */
  fill_started_at: NullableTimestamp;
  /** Fill attempts whose process died mid-fill; the second makes the gap unavailable. */
  fill_deaths: Generated<number>;
  /** The archive hour the open attempt is reading (or last read). */
  fill_hour: string | null;
}

/** The checkpoint of one file import (bin/backfill or a gap fill): resume point and counters. */
export interface BackfillFilesTable {
  id: Generated<BigId>;
  file: string;
  scope: string;
  source_id: BigId | null;
  gap_id: BigId | null;
  state: Generated<BackfillFileState>;
  lines_done: Generated<BigId>;
  events_seen: Generated<BigId>;
  pushes_seen: Generated<BigId>;
  pushes_kept: Generated<BigId>;
  pushes_created: Generated<BigId>;
  malformed: Generated<BigId>;
  bytes: BigId | null;
  attempts: Generated<number>;
  error: string | null;
  worker: string | null;
  started_at: Generated<Timestamp>;
  updated_at: Generated<Timestamp>;
  finished_at: NullableTimestamp;
  /** Imports of this file whose process died mid-file; after two it is not retried unforced. */
  deaths: Generated<number>;
  /** The mirror (GHARCHIVE_URL entry) an archive hour was read from; '' before mirrors. */
  mirror: Generated<string>;
  /** The archive hour read (NULL for a local file). */
  hour: NullableTimestamp;
  /** The created_at range of the pushes this import writes: its hours are open until it completes. */
  writes_from: NullableTimestamp;
  writes_to: NullableTimestamp;
}

/** View hourly_coverage (and hourly_coverage_between(since, until)): one row per UTC hour. */
export interface HourlyCoverageView {
  hour: Timestamp;
  pushes: BigId;
  poll: BigId;
  webhook: BigId;
  archive: BigId;
  gaps_open: BigId;
  mirrors_read: BigId;
}

/** GHARCHIVE_URL entries pushes were read from ('' = a local file), migration 2026-12-01T1400. */
export interface ArchiveMirrorsTable {
  id: Generated<number>;
  url: string;
  first_seen_at: Generated<Timestamp>;
}
