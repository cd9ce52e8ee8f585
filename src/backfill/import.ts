import type pg from 'pg';
import { systemClock } from '../clock.ts';
import { commitsTargets, NO_TARGETS } from '../commits/targets.ts';
import type { CommitEmailMode } from '../config.ts';
import { isContentRefusal } from '../db/errors.ts';
import { int4Key, LockSpace, tryLockSession, unlockSession } from '../db/locks.ts';
import { kyselyOn } from '../db/session.ts';
import type { Deps } from '../deps.ts';
import { AppError } from '../errors.ts';
import {
  type BulkStoreResult,
  bulkStoreStaged,
  clearStage,
  dropStage,
  insertStagedEntities,
  PushesAlreadyHeld,
  prepareStage,
} from '../ingestion/bulk-store.ts';
import type { RejectionReason } from '../ingestion/rules.ts';
import { KnownEntities, StageBatch } from '../ingestion/stage-batch.ts';
import type { Logger } from '../log.ts';
import {
  logRejected,
  type QuarantineRow,
  quarantineEvents,
} from '../quarantine/rejected-events.ts';
import { type ByteSource, decoded, readError } from './archive.ts';
import {
  addCounts,
  advanceCheckpoint,
  type Checkpoint,
  type CheckpointCounts,
  type CheckpointKey,
  failCheckpoint,
  readCheckpoint,
  startCheckpoint,
  ZERO_COUNTS,
} from './checkpoints.ts';
import { classifyLine, mapArchivePush, type ScopeTest } from './events.ts';
import { lineBatches } from './lines.ts';

/**
 * Importing one archive file (ADR 0040, ADR 0041): stream → gunzip → NDJSON lines →
 * PushEvents in scope → chunks of CHUNK_ROWS pushes → the bulk store, one transaction per
 * chunk, the checkpoint advanced in the same transaction. While a chunk is being stored the
 * next one is parsed (one store in flight, so memory holds at most two chunks). A killed
 * import resumes after its last committed line; the natural key makes any re-read line a
 * no-op, so a push is stored once however often its file is read.
 */

export const CHUNK_ROWS = 5_000;
/** Events set aside logged one by one per import (event.rejected); the rest are counted. */
const LOGGED_MALFORMED = 5;
/** A chunk is cut at this many lines set aside, or lines read, whatever its pushes. */
const MAX_SET_ASIDE = 1_000;
const MAX_CHUNK_LINES = 200_000;

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

export type ImportOutcome = 'completed' | 'already_imported' | 'busy' | 'failed' | 'interrupted';

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
  bytes: number;
  seconds: number;
  error: { code: string; message: string } | null;
}

/** db and config say who gets commits and what addresses become (absent: nobody, hashed). */
export type ImportDeps = Pick<Deps, 'pool' | 'logger' | 'workerId' | 'clock'> &
  Partial<Pick<Deps, 'db' | 'config'>>;

/** Another process is importing the same (file, scope). */
class FileBusy extends AppError {
  constructor(label: string) {
    super('BACKFILL_BUSY', `${label} is being imported by another process`, { label });
  }
}

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener('abort', () => {
      clearTimeout(t);
      resolve();
    });
  });

async function lockFile(
  client: pg.ClientBase,
  lockKey: number,
  label: string,
  opts: ImportOptions,
  log: Logger,
): Promise<void> {
  let told = false;
  while (!(await tryLockSession(client, LockSpace.backfillFile, lockKey))) {
    if (!opts.wait || opts.signal?.aborted) throw new FileBusy(label);
    if (!told) {
      log.info(
        { event: 'backfill.busy', file: label },
        `${label} is being imported by another process; waiting`,
      );
      told = true;
    }
    await sleep(500, opts.signal);
  }
}

interface ChunkOutcome {
  stored: BulkStoreResult;
  /** Rows of the batch the database refused, by index. */
  refused: { index: number; reason: string }[];
}

/**
 * Stores rows [from, to) of a batch under a savepoint; when Postgres refuses them for a
 * row's content, the range is halved until the refused rows are found: one bad event never
 * costs the rest.
 */
