import type http from 'node:http';
import type { ByteBudget } from './body-budget.ts';

/**
 * Reading a request body whole, within the process-wide byte budget (body-budget.ts).
 *
 * Memory: a body with a Content-Length is read into ONE buffer of that size, reserved from
 * the budget before the first byte is read; the socket's 64 KB read buffers are released
 * as soon as they are copied. When the request is done, release() detaches the buffer's
 * memory at once (ArrayBuffer.prototype.transfer), instead of leaving tens of megabytes
 * to the next garbage collection: measured, RSS after a burst of large bodies comes down
 * (test/recovery/body-cap.test.ts). A chunked body (no length) is gathered chunk by chunk,
 * each taken from the budget as it arrives.
 */

export class BodyTooLarge extends Error {}
export class BudgetFull extends Error {}
export class BodyTimeout extends Error {}

export interface HeldBody {
  body: Buffer;
  /** Gives the bytes back to the budget and frees the buffer; call once, when done with it. */
  release(): void;
}

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
  const { limit, budget, declared } = opts;
  return new Promise((resolve, reject) => {
    let held = 0;
    let size = 0;
    let whole: Buffer | null = null;
    let chunks: Buffer[] = [];
    let done = false;
    const timer = setTimeout(() => fail(new BodyTimeout()), opts.timeoutMs);
    timer.unref();
    const fail = (err: Error) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      req.off('data', onData);
      req.pause();
      chunks = [];
      if (whole) free(whole);
      whole = null;
      budget.give(held);
      held = 0;
      reject(err);
    };
    const onData = (chunk: Buffer) => {
      if (size + chunk.length > (declared ?? limit)) return fail(new BodyTooLarge());
      if (whole) {
        chunk.copy(whole, size);
      } else {
        if (!budget.tryTake(chunk.length)) return fail(new BudgetFull());
        held += chunk.length;
        chunks.push(chunk);
      }
      size += chunk.length;
    };
    if (declared !== null && declared > 0) {
      if (!budget.tryTake(declared)) {
        fail(new BudgetFull());
        return;
      }
      held = declared;
      whole = Buffer.allocUnsafeSlow(declared);
    }
    req.on('data', onData);
    req.once('error', (err) => fail(err));
    req.once('end', () => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      const body = whole ? whole.subarray(0, size) : Buffer.concat(chunks, size);
      const owned = whole ?? body;
      chunks = [];
      let released = false;
      resolve({
        body,
        release() {
          if (released) return;
          released = true;
          budget.give(held);
          free(owned);
        },
      });
    });
  });
}
