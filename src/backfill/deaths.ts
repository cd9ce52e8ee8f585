import type pg from 'pg';
import { MAX_DEATHS } from '../platform/attempts.ts';
import type { Logger } from '../platform/log.ts';
import { type Checkpoint, markDied } from './checkpoints.ts';

/**
 * Imports that die (ADR 0061). Called by an import holding its file's lock, with the
 * checkpoint it found: one left `running` was its dead predecessor's, and counts a death;
 * a file that killed its importer MAX_DEATHS times is not read again unless forced
 * — a hostile file must not crash-loop whoever keeps retrying it.
 */
export async function checkDeaths(
  client: pg.ClientBase,
  found: Checkpoint | null,
  label: string,
  force: boolean,
  log: Logger,
): Promise<{ checkpoint: Checkpoint | null; refusal: string | null }> {
  let checkpoint = found;
  if (found?.state === 'running') {
    checkpoint = (await markDied(client, found.id)) ?? found;
    log.warn(
      {
        event: 'backfill.file_died',
        checkpoint_id: found.id,
        lines_done: checkpoint.linesDone,
        deaths: checkpoint.deaths,
      },
      `${label}: the import before this one died at line ${checkpoint.linesDone} (killed, or out of memory); ${checkpoint.deaths} of ${MAX_DEATHS} deaths`,
    );
  }
  if (!checkpoint || checkpoint.state === 'completed' || force)
    return { checkpoint, refusal: null };
  if (checkpoint.deaths < MAX_DEATHS) return { checkpoint, refusal: null };
  return {
    checkpoint,
    refusal: `${label} killed its importer ${checkpoint.deaths} times (last at line ${checkpoint.linesDone}); not read again: --force reads it again`,
  };
}
