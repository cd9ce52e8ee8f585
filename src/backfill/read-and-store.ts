import type pg from 'pg';
import { kyselyOn } from '../platform/db/session.ts';
import { AppError } from '../platform/errors.ts';
import type { Logger } from '../platform/log.ts';
import { commitsOffReason, commitsTargetsFor, NO_TARGETS } from '../store/commits-targets.ts';
import {
  archiveMirrorId,
  type IdClash,
  logIdClashes,
  mirrorRank,
  runOnClient,
} from '../store/event-ids.ts';
import { pushesFinal } from '../store/open-hours.ts';
import { upkeepAfterImport } from '../store/push-upkeep.ts';
import { dropStage, insertStagedEntities, prepareStage } from '../store/pushes.ts';
import {
  logRejected,
  REJECTED_SAMPLE,
  type RejectionRow,
  storeRejectedEvents,
} from '../store/rejected-events.ts';
import type { RejectionReason } from '../store/rules.ts';
import { KnownEntities, StageBatch } from '../store/stage-batch.ts';
import {
  ArchiveHourMissing,
  ArchiveHourOpen,
  type ByteSource,
  decoded,
  inlineSourceOf,
  readError,
} from './archive.ts';
import {
  addCounts,
  advanceCheckpoint,
  type Checkpoint,
  type CheckpointCounts,
  checkpointKeyFor,
  expectedWrites,
  failCheckpoint,
  OPEN_AT_MIRROR,
  readFromAnotherMirror,
  startCheckpoint,
  ZERO_COUNTS,
} from './checkpoints.ts';
import { type ChunkMode, storeIsolating } from './chunk-store.ts';
import { classifyLine, mapArchivePush } from './events.ts';
import type {
  ImportDeps,
  ImportOptions,
  ImportOutcome,
  ImportResult,
  ImportTarget,
} from './import-types.ts';
import { lineBatches } from './lines.ts';

/**
 * Reading an opened archive file into the bulk store, chunk by chunk (src/backfill/import.ts
 * holds the lock and the checkpoint decision around it).
 */

const CHUNK_ROWS = 5_000;
/** Rejected events logged one by one per import (event.rejected); the rest are counted. */
const LOGGED_MALFORMED = 5;
/** Event id clashes logged one by one per import (event.id_clash); the rest are counted. */
const LOGGED_CLASHES = 5;
/** A chunk is cut at this many lines rejected, or lines read, whatever its pushes. */
const MAX_REJECTED = 1_000;
const MAX_CHUNK_LINES = 200_000;