async function storeIsolating(
  client: pg.ClientBase,
  batch: StageBatch,
  from: number,
  to: number,
  target: ImportTarget,
  mode: { expectNew: boolean; emails: CommitEmailMode },
  retried: boolean,
): Promise<ChunkOutcome> {
  await client.query('SAVEPOINT gpi_chunk');
  try {
    if (retried) await clearStage(client);
    const stored = await bulkStoreStaged(
      client,
      batch,
      { sourceId: target.sourceId, expectNew: mode.expectNew, emails: mode.emails },
      from,
      to,
    );
    await client.query('RELEASE SAVEPOINT gpi_chunk');
    return { stored, refused: [] };
  } catch (err) {
    if (err instanceof PushesAlreadyHeld) {
      // The file holds pushes we have: merge with conflict handling from now on.
      await client.query('ROLLBACK TO SAVEPOINT gpi_chunk');
      await client.query('RELEASE SAVEPOINT gpi_chunk');
      mode.expectNew = false;
      return storeIsolating(client, batch, from, to, target, mode, true);
    }
    if (!isContentRefusal(err)) throw err;
    await client.query('ROLLBACK TO SAVEPOINT gpi_chunk');
    await client.query('RELEASE SAVEPOINT gpi_chunk');
    if (to - from === 1) {
      return {
        stored: { created: 0, newActors: 0, newRepositories: 0, commitsPending: 0, idsFilledIn: 0 },
        refused: [{ index: from, reason: (err as Error).message }],
      };
    }
    const mid = from + Math.ceil((to - from) / 2);
    const a = await storeIsolating(client, batch, from, mid, target, mode, true);
    const b = await storeIsolating(client, batch, mid, to, target, mode, true);
    return {
      stored: {
        created: a.stored.created + b.stored.created,
        newActors: a.stored.newActors + b.stored.newActors,
        newRepositories: a.stored.newRepositories + b.stored.newRepositories,
        commitsPending: a.stored.commitsPending + b.stored.commitsPending,
        idsFilledIn: a.stored.idsFilledIn + b.stored.idsFilledIn,
      },
      refused: [...a.refused, ...b.refused],
    };
  }
}

/**
 * Imports one file (or resumes it). Never throws for what the file or the archive did —
 * that is the result's `failed` outcome with the error — only for programming or database
 * errors it cannot record.
 */
export async function importFile(
  deps: ImportDeps,
  source: ByteSource,
  target: ImportTarget,
  opts: ImportOptions = {},
): Promise<ImportResult> {
  const clock = deps.clock ?? systemClock;
  const started = clock.now().getTime();
  const log = deps.logger.child({ file: source.label, scope: target.scope });
  const key: CheckpointKey = {
    file: source.key,
    scope: target.scope,
    sourceId: target.sourceId,
    gapId: target.gapId,
  };
  const result: ImportResult = {
    file: source.key,
    label: source.label,
    scope: target.scope,
    outcome: 'failed',
    checkpointId: null,
    resumedAt: 0,
    lines: 0,
    counts: { ...ZERO_COUNTS },
    newActors: 0,
    newRepositories: 0,
    commitsPending: 0,
    totals: { ...ZERO_COUNTS },
    bytes: 0,
    seconds: 0,
    error: null,
  };
  const finish = (outcome: ImportOutcome) => {
    result.outcome = outcome;
    result.seconds = (clock.now().getTime() - started) / 1000;
    return result;
  };

  const own = opts.client ? null : await deps.pool.connect();
  const client: pg.ClientBase = opts.client ?? own!;
  let broken: Error | undefined;
  const lockKey = int4Key(`${source.key}\u0000${target.scope}`);
  let locked = false;
  try {
    try {
      await lockFile(client, lockKey, source.label, opts, log);
      locked = true;
    } catch (err) {
      if (!(err instanceof FileBusy)) throw err;
      result.error = { code: err.code, message: err.message };
      return finish('busy');
    }
    const previous = await readCheckpoint(client, key);
    if (previous?.state === 'completed' && !opts.force) {
      result.checkpointId = previous.id;
      result.totals = previous.counts;
      return finish('already_imported');
    }
    return await readAndStore(deps, client, source, target, opts, previous, result, finish, log);
  } catch (err) {
    broken = err as Error;
    throw err;
  } finally {
    if (locked) {
      await unlockSession(client, LockSpace.backfillFile, lockKey).catch((err: Error) => {
        broken ??= err;
      });
    }
    own?.release(broken);
  }
}

