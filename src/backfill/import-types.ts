import type pg from 'pg';
import type { Deps } from '../work/deps.ts';
import type { CheckpointCounts } from './checkpoints.ts';
import type { ScopeTest } from './events.ts';

/** What an archive file import is asked to do and what it answers (src/backfill/import.ts). */

export interface ImportTarget {
  /** 'all' | 'source:<id>' | 'gap:<id>': the checkpoint key beside the file. */
  scope: string;
  sourceId: number | null;
  gapId: number | null;
  /** Keep only the events a source's feed would list (default: all). */
  inScope?: ScopeTest;
  /** Keep only pushes created in this window (a gap's). */
  window?: { from: Date; to: Date };
}

export interface ImportOptions {
  /** A session the caller holds (the gap fill keeps its gap lock on it); default: one from the pool. */
  client?: pg.ClientBase;
  /** Read a completed file again (still idempotent: nothing is stored twice). */
  force?: boolean;
  /** Wait while another process imports the same file (else return 'busy'). */
  wait?: boolean;
  signal?: AbortSignal;
  chunkRows?: number;
  onProgress?: (p: ImportProgress) => void;
}

/**
 * `open`: read (its lines stored) or refused (503) while its mirror said the hour was still
 * open: not completed, read again later.
 */
export type ImportOutcome =
  | 'completed'
  | 'already_imported'
  | 'busy'
  | 'failed'
  | 'interrupted'
  | 'open';

export interface ImportProgress {
  label: string;
  bytesRead: number;
  bytesTotal: number | null;
  /** Lines read so far (including lines an earlier attempt committed). */
  lines: number;
  /** This attempt's counts, committed. */
  counts: CheckpointCounts;
}

export interface ImportResult {
  file: string;
  label: string;
  scope: string;
  outcome: ImportOutcome;
  checkpointId: number | null;
  /** Lines skipped because an earlier attempt had committed them. */
  resumedAt: number;
  lines: number;
  /** This attempt's counts (committed). */
  counts: CheckpointCounts;
  newActors: number;
  newRepositories: number;
  /** Pushes this attempt stored with commits_state 'pending'. */
  commitsPending: number;
  /** Every attempt's counts: what the checkpoint row holds. */
  totals: CheckpointCounts;
  /**
   * Lines of this attempt rejected and kept raw in rejected_events: the file's first
   * REJECTED_SAMPLE; the rest of `counts.malformed` are counted only.
   */
  quarantined: number;
  /**
   * Event id clashes this attempt recorded (event_id_clashes): ids its pushes share with
   * other pushes, of other eras (reused) or of the same (disputed).
   */
  idClashes: number;
  bytes: number;
  seconds: number;
  error: { code: string; message: string } | null;
}

/** db and config say who gets commits and what addresses become (absent: nobody, hashed). */
export type ImportDeps = Pick<Deps, 'pool' | 'logger' | 'workerId' | 'clock'> &
  Partial<Pick<Deps, 'db' | 'config'>>;
