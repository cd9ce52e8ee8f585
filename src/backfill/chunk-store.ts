import type pg from 'pg';
import type { CommitEmailMode } from '../config.ts';
import { isContentRefusal } from '../db/errors.ts';
import {
  type BulkStoreResult,
  bulkStoreStaged,
  clearStage,
  PushesAlreadyHeld,
} from '../ingestion/bulk-store.ts';
import type { StageBatch } from '../ingestion/stage-batch.ts';
import type { ImportTarget } from './import-types.ts';

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
export async function storeIsolating(
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