async function readAndStore(
  deps: ImportDeps,
  client: pg.ClientBase,
  source: ByteSource,
  target: ImportTarget,
  opts: ImportOptions,
  previous: Checkpoint | null,
  result: ImportResult,
  finish: (o: ImportOutcome) => ImportResult,
  log: Logger,
): Promise<ImportResult> {
  const key: CheckpointKey = {
    file: source.key,
    scope: target.scope,
    sourceId: target.sourceId,
    gapId: target.gapId,
  };
  const fail = async (err: unknown, outcome: ImportOutcome = 'failed') => {
    const e = readError(source.label, err);
    const code = (e as { code?: string }).code ?? 'ERROR';
    result.error = { code, message: e.message };
    const note =
      outcome === 'interrupted'
        ? `interrupted at line ${result.resumedAt + result.lines}; the next attempt resumes there`
        : e.message;
    await failCheckpoint(client, key, note, deps.workerId);
    log.warn(
      {
        event: 'backfill.file_failed',
        error_code: code,
        // An archive's failure is expected and its message says it all; anything else gets its stack.
        ...(e instanceof AppError ? { error: e.message } : { err: e }),
        outcome,
        lines_done: result.resumedAt + result.lines,
      },
      `${source.label}: ${outcome}: ${note}`,
    );
    return finish(outcome);
  };

  let opened: Awaited<ReturnType<ByteSource['open']>>;
  try {
    opened = await source.open(opts.signal);
  } catch (err) {
    if (err instanceof AppError) return fail(err);
    if (opts.signal?.aborted) return fail(err, 'interrupted');
    throw err;
  }
  // Resume only into the same file: a different size means the lines are not the same lines.
  const sameFile =
    previous !== null &&
    (previous.bytes === null || opened.bytes === null || previous.bytes === opened.bytes);
  const restart = opts.force === true || !sameFile;
  const checkpoint = await startCheckpoint(client, key, {
    bytes: opened.bytes,
    worker: deps.workerId,
    restart,
  });
  result.checkpointId = checkpoint.id;
  result.resumedAt = checkpoint.linesDone;
  let committed = checkpoint.counts;
  result.totals = committed;
  log.info(
    {
      event: 'backfill.file_started',
      checkpoint_id: checkpoint.id,
      resume_at_line: checkpoint.linesDone,
      bytes: opened.bytes,
    },
    `${source.label}: importing${checkpoint.linesDone ? ` from line ${checkpoint.linesDone + 1}` : ''}`,
  );

  await prepareStage(client);
  // A second session for the chunks' actors and repositories (see flush).
  const entityClient = await deps.pool.connect();
  let entityBroken: Error | undefined;
  // The last chunk's entity statement: still running on entityClient when a merge failed
  // (flush threw before chaining it), and awaited before entityClient goes back to the pool.
  // The client runs its statements in order, so this one settling means every one has.
  let lastEntities: Promise<unknown> | null = null;
  const chunkRows = opts.chunkRows ?? CHUNK_ROWS;
  const inScope = target.inScope;
  const window = target.window;
  // Two batches take turns: one filling while the other is stored. Their buffers are
  // reused for the whole file, so a chunk in waiting costs no garbage collection.
  const chunkBytes = chunkRows * 800;
  let pending = new StageBatch(chunkBytes);
  let spare: StageBatch | null = new StageBatch(chunkBytes);
  let delta: CheckpointCounts = { ...ZERO_COUNTS };
  let lineNo = 0;
  let loggedMalformed = 0;
  let linesAtFlush = checkpoint.linesDone;
  // The chunk transactions' session, for the statements written with Kysely.
  const session = kyselyOn(client);
  let inFlight: Promise<void> | null = null;
  let lastProgress = 0;
  // A failed chunk store is the database's failure, not the file's: it propagates.
  let storeError: unknown = null;

  const progress = (force: boolean) => {
    if (!opts.onProgress) return;
    const now = Date.now();
    if (!force && now - lastProgress < 200) return;
    lastProgress = now;
    opts.onProgress({
      label: source.label,
      bytesRead: result.bytes,
      bytesTotal: opened.bytes,
      lines: lineNo,
      counts: result.counts,
    });
  };

  // Malformed lines are counted and set aside in rejected_events with the chunk they belong
  // to (same transaction as its pushes and checkpoint: once per event, never lost).
  let setAside: QuarantineRow[] = [];
  const malformed = (
    reason: RejectionReason,
    message: string,
    eventId: string | null,
    eventType: string | null,
    raw: unknown,
  ) => {
    delta.malformed++;
    setAside.push({
      sourceId: target.sourceId,
      runId: null,
      eventId,
      eventType,
      reason,
      message: `${source.label} ${message}`,
      raw,
    });
  };
  // The first few are logged one by one, as the poll path logs them; the rest are counted.
  const logFirstRejected = (rows: QuarantineRow[]) => {
    const room = Math.max(0, LOGGED_MALFORMED - loggedMalformed);
    loggedMalformed += Math.min(room, rows.length);
    logRejected(log, rows.slice(0, room));
  };

  // One chunk's transaction: the rows, then the checkpoint, committed together.
  const known = new KnownEntities();
  // A file nothing was stored from yet is expected to hold only new pushes (ADR 0040); the
  // first push already held switches the import to merging with conflict handling.
  const mode = {
    expectNew: checkpoint.counts.kept === 0 && target.gapId === null,
    emails: deps.config?.commits.emails ?? 'hash',
  };
  // Who gets commits, read once for the file (ADR 0070): a pre-2025-10 line's inline
  // commits are stored, a targeted push without them is left pending for the fetcher.
  const targets = deps.db ? await commitsTargets(deps.db) : NO_TARGETS;
  // The chunk's pushes and its checkpoint, one transaction; its actors and repositories were
  // inserted just before, on the second connection (ADR 0040).
  const store = async (
    batch: StageBatch,
    upTo: number,
    counts: CheckpointCounts,
    last: boolean,
    entities: { newActors: number; newRepositories: number },
    aside: QuarantineRow[],
  ) => {
    await client.query('BEGIN');
    let firstSeen: QuarantineRow[] = [];
    let pendingCommits = 0;
    try {
      // Asynchronous commit: the chunk and its checkpoint commit together, so a database
      // crash that loses the last commits loses both, and the import re-reads those lines.
      await client.query('SET LOCAL synchronous_commit = off');
      const outcome = await storeIsolating(client, batch, 0, batch.length, target, mode, false);
      for (const { index, reason } of outcome.refused) {
        counts.malformed++;
        counts.kept--;
        aside.push({
          sourceId: target.sourceId,
          runId: null,
          eventId: batch.ids[index] ?? null,
          eventType: 'PushEvent',
          reason: 'store_failed',
          message: `${source.label}: the database refused it: ${reason}`,
          raw: { staged: batch.bytes(index, index + 1).toString('utf8') },
        });
      }
      if (aside.length > 0) firstSeen = (await quarantineEvents(session, aside)).firstSeen;
      counts.created += outcome.stored.created;
      pendingCommits = outcome.stored.commitsPending;
      await advanceCheckpoint(client, checkpoint.id, upTo, counts, last);
      await client.query('COMMIT');
    } catch (err) {
      await client.query('ROLLBACK').catch(() => {});
      storeError = err;
      throw err;
    }
    logFirstRejected(firstSeen);
    result.newActors += entities.newActors;
    result.newRepositories += entities.newRepositories;
    result.commitsPending += pendingCommits;
    known.remember(batch);
    result.lines = upTo - checkpoint.linesDone;
    result.counts = addCounts(result.counts, counts);
    committed = addCounts(committed, counts);
    result.totals = committed;
    progress(true);
    batch.clear();
    spare = batch;
  };

  // A chunk's entities go in on the second connection while the chunk before it is still
  // being merged; its pushes follow once both are done. At most one push merge in flight,
  // and the next chunk is parsed meanwhile. No transaction of ours ever waits for another
  // of ours while holding locks: the entity statement commits on its own, and a merge is
  // only started after the entity statement it needs has finished.
  const flush = async (last: boolean) => {
    const batch = pending;
    const counts = delta;
    // The batch holds every line up to here and none after: its checkpoint. (Read now: by
    // the time the merge runs, the parser is well into the next chunk.)
    const upTo = lineNo;
    const aside = setAside;
    setAside = [];
    linesAtFlush = lineNo;
    delta = { ...ZERO_COUNTS };
    const entities = insertStagedEntities(entityClient, batch).catch((err: unknown) => {
      storeError = err;
      entityBroken = err as Error;
      throw err;
    });
    entities.catch(() => {});
    lastEntities = entities;
    if (inFlight) await inFlight;
    pending = spare ?? new StageBatch(chunkBytes);
    spare = null;
    inFlight = entities.then((e) => store(batch, upTo, counts, last, e, aside));
    inFlight.catch(() => {}); // awaited below; never an unhandled rejection meanwhile
  };

  let stream: ReturnType<typeof decoded> | null = null;
  try {
    stream = decoded(opened, opened.gzip, (n) => {
      result.bytes += n;
    });
    for await (const batch of lineBatches(stream)) {
      if (opts.signal?.aborted) break;
      for (const line of batch) {
        lineNo++;
        if (lineNo <= checkpoint.linesDone) continue;
        const verdict = classifyLine(line);
        switch (verdict.kind) {
          case 'blank':
            break;
          case 'other':
            delta.events++;
            break;
          case 'malformed':
            malformed(
              verdict.reason,
              `line ${lineNo}: ${verdict.detail}`,
              verdict.eventId,
              null,
              verdict.raw,
            );
            break;
          case 'push': {
            // Mapped before the scope test, so a malformed push is counted whatever the scope.
            const row = mapArchivePush(verdict.event, verdict.text, lineNo);
            if ('rejected' in row) {
              malformed(row.rejected, row.message, row.eventId, 'PushEvent', verdict.event);
              break;
            }
            delta.events++;
            delta.pushes++;
            if (inScope && !inScope(verdict.event)) break;
            const at = row.createdAt.getTime();
            if (window && (at < window.from.getTime() || at > window.to.getTime())) break;
            delta.kept++;
            pending.add(row, known, targets);
          }
        }
        // A chunk is full of pushes, of lines set aside, or of lines (a narrow scope keeps
        // few pushes: its checkpoint still moves).
        if (
          pending.length >= chunkRows ||
          setAside.length >= MAX_SET_ASIDE ||
          lineNo - linesAtFlush >= MAX_CHUNK_LINES
        ) {
          await flush(false);
        }
      }
      progress(false);
    }
    if (opts.signal?.aborted) {
      await flush(false);
      await inFlight;
      stream.destroy();
      return await fail(new AppError('INTERRUPTED', 'stopped'), 'interrupted');
    }
    await flush(true);
    await inFlight;
  } catch (err) {
    stream?.destroy();
    if (storeError === null) {
      // The file failed (cut short, corrupt), not the database: every line read so far was
      // whole (a partial last line is never yielded), so it is kept and checkpointed.
      await flush(false).catch(() => {});
    }
    // Whatever chunk was in flight either committed or not; the checkpoint says which.
    await (inFlight as Promise<void> | null)?.catch(() => {});
    if (storeError !== null) throw storeError;
    return fail(err, opts.signal?.aborted ? 'interrupted' : 'failed');
  } finally {
    await dropStage(client).catch(() => {});
    await (lastEntities as Promise<unknown> | null)?.catch(() => {});
    entityClient.release(entityBroken);
  }
  log.info(
    {
      event: 'backfill.file_completed',
      checkpoint_id: checkpoint.id,
      lines: result.lines,
      resumed_at: result.resumedAt,
      events: result.counts.events,
      pushes: result.counts.pushes,
      kept: result.counts.kept,
      created: result.counts.created,
      malformed: result.counts.malformed,
      bytes: result.bytes,
    },
    `${source.label}: ${result.counts.created} pushes stored of ${result.counts.kept} kept (${result.counts.malformed} malformed lines)`,
  );
  return finish('completed');
}
