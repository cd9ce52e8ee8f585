import { AppError } from '../platform/errors.ts';

/**
 * /archive's share of bin/web (ADR 0185): at most `slots` of its requests use the database at
 * once (its own pool has that many connections, src/web/pools.ts), at most `queue` more wait
 * for a slot, for at most `waitMs`; past either the request is refused with ArchiveBusy (a
 * 503 with Retry-After) instead of piling up. Waiting for another request's build of an hour
 * holds no slot, but counts against `waiting`, bounded the same way.
 */

export class ArchiveBusy extends AppError {
  readonly retryAfterSeconds: number;
  constructor(why: string, retryAfterSeconds: number) {
    super('ARCHIVE_BUSY', `archive busy: ${why}`, { retry_after: retryAfterSeconds });
    this.retryAfterSeconds = retryAfterSeconds;
  }
}

export interface GateOptions {
  /** Requests using the database at once (the archive pool's size). */
  slots: number;
  /** Requests waiting for a slot beyond those. */
  queue: number;
  /** Longest wait for a slot. */
  waitMs: number;
  /** Requests waiting for another's build of an hour at once. */
  waiting: number;
}

export const DEFAULT_GATE: Omit<GateOptions, 'slots'> = { queue: 32, waitMs: 15_000, waiting: 64 };

/** Seconds a refused reader is asked to wait. */
export const BUSY_RETRY_AFTER_SECONDS = 5;

export interface GateStats {
  slots: number;
  inUse: number;
  queued: number;
  waiting: number;
  refused: number;
}

export interface ArchiveGate {
  /** Runs `fn` holding a slot; throws ArchiveBusy when none frees in time or the queue is full. */
  withSlot<T>(fn: () => Promise<T>): Promise<T>;
  /** Waits for `p` (another request's build) without a slot; ArchiveBusy when too many wait. */
  waitFor<T>(p: Promise<T>): Promise<T>;
  stats(): GateStats;
}

export function createArchiveGate(o: GateOptions): ArchiveGate {
  let inUse = 0;
  let waiting = 0;
  let refused = 0;
  const queue: { grant: () => void; timer: NodeJS.Timeout }[] = [];

  const release = () => {
    const next = queue.shift();
    if (next) {
      clearTimeout(next.timer);
      next.grant();
    } else inUse--;
  };

  const acquire = () =>
    new Promise<void>((resolve, reject) => {
      if (inUse < o.slots) {
        inUse++;
        return resolve();
      }
      if (queue.length >= o.queue) {
        refused++;
        return reject(
          new ArchiveBusy(
            `${o.slots} requests read the database and ${o.queue} wait`,
            BUSY_RETRY_AFTER_SECONDS,
          ),
        );
      }
      const entry = {
        // The slot passes from the releasing request to this one: inUse stays as it is.
        grant: () => resolve(),
        timer: setTimeout(() => {
          const at = queue.indexOf(entry);
          if (at >= 0) queue.splice(at, 1);
          refused++;
          reject(
            new ArchiveBusy(`no database slot within ${o.waitMs} ms`, BUSY_RETRY_AFTER_SECONDS),
          );
        }, o.waitMs),
      };
      entry.timer.unref();
      queue.push(entry);
    });

  return {
    async withSlot(fn) {
      await acquire();
      try {
        return await fn();
      } finally {
        release();
      }
    },
    async waitFor(p) {
      if (waiting >= o.waiting) {
        refused++;
        throw new ArchiveBusy(
          `${o.waiting} requests wait for hours being built`,
          BUSY_RETRY_AFTER_SECONDS,
        );
      }
      waiting++;
      try {
        return await p;
      } finally {
        waiting--;
      }
    },
    stats: () => ({ slots: o.slots, inUse, queued: queue.length, waiting, refused }),
  };
}