export async function readAndStore(
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
  const key = checkpointKeyFor(source, target);
  const fail = async (err: unknown, outcome: ImportOutcome = 'failed') => {
    const e = readError(source.label, err);
    const code = (e as { code?: string }).code ?? 'ERROR';
    result.error = { code, message: e.message };
    const note =
      outcome === 'interrupted'
        ? `interrupted at line ${result.resumedAt + result.lines}; the next attempt resumes there`
        : e.message;
    await failCheckpoint(
      client,
      key,
      note,
      deps.workerId,
      e instanceof ArchiveHourMissing
        ? 'missing'
        : e instanceof ArchiveHourOpen
          ? 'open'
          : 'failed',
    );
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
    if (err instanceof ArchiveHourOpen) return fail(err, 'open');
    if (err instanceof AppError) return fail(err);
    if (opts.signal?.aborted) return fail(err, 'interrupted');
    throw err;
  }
  // Resume only into the same file: a different size means the lines are not the same lines.
  // A copy read while its mirror said the hour was open is read again from its start: the
  // mirror's later copy has lines where the earlier one had none.
  const sameFile =
    previous !== null &&
    previous.state !== 'open' &&
    (previous.bytes === null || opened.bytes === null || previous.bytes === opened.bytes);
  const restart = opts.force === true || !sameFile;
  const checkpoint = await startCheckpoint(client, key, {
    bytes: opened.bytes,
    worker: deps.workerId,
    restart,
    writes: expectedWrites(source, target),
  });
  // What the mirror says of the hour decides how the import ends: completed, or open.
  const mirrorOpen = pushesFinal(opened.open) ? null : opened.open;
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
  // The created_at range of the chunk's kept pushes: the hours it writes into.
  let written: { from: number; to: number } | null = null;
  // The same over the whole attempt: the months the upkeep after the file looks after.
  let fileWritten: { from: number; to: number } | null = null;
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

  // Malformed lines are counted and rejected (rejected_events) with the chunk they belong
  // to (same transaction as its pushes and checkpoint: once per event, never lost). Only
  // the file's first REJECTED_SAMPLE are kept raw: a million bad lines are a count, not a
  // million rows. The checkpoint's count says how many came before this attempt.
  let rejectedLines: RejectionRow[] = [];
  let malformedInFile = checkpoint.counts.malformed;
  const malformed = (
    reason: RejectionReason,
    message: string,
    eventId: string | null,
    eventType: string | null,
    raw: unknown,
  ) => {
    delta.malformed++;
    if (++malformedInFile > REJECTED_SAMPLE) return;
    rejectedLines.push({
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
  const logFirstRejected = (rows: RejectionRow[]) => {
    const room = Math.max(0, LOGGED_MALFORMED - loggedMalformed);
    loggedMalformed += Math.min(room, rows.length);
    logRejected(log, rows.slice(0, room));
  };

  // One chunk's transaction: the rows, then the checkpoint, committed together.
  const known = new KnownEntities();
  // A file nothing was stored from yet is expected to hold only new pushes; the first push
  // already stored switches the import to merging with conflict handling.
  // Another mirror's copy of the file read already: most pushes are stored.
  // The file's mirror ranks its pushes against other mirrors' for an event id.
  const mirrors = deps.config?.archive.mirrors ?? [];
  const mode: ChunkMode = {
    expectNew:
      checkpoint.counts.kept === 0 &&
      target.gapId === null &&
      !(await readFromAnotherMirror(client, key)),
    emails: deps.config?.commits.emails ?? 'hash',
    contender: {
      rank: mirrorRank(source.mirror, mirrors),
      mirrorId: await archiveMirrorId(runOnClient(client), source.mirror),
      mirror: source.mirror || null,
      mirrors,
    },
  };
  let loggedClashes = 0;
  const logFirstClashes = (clashes: IdClash[]) => {
    const room = Math.max(0, LOGGED_CLASHES - loggedClashes);
    loggedClashes += Math.min(room, clashes.length);
    logIdClashes(log, clashes.slice(0, room));
  };
  // Who gets commits, read once for the file: a pre-2025-10 line's inline commits are
  // stored, a covered push without them is left pending for the fetcher (or, in a process
  // without a credential, skipped awaiting one).
  const off =
    !deps.db || (deps.config !== undefined && commitsOffReason(deps.config.github) !== null);
  const targets = deps.db ? await commitsTargetsFor(off, deps.db) : NO_TARGETS;
  // Who vouches for the file's inline commits, and COMMIT_EMAILS for its payloads.
  const inline = { source: inlineSourceOf(source.mirror), emails: mode.emails };
  // The chunk's pushes and its checkpoint, one transaction; its actors and repositories were
  // inserted just before, on the second connection.
  const store = async (
    batch: StageBatch,
    upTo: number,
    counts: CheckpointCounts,
    last: boolean,
    entities: { newActors: number; newRepositories: number },
    rejected: RejectionRow[],
    range: { from: number; to: number } | null,
  ) => {
    await client.query('BEGIN');
    let firstSeen: RejectionRow[] = [];
    let clashes: IdClash[] = [];
    let pendingCommits = 0;
    try {
      // Asynchronous commit: the chunk and its checkpoint commit together, so a database
      // crash that loses the last commits loses both, and the import re-reads those lines.
      // No JIT: the merge's estimates on a small or unanalysed table can pass jit_above_cost,
      // and compiling its expressions cost ~0.7 s a chunk for no gain.
      await client.query('SET LOCAL synchronous_commit = off; SET LOCAL jit = off');
      const outcome = await storeIsolating(client, batch, 0, batch.length, target, mode, false);
      for (const { index, reason } of outcome.refused) {
        counts.malformed++;
        counts.kept--;
        rejected.push({
          sourceId: target.sourceId,
          runId: null,
          eventId: batch.ids[index] ?? null,
          eventType: 'PushEvent',
          reason: 'store_failed',
          message: `${source.label}: the database refused it: ${reason}`,
          raw: { staged: batch.bytes(index, index + 1).toString('utf8') },
        });
      }
      if (rejected.length > 0)
        firstSeen = (await storeRejectedEvents(session, rejected, mode.emails)).firstSeen;
      counts.created += outcome.stored.created;
      pendingCommits = outcome.stored.commitsPending;
      clashes = outcome.stored.clashes;
      await advanceCheckpoint(
        client,
        checkpoint.id,
        upTo,
        counts,
        last ? (mirrorOpen ? 'open' : 'completed') : null,
        range && { from: new Date(range.from), to: new Date(range.to) },
        mirrorOpen &&
          `the mirror said the hour is still open (${mirrorOpen.join(', ')}): ${OPEN_AT_MIRROR}`,
      );
      await client.query('COMMIT');
    } catch (err) {
      await client.query('ROLLBACK').catch(() => {});
      storeError = err;
      throw err;
    }
    logFirstRejected(firstSeen);
    logFirstClashes(clashes);
    result.idClashes += clashes.length;
    result.quarantined += rejected.length;
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
    const rejected = rejectedLines;
    rejectedLines = [];
    const range = written;
    written = null;
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
    inFlight = entities.then((e) => store(batch, upTo, counts, last, e, rejected, range));
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
            pending.add(row, known, targets, inline);
            written = written
              ? { from: Math.min(written.from, at), to: Math.max(written.to, at) }
              : { from: at, to: at };
            fileWritten = fileWritten
              ? { from: Math.min(fileWritten.from, at), to: Math.max(fileWritten.to, at) }
              : { from: at, to: at };
          }
        }
        // A chunk is full of pushes, of lines rejected, or of lines (a narrow scope keeps
        // few pushes: its checkpoint still moves).
        if (
          pending.length >= chunkRows ||
          rejectedLines.length >= MAX_REJECTED ||
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
  if (fileWritten !== null && result.counts.created > 0) {
    await upkeepAfterImport(client, fileWritten, log, opts.signal);
  }
  if (mirrorOpen) {
    log.warn(
      {
        event: 'backfill.file_open',
        checkpoint_id: checkpoint.id,
        mirror_open: mirrorOpen,
        lines: result.lines,
        kept: result.counts.kept,
        created: result.counts.created,
      },
      `${source.label}: read, but the mirror says the hour is still open (${mirrorOpen.join(', ')}): ${result.counts.created} pushes stored; it is read again until the mirror says it is final`,
    );
    result.error = {
      code: 'ARCHIVE_HOUR_OPEN',
      message: `the mirror says the hour is still open (${mirrorOpen.join(', ')})`,
    };
    return finish('open');
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
      malformed_sampled: result.quarantined,
      id_clashes: result.idClashes,
      bytes: result.bytes,
    },
    `${source.label}: ${result.counts.created} pushes stored of ${result.counts.kept} kept (${result.counts.malformed} malformed lines${result.idClashes ? `, ${result.idClashes} event id clashes` : ''})`,
  );
  return finish('completed');
}
