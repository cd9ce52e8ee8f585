import type pg from 'pg';
import { systemClock } from '../platform/clock.ts';
import { LockSpace, unlockSession } from '../platform/db/locks.ts';
import { fileLockKey } from '../store/open-imports.ts';
import type { ByteSource } from './archive.ts';
import { checkpointKeyFor, readCheckpoint, ZERO_COUNTS } from './checkpoints.ts';
import { checkDeaths } from './deaths.ts';
import { FileBusy, lockFile } from './file-lock.ts';
import type {
  ImportDeps,
  ImportOptions,
  ImportOutcome,
  ImportResult,
  ImportTarget,
} from './import-types.ts';
import { readAndStore } from './read-and-store.ts';

/**
 * Importing one archive file (ADR 0040): stream → gunzip → NDJSON lines → PushEvents in
 * scope → chunks of CHUNK_ROWS pushes → the bulk store, one transaction per chunk, the
 * checkpoint advanced in the same transaction. While a chunk is being stored the next one
 * is parsed (one store in flight, so memory holds at most two chunks). A killed import
 * resumes after its last committed line; the natural key makes any re-read line a no-op, so
 * a push is stored once however often its file is read.
 */

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
  const key = checkpointKeyFor(source, target);
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
    quarantined: 0,
    idClashes: 0,
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
  const lockKey = fileLockKey(source.key, target.scope, source.mirror);
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
    const { checkpoint: previous, refusal } = await checkDeaths(
      client,
      await readCheckpoint(client, key),
      source.label,
      opts.force === true,
      log,
    );
    if (refusal) {
      result.checkpointId = previous!.id;
      result.error = { code: 'BACKFILL_KILLED_IMPORTER', message: refusal };
      log.warn(
        { event: 'backfill.file_failed', error_code: 'BACKFILL_KILLED_IMPORTER', error: refusal },
        refusal,
      );
      return finish('failed');
    }
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
