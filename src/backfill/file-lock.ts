import type pg from 'pg';
import { LockSpace, tryLockSession } from '../platform/db/locks.ts';
import { AppError } from '../platform/errors.ts';
import type { Logger } from '../platform/log.ts';
import type { ImportOptions } from './import-types.ts';

/** One import of a (file, scope) at a time, across processes: a session advisory lock. */

/** Another process is importing the same (file, scope). */
export class FileBusy extends AppError {
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

export async function lockFile(
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
