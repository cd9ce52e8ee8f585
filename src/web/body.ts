import type http from 'node:http';
import type { ByteBudget } from './body-budget.ts';

/**
 * Reading a request body whole, within the process-wide byte budget (body-budget.ts).
 *
 * Charged by what arrives (ADR 0124): nothing is taken or allocated before the first byte.
 * The body is read into ONE buffer that grows by doubling (from 64 KB, never past the
 * declared length or the limit), and the budget is charged for that buffer as it grows —
 * at most twice what was received, and exactly the body once a declared length is reached.
 * The socket's 64 KB read buffers are released as soon as they are copied, and a buffer
 * outgrown is detached at once, as the last one is when the request is done
 * (ArrayBuffer.prototype.transfer), instead of leaving tens of megabytes to the next
 * garbage collection: measured, RSS after a burst of large bodies comes down
 * (test/recovery/body-cap.test.ts).
 */

export class BodyTooLarge extends Error {}
export class BudgetFull extends Error {}
export class BodyTimeout extends Error {}

export interface HeldBody {
  body: Buffer;
  /** Gives the bytes back to the budget and frees the buffer; call once, when done with it. */
  release(): void;
}

/** The first buffer: one socket read, no more. */
const FIRST_BUFFER_BYTES = 64 * 1024;

/** Frees a buffer's memory now when it owns its ArrayBuffer (not a slice of Node's pool). */
function free(buf: Buffer): void {
  if (buf.byteOffset === 0 && buf.buffer.byteLength === buf.length && buf.length > 64 * 1024) {
    (buf.buffer as ArrayBuffer & { transfer(n: number): ArrayBuffer }).transfer(0);
  }
}

export function readBody(
  req: http.IncomingMessage,
  opts: { limit: number; budget: ByteBudget; declared: number | null; timeoutMs: number },
): Promise<HeldBody> {
  const { budget, declared } = opts;
  const max = declared ?? opts.limit;
  return new Promise((resolve, reject) => {
    let held = 0;
    let size = 0;
    let buf: Buffer | null = null;
    let done = false;
    budget.noteReading(1);
    const timer = setTimeout(() => fail(new BodyTimeout()), opts.timeoutMs);
    timer.unref();
    const fail = (err: Error) => {
      if (done) return;
      done = true;
      budget.noteReading(-1);
      clearTimeout(timer);
      req.off('data', onData);
      req.pause();
      if (buf) free(buf);
      buf = null;
      budget.give(held);
      held = 0;
      reject(err);
    };
    const onData = (chunk: Buffer) => {
      if (size + chunk.length > max) return fail(new BodyTooLarge());
      if (buf === null || size + chunk.length > buf.length) {
        const want = Math.min(
          max,
          Math.max(size + chunk.length, buf ? buf.length * 2 : FIRST_BUFFER_BYTES),
        );
        // A declared length says how large the body will be: a body declared large is large
        // from its first byte, so it cannot creep into the small bodies' reserve.
        if (!budget.tryTake(want - held, declared ?? want)) return fail(new BudgetFull());
        held = want;
        const next = Buffer.allocUnsafeSlow(want);
        if (buf) {
          buf.copy(next, 0, 0, size);
          free(buf);
        }
        buf = next;
      }
      chunk.copy(buf, size);
      size += chunk.length;
    };
    req.on('data', onData);
    req.once('error', (err) => fail(err));
    req.once('end', () => {
      if (done) return;
      done = true;
      budget.noteReading(-1);
      clearTimeout(timer);
      const owned = buf;
      const body = owned ? owned.subarray(0, size) : Buffer.alloc(0);
      let released = false;
      resolve({
        body,
        release() {
          if (released) return;
          released = true;
          budget.give(held);
          if (owned) free(owned);
        },
      });
    });
  });
}
