import type pg from 'pg';
import type { CommitEmailMode } from '../platform/config/config.ts';
import { isContentRefusal } from '../platform/db/errors.ts';
import { type Contender, EventIdRace, RACE_RETRIES } from '../store/event-ids.ts';
import {
  type BulkStoreResult,
  bulkStoreStaged,
  clearStage,
  emptyStoreResult,
  PushesAlreadyStored,
} from '../store/pushes.ts';
import type { StageBatch } from '../store/stage-batch.ts';
import type { ImportTarget } from './import-types.ts';

interface ChunkOutcome {
  stored: BulkStoreResult;
  /** Rows of the batch the database refused, by index. */
  refused: { index: number; reason: string }[];
}

/** How a chunk is merged; `expectNew` turns false at the first push already stored. */
export interface ChunkMode {
  expectNew: boolean;
  emails: CommitEmailMode;
  /** The mirror the file is read from, ranked in GHARCHIVE_URL for an event id in dispute. */
  contender: Partial<Contender>;
}

function sum(a: BulkStoreResult, b: BulkStoreResult): BulkStoreResult {
  return {
    created: a.created + b.created,
    newActors: a.newActors + b.newActors,
    newRepositories: a.newRepositories + b.newRepositories,
    commitsPending: a.commitsPending + b.commitsPending,
    idsFilledIn: a.idsFilledIn + b.idsFilledIn,
    clashes: [...a.clashes, ...b.clashes],
  };
}

/**
 * Stores rows [from, to) of a batch under a savepoint; when Postgres refuses them for a
 * row's content, the range is halved until the refused rows are found: one bad event never
 * costs the rest. Another writer storing a push under one of the batch's event ids at the
 * same moment (EventIdRace) is not content: the same rows are stored again, and then see it.
 */
export async function storeIsolating(
  client: pg.ClientBase,
  batch: StageBatch,
  from: number,
  to: number,
  target: ImportTarget,
  mode: ChunkMode,
  retried: boolean,
  races = 0,
): Promise<ChunkOutcome> {
  await client.query('SAVEPOINT gpi_chunk');
  try {
    if (retried) await clearStage(client);
    const stored = await bulkStoreStaged(
      client,
      batch,
      {
        sourceId: target.sourceId,
        expectNew: mode.expectNew,
        emails: mode.emails,
        contender: mode.contender,
      },
      from,
      to,
    );
    await client.query('RELEASE SAVEPOINT gpi_chunk');
    return { stored, refused: [] };
  } catch (err) {
    if (
      err instanceof PushesAlreadyStored ||
      (err instanceof EventIdRace && races < RACE_RETRIES)
    ) {
      // The file holds pushes we have: merge with conflict handling from now on. Or another
      // writer stored one of its ids meanwhile: the same merge again sees it.
      await client.query('ROLLBACK TO SAVEPOINT gpi_chunk');
      await client.query('RELEASE SAVEPOINT gpi_chunk');
      mode.expectNew = false;
      const again = races + (err instanceof EventIdRace ? 1 : 0);
      return storeIsolating(client, batch, from, to, target, mode, true, again);
    }
    if (!isContentRefusal(err)) throw err;
    await client.query('ROLLBACK TO SAVEPOINT gpi_chunk');
    await client.query('RELEASE SAVEPOINT gpi_chunk');
    if (to - from === 1) {
      return {
        stored: emptyStoreResult(),
        refused: [{ index: from, reason: (err as Error).message }],
      };
    }
    const mid = from + Math.ceil((to - from) / 2);
    const a = await storeIsolating(client, batch, from, mid, target, mode, true);
    const b = await storeIsolating(client, batch, mid, to, target, mode, true);
    return { stored: sum(a.stored, b.stored), refused: [...a.refused, ...b.refused] };
  }
}
